// A client reconnects after the server is stopped and started again on the same port and data.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.voltdb.VoltTable;
import org.voltdb.client.Client;
import org.voltdb.client.ClientResponse;
import org.voltdb.client.NoConnectionsException;
import org.voltdb.client.ProcCallException;

class RestartTest {
    private static LockstepServer server;

    @BeforeAll
    static void start() throws Exception {
        server = LockstepServer.start("restart");
    }

    @AfterAll
    static void stop() {
        server.close();
    }

    @Test
    void schemaSurvivesARestartAndClientsReconnect() throws Exception {
        int port = server.port();
        Client before = Clients.connect(port);
        try {
            Clients.adHoc(before, "CREATE TABLE kept (id INTEGER NOT NULL, note VARCHAR(20), PRIMARY KEY (id))");
            Clients.adHoc(before, "PARTITION TABLE kept ON COLUMN id");
            Clients.adHoc(before, "CREATE PROCEDURE KeptCount AS SELECT COUNT(*) FROM kept");
            Clients.adHoc(before, "CREATE PROCEDURE KeptNote PARTITION ON TABLE kept COLUMN id FROM FILE 'KeptNote.lua'"
                    + " SOURCE $lua$ local q = sql [[SELECT note FROM kept WHERE id = ?]]"
                    + " return function(id) local r = q:first(id); if not r then abort('none') end; return r.note end $lua$");
            assertEquals(1L, before.callProcedure("KEPT.insert", 1, "one").getResults()[0].asScalarLong());

            server.restart();
            assertEquals(port, server.port());

            // The old connection is gone: calls on it fail with CONNECTION_LOST or no connection.
            Exception lost = assertThrows(Exception.class, () -> before.callProcedure("@Ping"));
            if (lost instanceof ProcCallException) {
                assertEquals(ClientResponse.CONNECTION_LOST, ((ProcCallException) lost).getClientResponse().getStatus());
            } else {
                assertTrue(lost instanceof NoConnectionsException, lost.toString());
            }
        } finally {
            Clients.closeQuietly(before);
        }

        Client after = Clients.connect(port);
        try {
            assertEquals(ClientResponse.SUCCESS, after.callProcedure("@Ping").getStatus());
            // The schema, the default procedures and the declared procedures all came back.
            assertEquals(1L, after.callProcedure("KEPT.insert", 2, "two").getResults()[0].asScalarLong());
            VoltTable note = after.callProcedure("KeptNote", 2).getResults()[0];
            note.advanceRow();
            assertEquals("two", note.getString(0));
            VoltTable cols = Clients.adHoc(after, "SELECT id, note FROM kept WHERE id = 2").getResults()[0];
            assertEquals(2, cols.getColumnCount());
            // The SQL procedure came back too, and so did the row committed before the
            // restart (the command log is on, in sync mode, by default).
            assertEquals(2L, after.callProcedure("KeptCount").getResults()[0].asScalarLong());
            VoltTable one = Clients.adHoc(after, "SELECT note FROM kept WHERE id = 1").getResults()[0];
            assertTrue(one.advanceRow());
            assertEquals("one", one.getString(0));
        } finally {
            Clients.closeQuietly(after);
        }
    }
}
