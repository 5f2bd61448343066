// Connecting the real 10.1.1 client: affinity on and off, credentials, two clients, @Ping.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.voltdb.VoltTable;
import org.voltdb.client.Client;
import org.voltdb.client.ClientResponse;

class ConnectionTest {
    private static LockstepServer server;

    @BeforeAll
    static void start() throws Exception {
        server = LockstepServer.start("connection");
        Client c = Clients.connect(server.port());
        try {
            Clients.adHoc(c, "CREATE TABLE conn_kv (k BIGINT NOT NULL, v VARCHAR(32), PRIMARY KEY (k))");
            Clients.adHoc(c, "PARTITION TABLE conn_kv ON COLUMN k");
        } finally {
            Clients.closeQuietly(c);
        }
    }

    @AfterAll
    static void stop() {
        server.close();
    }

    @Test
    void defaultConfigConnectsPingsAndReportsBuild() throws Exception {
        Client c = Clients.connect(server.port());
        try {
            ClientResponse ping = c.callProcedure("@Ping");
            assertEquals(ClientResponse.SUCCESS, ping.getStatus());
            String build = c.getBuildString();
            assertNotNull(build);
            assertFalse(build.isBlank(), "build string must not be empty");
            Object[] instance = c.getInstanceId();
            assertNotNull(instance);
            assertEquals(2, instance.length);
            assertEquals(1, c.getConnectedHostList().size());
            assertEquals(server.port(), c.getConnectedHostList().get(0).getPort());
        } finally {
            Clients.closeQuietly(c);
        }
    }

    @Test
    void affinityOffWorksWithCrud() throws Exception {
        Client c = Clients.connect(server.port(), false);
        try {
            assertEquals(ClientResponse.SUCCESS, c.callProcedure("@Ping").getStatus());
            assertEquals(1, Clients.scalar(c.callProcedure("CONN_KV.insert", 11L, "eleven")));
            VoltTable t = c.callProcedure("CONN_KV.select", 11L).getResults()[0];
            assertEquals(1, t.getRowCount());
            t.advanceRow();
            assertEquals(11L, t.getLong("K"));
            assertEquals("eleven", t.getString("V"));
        } finally {
            Clients.closeQuietly(c);
        }
    }

    @Test
    void twoClientsAtOnceSeeEachOthersWrites() throws Exception {
        Client a = Clients.connect(server.port());
        Client b = Clients.connect(server.port(), false);
        try {
            assertEquals(1, Clients.scalar(a.callProcedure("CONN_KV.insert", 21L, "from a")));
            assertEquals(1, Clients.scalar(b.callProcedure("CONN_KV.insert", 22L, "from b")));
            VoltTable fromB = b.callProcedure("CONN_KV.select", 21L).getResults()[0];
            fromB.advanceRow();
            assertEquals("from a", fromB.getString("V"));
            VoltTable fromA = a.callProcedure("CONN_KV.select", 22L).getResults()[0];
            fromA.advanceRow();
            assertEquals("from b", fromA.getString("V"));
            VoltTable both = Clients.adHoc(a, "SELECT k FROM conn_kv WHERE k IN (21, 22) ORDER BY k")
                    .getResults()[0];
            assertEquals(2, both.getRowCount());
            both.advanceRow();
            assertEquals(21L, both.getLong(0));
            both.advanceRow();
            assertEquals(22L, both.getLong(0));
        } finally {
            Clients.closeQuietly(a);
            Clients.closeQuietly(b);
        }
    }

    @Test
    void emptyCredentialsAreAccepted() throws Exception {
        Client c = org.voltdb.client.ClientFactory.createClient(new org.voltdb.client.ClientConfig());
        try {
            c.createConnection("127.0.0.1", server.port());
            assertEquals(ClientResponse.SUCCESS, c.callProcedure("@Ping").getStatus());
        } finally {
            Clients.closeQuietly(c);
        }
    }
}
