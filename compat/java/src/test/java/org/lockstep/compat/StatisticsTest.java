// @Statistics selectors the kits read, with real figures: PROCEDURE, PROCEDUREPROFILE, LATENCY,
// TABLE, INDEX, MEMORY, COMMANDLOG. One ordered scenario on a private server, so counts are exact.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.voltdb.VoltTable;
import org.voltdb.client.Client;
import org.voltdb.client.ClientResponse;
import org.voltdb.client.HashinatorLite;
import org.voltdb.client.ProcCallException;

class StatisticsTest {
    private static final int ROWS = 10;
    private static final int MP_PARTITION = 16383;

    private static LockstepServer server;
    private static Client client;
    /** User procedure and @AdHoc calls made so far: what LATENCY must count. */
    private static long userCalls;

    @BeforeAll
    static void start() throws Exception {
        server = LockstepServer.start("statistics");
        client = Clients.connect(server.port());
    }

    @AfterAll
    static void stop() {
        Clients.closeQuietly(client);
        server.close();
    }

    private static ClientResponse call(String proc, Object... args) throws Exception {
        userCalls++;
        try {
            return client.callProcedure(proc, args);
        } catch (ProcCallException e) {
            return e.getClientResponse();
        }
    }

    private static void adHoc(String sql) throws Exception {
        userCalls++;
        Clients.adHoc(client, sql);
    }

    /** Rows of a table as column-name → value maps. */
    private static List<Map<String, Object>> rows(VoltTable t) {
        List<Map<String, Object>> out = new ArrayList<>();
        t.resetRowPosition();
        while (t.advanceRow()) {
            Map<String, Object> row = new HashMap<>();
            for (int c = 0; c < t.getColumnCount(); c++) {
                row.put(t.getColumnName(c), t.get(c, t.getColumnType(c)));
            }
            out.add(row);
        }
        return out;
    }

    private static List<String> columns(VoltTable t) {
        List<String> names = new ArrayList<>();
        for (int c = 0; c < t.getColumnCount(); c++) {
            names.add(t.getColumnName(c));
        }
        return names;
    }

    private static long latencyCount(Map<Long, Map<String, Object>> windows) {
        return windows.values().stream().mapToLong(r -> (Integer) r.get("COUNT")).sum();
    }

    private static VoltTable stats(String selector) throws Exception {
        return client.callProcedure("@Statistics", selector, 0).getResults()[0];
    }

    private static Map<String, Object> find(List<Map<String, Object>> rows, String column, Object value, String column2, Object value2) {
        for (Map<String, Object> r : rows) {
            // Names compare without case: the catalog may store DDL names upper-cased.
            Object v = r.get(column);
            boolean same = value instanceof String && v instanceof String
                    ? ((String) value).equalsIgnoreCase((String) v) : value.equals(v);
            if (same && value2.equals(r.get(column2))) {
                return r;
            }
        }
        throw new AssertionError("no row with " + column + "=" + value + " and " + column2 + "=" + value2 + " in " + rows);
    }

    /**
     * Reads LATENCY every 250 ms into `windows` (its rows by TIMESTAMP) until stopped: the
     * server keeps only the last complete 5-second window, so a test that read it only at
     * the end would miss the early windows whenever its calls took more than 5 seconds.
     */
    private static Thread pollLatency(Map<Long, Map<String, Object>> windows, AtomicBoolean stop) {
        Thread t = new Thread(() -> {
            while (!stop.get()) {
                try {
                    Map<String, Object> row = rows(stats("LATENCY")).get(0);
                    windows.put((Long) row.get("TIMESTAMP"), row);
                    Thread.sleep(250);
                } catch (Exception e) {
                    return;
                }
            }
        }, "latency-poller");
        t.setDaemon(true);
        t.start();
        return t;
    }

