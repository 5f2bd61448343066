// The Voter client (VoltDB examples/voter AsyncBenchmark) and the YCSB VoltDB binding
// (VoltClient4 and its YCSBSchemaBuilder) replayed with our own code: the procedures, Java
// parameter types and result shapes they use, and YCSB's schema path with a helper class.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;
import org.voltdb.VoltTable;
import org.voltdb.client.Client;
import org.voltdb.client.ClientResponse;
import org.voltdb.client.ClientResponseWithPartitionKey;
import org.voltdb.client.ProcCallException;

class KitVoterYcsbTest {
    private static final String CONTESTANTS = "Edwina Burnam,Tabatha Gehling,Kelly Clauss,Jessie Alloway,"
            + "Alana Bregman,Jessie Eichman,Allie Rogalski,Nita Coster,Kurt Walser,Ericka Dieter,Loraine NygrenTania Mattioli";

    private static long scalarCall(Client c, String proc, Object... args) throws Exception {
        ClientResponse r = c.callProcedure(proc, args);
        assertEquals(ClientResponse.SUCCESS, r.getStatus(), r.getStatusString());
        return r.getResults()[0].asScalarLong();
    }

    @Test
    void voterAsyncBenchmarkSequence() throws Exception {
        try (LockstepServer server = LockstepServer.start("kit-voter", Apps.procedures("voter"))) {
            Client c = Clients.connect(server.port());
            try {
                Apps.loadDdl(c, "voter");
                // Initialize(int contestants, String names CSV), as the client sends it.
                assertEquals(ClientResponse.SUCCESS, c.callProcedure("Initialize", 6, CONTESTANTS).getStatus());
                // Vote(long phone, int contestant, int maxvotes): 0 accepted, 1 bad contestant, 2 over limit.
                long phone = 6175551234L;
                assertEquals(0, scalarCall(c, "Vote", phone, 2, 2));
                assertEquals(0, scalarCall(c, "Vote", phone, 2, 2));
                assertEquals(2, scalarCall(c, "Vote", phone, 2, 2));
                assertEquals(1, scalarCall(c, "Vote", 2125550000L, 999, 2));
                assertEquals(0, scalarCall(c, "Vote", 9075550000L, 1, 2));
                // Results(): the client prints getString(0) and getLong(2); row 0 is the winner.
                VoltTable results = c.callProcedure("Results").getResults()[0];
                // As VoltDB's Results, only contestants with votes appear, most votes first.
                assertEquals(2, results.getRowCount());
                assertEquals("Tabatha Gehling", results.fetchRow(0).getString(0));
                assertEquals(2L, results.fetchRow(0).getLong(2));
                long total = 0;
                while (results.advanceRow()) {
                    total += results.getLong(2);
                }
                assertEquals(3, total);
                // The example DDL's other reports: a contestant's states, the live map's two tables.
                VoltTable won = c.callProcedure("ContestantWinningStates", 2, 5).getResults()[0];
                assertEquals(1, won.getRowCount());
                won.advanceRow();
                assertEquals("MA", won.getString("state"));
                assertEquals(2L, won.getLong("num_votes"));
                assertEquals(0, c.callProcedure("ContestantWinningStates", 3, 5).getResults()[0].getRowCount());
                VoltTable[] heat = c.callProcedure("GetStateHeatmap").getResults();
                assertEquals(2, heat.length);
                java.util.Map<String, Long> leader = new java.util.TreeMap<>();
                while (heat[0].advanceRow()) {
                    leader.put(heat[0].getString("STATE"), heat[0].getLong("CONTESTANT_NUMBER"));
                }
                assertEquals(java.util.Map.of("AK", 1L, "MA", 2L), leader);
                java.util.Map<Long, Long> totals = new java.util.TreeMap<>();
                while (heat[1].advanceRow()) {
                    totals.put(heat[1].getLong(0), heat[1].getLong(1));
                }
                assertEquals(java.util.Map.of(1L, 1L, 2L, 2L), totals);
            } finally {
                Clients.closeQuietly(c);
            }
        }
    }

