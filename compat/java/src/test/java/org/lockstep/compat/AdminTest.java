// Administrative system procedures: @Pause/@Resume, @Quiesce, @ExplainProc, @SystemInformation
// OVERVIEW/DEPLOYMENT, @Shutdown, and a topology-aware client.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.voltdb.VoltTable;
import org.voltdb.client.Client;
import org.voltdb.client.ClientConfig;
import org.voltdb.client.ClientFactory;
import org.voltdb.client.ClientResponse;
import org.voltdb.client.ProcCallException;

class AdminTest {
    private static LockstepServer server;
    private static Client client;

    @BeforeAll
    static void start() throws Exception {
        server = LockstepServer.start("admin");
        client = Clients.connect(server.port());
        Clients.adHoc(client, "CREATE TABLE ad (k BIGINT NOT NULL, v VARCHAR(16), PRIMARY KEY (k))");
        Clients.adHoc(client, "PARTITION TABLE ad ON COLUMN k");
        Clients.adHoc(client, "CREATE PROCEDURE AdGet PARTITION ON TABLE ad COLUMN k AS SELECT v FROM ad WHERE k = ?");
        Clients.adHoc(client, "CREATE PROCEDURE AdTwo PARTITION ON TABLE ad COLUMN k PARAMETER 0 FROM FILE 'AdTwo.lua'"
                + " SOURCE $lua$ local a = sql [[SELECT v FROM ad WHERE k = ?]]"
                + " local b = sql [[SELECT COUNT(*) FROM ad WHERE k = ?]]"
                + " return function(k) return a:query(k), b:query(k) end $lua$");
        Clients.adHoc(client, "CREATE STREAM ad_events PARTITION ON COLUMN k EXPORT TO TARGET adlog"
                + " (k BIGINT NOT NULL, note VARCHAR(20))");
    }

    @AfterAll
    static void stop() {
        Clients.closeQuietly(client);
        server.close();
    }

    private static ClientResponse attempt(String proc, Object... args) throws Exception {
        try {
            return client.callProcedure(proc, args);
        } catch (ProcCallException e) {
            return e.getClientResponse();
        }
    }

    private static Map<String, String> overview(Client c) throws Exception {
        VoltTable t = c.callProcedure("@SystemInformation", "OVERVIEW").getResults()[0];
        Map<String, String> kv = new HashMap<>();
        while (t.advanceRow()) {
            kv.put(t.getString("KEY"), t.getString("VALUE"));
        }
        return kv;
    }

    @Test
    void pauseRefusesWritesAndAllowsReads() throws Exception {
        assertEquals(1L, Clients.scalar(client.callProcedure("AD.insert", 1L, "one")));
        assertEquals(0L, Clients.scalar(client.callProcedure("@Pause")));
        try {
            assertEquals("PAUSED", overview(client).get("CLUSTERSTATE"));
            for (ClientResponse r : List.of(attempt("AD.insert", 2L, "two"),
                    attempt("@AdHoc", "INSERT INTO ad VALUES (3, 'three')"),
                    attempt("@AdHoc", "CREATE TABLE paused_ddl (k INTEGER)"))) {
                assertEquals(ClientResponse.SERVER_UNAVAILABLE, r.getStatus());
                assertTrue(r.getStatusString().contains("paused"), r.getStatusString());
                assertTrue(r.getStatusString().contains("@Resume"), r.getStatusString());
            }
            VoltTable read = client.callProcedure("AdGet", 1L).getResults()[0];
            read.advanceRow();
            assertEquals("one", read.getString(0));
            assertEquals(1L, Clients.scalar(Clients.adHoc(client, "SELECT COUNT(*) FROM ad WHERE k = 1")));
        } finally {
            assertEquals(0L, Clients.scalar(client.callProcedure("@Resume")));
        }
        assertEquals("RUNNING", overview(client).get("CLUSTERSTATE"));
        assertEquals(1L, Clients.scalar(client.callProcedure("AD.insert", 2L, "two")));
    }

    @Test
    void quiesceFlushesExportFiles() throws Exception {
        for (long k = 100; k < 110; k++) {
            assertEquals(1L, Clients.scalar(client.callProcedure("AD_EVENTS.insert", k, "e" + k)));
        }
        assertEquals(0L, Clients.scalar(client.callProcedure("@Quiesce")));
        // Identifiers are stored upper-cased, the export target directory too; each
        // partition writes numbered segment files in a directory of its own.
        Path dir = server.dataDir().resolve("export").resolve("ADLOG");
        long lines = 0;
        for (int p = 0; p < LockstepServer.SITES; p++) {
            Path partition = dir.resolve("partition-" + p);
            if (!Files.isDirectory(partition)) {
                continue;
            }
            try (var segments = Files.list(partition)) {
                for (Path f : segments.filter(f -> f.toString().endsWith(".jsonl")).toList()) {
                    lines += Files.readAllLines(f).stream().filter(l -> l.contains("\"AD_EVENTS\"")).count();
                }
            }
        }
        assertEquals(10L, lines);
    }