    @Test
    void statisticsReportRealFigures() throws Exception {
        Map<Long, Map<String, Object>> windows = new ConcurrentHashMap<>();
        AtomicBoolean stopPolling = new AtomicBoolean();
        Thread poller = pollLatency(windows, stopPolling);
        adHoc("CREATE TABLE st (k BIGINT NOT NULL, v VARCHAR(16), PRIMARY KEY (k))");
        adHoc("PARTITION TABLE st ON COLUMN k");
        adHoc("CREATE INDEX st_v ON st (v)");
        adHoc("CREATE TABLE rt (id INTEGER NOT NULL, PRIMARY KEY (id))");
        adHoc("CREATE PROCEDURE StGet PARTITION ON TABLE st COLUMN k AS SELECT v FROM st WHERE k = ?");
        adHoc("CREATE PROCEDURE StCount AS SELECT COUNT(*) FROM st");
        HashinatorLite h = Clients.hashinator(client);
        int[] perPartition = new int[LockstepServer.SITES];
        for (long k = 0; k < ROWS; k++) {
            assertEquals(ClientResponse.SUCCESS, call("ST.insert", k, "v" + k).getStatus());
            perPartition[Clients.partitionOf(h, k)]++;
        }
        for (int id = 0; id < 3; id++) {
            assertEquals(ClientResponse.SUCCESS, call("RT.insert", id).getStatus());
        }
        int p1 = Clients.partitionOf(h, 1);
        // A duplicate key: a constraint violation, counted as an abort.
        assertEquals(ClientResponse.GRACEFUL_FAILURE, call("ST.insert", 1L, "again").getStatus());
        for (int i = 0; i < 3; i++) {
            assertEquals(ClientResponse.SUCCESS, call("StGet", 1L).getStatus());
        }
        assertEquals((long) ROWS, call("StCount").getResults()[0].asScalarLong());

        // PROCEDURE: one row per procedure and partition; the MP row carries partition 16383.
        VoltTable proc = stats("PROCEDURE");
        assertEquals(List.of("TIMESTAMP", "HOST_ID", "HOSTNAME", "SITE_ID", "PARTITION_ID", "PROCEDURE", "INVOCATIONS",
                "TIMED_INVOCATIONS", "MIN_EXECUTION_TIME", "MAX_EXECUTION_TIME", "AVG_EXECUTION_TIME", "MIN_RESULT_SIZE",
                "MAX_RESULT_SIZE", "AVG_RESULT_SIZE", "MIN_PARAMETER_SET_SIZE", "MAX_PARAMETER_SET_SIZE",
                "AVG_PARAMETER_SET_SIZE", "ABORTS", "FAILURES", "TRANSACTIONAL"), columns(proc));
        List<Map<String, Object>> procRows = rows(proc);
        Map<String, Object> insert = find(procRows, "PROCEDURE", "ST.insert", "PARTITION_ID", p1);
        assertEquals((long) perPartition[p1] + 1, insert.get("INVOCATIONS"));
        assertEquals(1L, insert.get("ABORTS"));
        assertEquals(0L, insert.get("FAILURES"));
        Map<String, Object> get = find(procRows, "PROCEDURE", "StGet", "PARTITION_ID", p1);
        assertEquals(3L, get.get("INVOCATIONS"));
        assertEquals(3L, get.get("TIMED_INVOCATIONS"));
        long min = (Long) get.get("MIN_EXECUTION_TIME");
        long avg = (Long) get.get("AVG_EXECUTION_TIME");
        long max = (Long) get.get("MAX_EXECUTION_TIME");
        assertTrue(0 < min && min <= avg && avg <= max, min + " " + avg + " " + max);
        // One BIGINT parameter: 8 bytes.
        assertEquals(8, get.get("AVG_PARAMETER_SET_SIZE"));
        Map<String, Object> count = find(procRows, "PROCEDURE", "StCount", "PARTITION_ID", MP_PARTITION);
        assertEquals(1L, count.get("INVOCATIONS"));
        long insertsEverywhere = 0;
        for (Map<String, Object> r : procRows) {
            if ("ST.insert".equals(r.get("PROCEDURE"))) {
                insertsEverywhere += (Long) r.get("INVOCATIONS");
            }
        }
        assertEquals(ROWS + 1, insertsEverywhere);

        // PROCEDUREPROFILE: summed over partitions.
        VoltTable profile = stats("PROCEDUREPROFILE");
        assertEquals(List.of("TIMESTAMP", "PROCEDURE", "WEIGHTED_PERC", "INVOCATIONS", "AVG", "MIN", "MAX", "ABORTS",
                "FAILURES"), columns(profile));
        Map<String, Map<String, Object>> byProc = new HashMap<>();
        for (Map<String, Object> r : rows(profile)) {
            byProc.put(((String) r.get("PROCEDURE")).toUpperCase(), r);
        }
        assertEquals((long) ROWS + 1, byProc.get("ST.INSERT").get("INVOCATIONS"));
        assertEquals(1L, byProc.get("ST.INSERT").get("ABORTS"));
        assertEquals(3L, byProc.get("STGET").get("INVOCATIONS"));
        assertEquals(3L, byProc.get("RT.INSERT").get("INVOCATIONS"));

        // TABLE: tuple counts per table and partition (replicated tables: on every partition).
        List<Map<String, Object>> tables = rows(stats("TABLE"));
        for (int p = 0; p < LockstepServer.SITES; p++) {
            Map<String, Object> st = find(tables, "TABLE_NAME", "ST", "PARTITION_ID", p);
            assertEquals((long) perPartition[p], st.get("TUPLE_COUNT"));
            assertEquals("PersistentTable", st.get("TABLE_TYPE"));
            assertEquals(3L, find(tables, "TABLE_NAME", "RT", "PARTITION_ID", p).get("TUPLE_COUNT"));
        }

        // INDEX: the primary key and st_v on every partition, one entry per row.
        List<Map<String, Object>> indexes = rows(stats("INDEX"));
        for (int p = 0; p < LockstepServer.SITES; p++) {
            Map<String, Object> v = find(indexes, "INDEX_NAME", "ST_V", "PARTITION_ID", p);
            assertEquals("ST", v.get("TABLE_NAME"));
            assertEquals((byte) 0, v.get("IS_UNIQUE"));
            assertEquals((long) perPartition[p], v.get("ENTRY_COUNT"));
        }

        // MEMORY: one row for the host; RSS matches what /proc says of the process.
        VoltTable memory = stats("MEMORY");
        assertEquals(List.of("TIMESTAMP", "HOST_ID", "HOSTNAME", "RSS", "JAVAUSED", "JAVAUNUSED", "TUPLEDATA",
                "TUPLEALLOCATED", "INDEXMEMORY", "STRINGMEMORY", "TUPLECOUNT", "POOLEDMEMORY", "PHYSICALMEMORY",
                "JAVAMAXHEAP"), columns(memory));
        Map<String, Object> mem = rows(memory).get(0);
        assertEquals((long) ROWS + 3 * LockstepServer.SITES, mem.get("TUPLECOUNT"));
        long rss = (Integer) mem.get("RSS");
        long procRss = server.rssKb();
        assertTrue(rss > 0 && Math.abs(rss - procRss) < procRss / 2, "RSS " + rss + " KiB vs /proc " + procRss + " KiB");
        assertTrue((Long) mem.get("PHYSICALMEMORY") > rss);

        // LATENCY: VoltDB's last complete 5-second window, TIMESTAMP being its end. Each
        // window was read once by the poller (LATENCY counts no @Statistics call), and adding
        // up COUNT gives every user procedure and @AdHoc call answered so far, nothing else.
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (latencyCount(windows) < userCalls && System.nanoTime() < deadline) {
            Thread.sleep(250);
        }
        stopPolling.set(true);
        poller.join();
        for (Map<String, Object> lat : windows.values()) {
            assertEquals(5000, lat.get("INTERVAL"));
            assertEquals((Integer) lat.get("COUNT") / 5, lat.get("TPS"));
            assertTrue((Long) lat.get("P50") <= (Long) lat.get("P99"));
            assertTrue((Long) lat.get("P99") <= (Long) lat.get("MAX"));
        }
        assertEquals(List.of("TIMESTAMP", "HOST_ID", "HOSTNAME", "INTERVAL", "COUNT", "TPS", "P50", "P95", "P99",
                "P99.9", "P99.99", "P99.999", "MAX"), columns(stats("LATENCY")));
        assertEquals(userCalls, latencyCount(windows));

        // COMMANDLOG: the columns VoltDB has; the writes above are in a log segment, and
        // nothing is outstanding once they were answered (sync mode).
        VoltTable log = stats("COMMANDLOG");
        assertEquals(List.of("TIMESTAMP", "HOST_ID", "HOSTNAME", "OUTSTANDING_BYTES", "OUTSTANDING_TXNS",
                "IN_USE_SEGMENT_COUNT", "SEGMENT_COUNT", "FSYNC_INTERVAL"), columns(log));
        assertEquals(1, log.getRowCount());
        log.advanceRow();
        assertEquals(0L, log.getLong("OUTSTANDING_TXNS"));
        assertTrue(log.getLong("SEGMENT_COUNT") >= 1);

        ProcCallException bad = org.junit.jupiter.api.Assertions.assertThrows(ProcCallException.class,
                () -> client.callProcedure("@Statistics", "NOSUCH", 0));
        assertEquals(ClientResponse.GRACEFUL_FAILURE, bad.getClientResponse().getStatus());
        assertNotNull(bad.getClientResponse().getStatusString());
        assertTrue(bad.getClientResponse().getStatusString().contains("PROCEDUREPROFILE"));
    }
}