    /** VoltClient4's packed field map: int count, then (int length, name, int length, value) per field. */
    private static byte[] pack(String... nameValue) {
        ByteBuffer b = ByteBuffer.allocate(1024);
        b.putInt(nameValue.length / 2);
        for (String s : nameValue) {
            byte[] bytes = s.getBytes(StandardCharsets.UTF_8);
            b.putInt(bytes.length).put(bytes);
        }
        byte[] out = new byte[b.position()];
        b.flip().get(out);
        return out;
    }

    @Test
    void ycsbBindingSchemaPathAndCalls() throws Exception {
        try (LockstepServer server = LockstepServer.start("kit-ycsb", Apps.procedures("ycsb"))) {
            Client c = Clients.connect(server.port());
            try {
                byte[] ks = "usertable".getBytes(StandardCharsets.UTF_8);
                ProcCallException missing = assertThrows(ProcCallException.class,
                        () -> c.callProcedure("Get", "Test".getBytes(StandardCharsets.UTF_8), "Test"));
                assertEquals("Procedure Get was not found", missing.getMessage());
                Clients.adHoc(c, "CREATE TABLE Store (keyspace VARBINARY(128)  NOT NULL\n,   key      VARCHAR(128)    NOT NULL,"
                        + "   value    VARBINARY(2056) NOT NULL\n,   PRIMARY KEY (key, keyspace));");
                Clients.adHoc(c, "PARTITION TABLE Store ON COLUMN key;\n");
                // The binding's jar holds ByteWrapper, a helper with no Lua file: taken for a helper.
                ClientResponse classes = c.callProcedure("@UpdateClasses", Apps.jar("site/ycsb/db/voltdb/procs/Put.class",
                        "site/ycsb/db/voltdb/procs/Scan.class", "site/ycsb/db/voltdb/procs/ScanAll.class",
                        "site/ycsb/db/voltdb/procs/ByteWrapper.class"), null);
                assertEquals(ClientResponse.SUCCESS, classes.getStatus(), classes.getStatusString());
                Clients.adHoc(c, "CREATE PROCEDURE Get PARTITION  ON TABLE Store COLUMN key PARAMETER 1\n"
                        + "AS SELECT value FROM Store WHERE keyspace = ? AND key = ?;");
                Clients.adHoc(c, "CREATE PROCEDURE PARTITION ON TABLE Store COLUMN key PARAMETER 1\nFROM CLASS site.ycsb.db.voltdb.procs.Put;");
                Clients.adHoc(c, "CREATE PROCEDURE PARTITION ON TABLE Store COLUMN key \nFROM CLASS site.ycsb.db.voltdb.procs.Scan;");
                Clients.adHoc(c, "CREATE PROCEDURE \nFROM CLASS site.ycsb.db.voltdb.procs.ScanAll;");

                for (int i = 0; i < 10; i++) {
                    assertEquals(ClientResponse.SUCCESS, c.callProcedure("Put", ks, "user" + i, pack("field0", "v" + i)).getStatus());
                }
                // An update writes one field; the other is kept.
                c.callProcedure("Put", ks, "user3", pack("field1", "w3"));
                VoltTable got = c.callProcedure("Get", ks, "user3").getResults()[0];
                assertEquals(1, got.getRowCount());
                assertArrayEquals(pack("field0", "v3", "field1", "w3"), got.fetchRow(0).getVarbinary(0));
                // Scan on every partition from a lower bound; the binding merges the sorted parts.
                int rows = 0;
                for (ClientResponseWithPartitionKey r : c.callAllPartitionProcedure("Scan", ks,
                        "user5".getBytes(StandardCharsets.UTF_8), 3)) {
                    assertEquals(ClientResponse.SUCCESS, r.response.getStatus());
                    rows += r.response.getResults()[0].getRowCount();
                }
                assertEquals(Math.min(5, 3 * LockstepServer.SITES), rows, "at most 3 per partition of the 5 keys >= user5");
                VoltTable all = c.callProcedure("ScanAll", ks, "user5".getBytes(StandardCharsets.UTF_8), 3).getResults()[0];
                assertEquals(3, all.getRowCount());
                assertEquals("user5", all.fetchRow(0).getString("KEY"));
                assertEquals(1, Clients.scalar(c.callProcedure("STORE.delete", "user5", ks)));
                assertEquals(0, c.callProcedure("Get", ks, "user5").getResults()[0].getRowCount());
            } finally {
                Clients.closeQuietly(c);
            }
        }
    }
}