    @Test
    void explainProcGivesOneRowPerStatement() throws Exception {
        VoltTable sql = client.callProcedure("@ExplainProc", "AdGet").getResults()[0];
        assertEquals(1, sql.getRowCount());
        sql.advanceRow();
        assertEquals("sql0", sql.getString("STATEMENT_NAME"));
        assertEquals("SELECT v FROM ad WHERE k = ?", sql.getString("SQL_STATEMENT"));
        assertFalse(sql.getString("EXECUTION_PLAN").isBlank());

        VoltTable lua = client.callProcedure("@ExplainProc", "AdTwo").getResults()[0];
        assertEquals(2, lua.getRowCount());
        lua.advanceRow();
        assertEquals("SELECT v FROM ad WHERE k = ?", lua.getString("SQL_STATEMENT"));
        lua.advanceRow();
        assertEquals("sql1", lua.getString("STATEMENT_NAME"));
        assertEquals("SELECT COUNT(*) FROM ad WHERE k = ?", lua.getString("SQL_STATEMENT"));

        ProcCallException e = org.junit.jupiter.api.Assertions.assertThrows(ProcCallException.class,
                () -> client.callProcedure("@ExplainProc", "NoSuchProc"));
        assertEquals(ClientResponse.GRACEFUL_FAILURE, e.getClientResponse().getStatus());
    }

    @Test
    void systemInformationOverviewAndDeployment() throws Exception {
        Map<String, String> kv = overview(client);
        assertEquals("127.0.0.1", kv.get("IPADDRESS"));
        assertEquals(Integer.toString(server.port()), kv.get("CLIENTPORT"));
        assertEquals(Integer.toString(server.port()), kv.get("ADMINPORT"));
        assertEquals("1", kv.get("FULLCLUSTERSIZE"));
        assertEquals(Integer.toString(LockstepServer.SITES), kv.get("SITESPERHOST"));
        assertTrue(kv.get("UPTIME").matches("\\d+ days \\d\\d:\\d\\d:\\d\\d\\.\\d\\d\\d"), kv.get("UPTIME"));
        assertFalse(kv.get("HOSTNAME").isBlank());

        VoltTable d = client.callProcedure("@SystemInformation", "DEPLOYMENT").getResults()[0];
        Map<String, String> props = new HashMap<>();
        while (d.advanceRow()) {
            props.put(d.getString("PROPERTY"), d.getString("VALUE"));
        }
        assertEquals("0", props.get("kfactor"));
        assertEquals("1", props.get("hostcount"));
        assertEquals(Integer.toString(LockstepServer.SITES), props.get("sitesperhost"));
        // The command log is on, in synchronous mode, by default.
        assertEquals("true", props.get("commandlogenabled"));
        assertEquals("sync", props.get("commandlogmode"));
    }

    @Test
    void topologyAwareClientConnectsAndCalls() throws Exception {
        ClientConfig config = new ClientConfig("compat", "secret");
        config.setTopologyChangeAware(true);
        Client aware = ClientFactory.createClient(config);
        try {
            aware.createConnection("127.0.0.1", server.port());
            assertEquals(1L, Clients.scalar(aware.callProcedure("AD.insert", 50L, "aware")));
            VoltTable t = aware.callProcedure("AdGet", 50L).getResults()[0];
            t.advanceRow();
            assertEquals("aware", t.getString(0));
            assertEquals(1, aware.getConnectedHostList().size());
        } finally {
            Clients.closeQuietly(aware);
        }
    }

    @Test
    void shutdownStopsTheServerCleanly() throws Exception {
        LockstepServer doomed = LockstepServer.start("shutdown");
        try {
            Client c = Clients.connect(doomed.port());
            CompletableFuture<Byte> status = new CompletableFuture<>();
            c.callProcedure(r -> status.complete(r.getStatus()), "@Shutdown");
            assertEquals(0, doomed.awaitExit(30));
            byte s = status.get(30, TimeUnit.SECONDS);
            // The answer may or may not beat the closing socket, as with VoltDB.
            assertTrue(s == ClientResponse.SUCCESS || s == ClientResponse.CONNECTION_LOST, "status " + s);
            assertTrue(doomed.stdoutLines().contains("lockstep stopped"), doomed.stdoutLines().toString());
            Clients.closeQuietly(c);
        } finally {
            doomed.close();
        }
    }
}
