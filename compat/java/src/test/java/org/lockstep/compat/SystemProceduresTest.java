// System procedures that tools and kits call directly: @Explain, @SystemInformation, @Statistics,
// @UpdateClasses (which must explain that procedures are Lua).
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.file.Files;
import java.util.HashMap;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.voltdb.VoltTable;
import org.voltdb.client.Client;
import org.voltdb.client.ClientResponse;
import org.voltdb.client.ProcCallException;

class SystemProceduresTest {
    private static LockstepServer server;
    private static Client client;

    @BeforeAll
    static void start() throws Exception {
        server = LockstepServer.start("sysprocs");
        client = Clients.connect(server.port());
        Clients.adHoc(client, "CREATE TABLE sp_t (k BIGINT NOT NULL, PRIMARY KEY (k))");
        Clients.adHoc(client, "PARTITION TABLE sp_t ON COLUMN k");
    }

    @AfterAll
    static void stop() {
        Clients.closeQuietly(client);
        server.close();
    }

    @Test
    void explainReturnsAPlan() throws Exception {
        VoltTable t = client.callProcedure("@Explain", "SELECT k FROM sp_t WHERE k = 5").getResults()[0];
        assertEquals(1, t.getRowCount());
        t.advanceRow();
        assertEquals("EXECUTION_PLAN", t.getColumnName(0));
        assertFalse(t.getString(0).isBlank());
    }

    @Test
    void systemInformationOverviewHasVersionAndClientPort() throws Exception {
        VoltTable t = client.callProcedure("@SystemInformation", "OVERVIEW").getResults()[0];
        Map<String, String> kv = new HashMap<>();
        while (t.advanceRow()) {
            assertEquals(0L, t.getLong("HOST_ID"));
            kv.put(t.getString("KEY"), t.getString("VALUE"));
        }
        assertEquals(Integer.toString(server.port()), kv.get("CLIENTPORT"));
        assertTrue(kv.containsKey("VERSION"), kv.toString());
        assertTrue(kv.containsKey("BUILDSTRING"), kv.toString());
    }

    @Test
    void partitionCountStatistic() throws Exception {
        VoltTable t = client.callProcedure("@Statistics", "PARTITIONCOUNT", 0).getResults()[0];
        assertEquals(1, t.getRowCount());
        t.advanceRow();
        assertEquals((long) LockstepServer.SITES, t.getLong("PARTITION_COUNT"));
    }

    @Test
    void updateClassesExplainsLuaProcedures() throws Exception {
        File jar = Files.createTempFile("lockstep-compat", ".jar").toFile();
        try {
            ProcCallException e = assertThrows(ProcCallException.class, () -> client.updateClasses(jar, null));
            ClientResponse r = e.getClientResponse();
            assertEquals(ClientResponse.GRACEFUL_FAILURE, r.getStatus());
            assertTrue(r.getStatusString().contains("Lua"), r.getStatusString());
            assertTrue(r.getStatusString().contains("FROM CLASS"), r.getStatusString());
        } finally {
            jar.delete();
        }
    }
}
