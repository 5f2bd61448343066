// The TATP kit's client (srmadscience/voltdb-tatpbenchmark, TatpClient) replayed with our own
// code: its schema path (@AdHoc DDL, @UpdateClasses with a jar of procedure classes, CREATE
// PROCEDURE … FROM CLASS), its loader and its transaction loop, with the Java types it passes.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.voltdb.VoltTable;
import org.voltdb.VoltType;
import org.voltdb.client.Client;
import org.voltdb.client.ClientResponse;
import org.voltdb.client.ClientResponseWithPartitionKey;
import org.voltdb.client.ProcCallException;

class KitTatpTest {
    private static final int SUBSCRIBERS = 20;
    private static final String[] CLASSES = {"Reset", "DeleteCallForwarding", "GetAccessData", "GetNewDestination",
        "GetSubscriberData", "UpdateSubscriberData", "InsertCallForwarding", "LoadSubscriber", "UpdateLocation",
        "UpdateLocationCompound", "InsertCallForwardingCompound", "DeleteCallForwardingCompound",
        "MapSubStringToNumberAllPartitions", "MapSubStringToNumberNoView", "UpdateLocationMultiPartition",
        "InsertCallForwardingMultiPartition", "DeleteCallForwardingMultiPartition", "UpdateSubNbr"};
    /** Procedures the kit declares without PARTITION ON (multi-partition). */
    private static final List<String> MP = List.of("Reset", "UpdateLocationCompound", "InsertCallForwardingCompound",
        "DeleteCallForwardingCompound", "MapSubStringToNumberNoView", "UpdateSubNbr");

    private static LockstepServer server;
    private static Client client;

    @BeforeAll
    static void start() throws Exception {
        server = LockstepServer.start("kit-tatp", Apps.procedures("tatp"));
        client = Clients.connect(server.port());
    }

    @AfterAll
    static void stop() {
        Clients.closeQuietly(client);
        server.close();
    }

    private static ClientResponse call(String proc, Object... args) throws Exception {
        ClientResponse r = client.callProcedure(proc, args);
        assertEquals(ClientResponse.SUCCESS, r.getStatus(), proc + ": " + r.getStatusString());
        return r;
    }

    private static VoltTable subscriber(int sid) throws Exception {
        VoltTable t = call("GetSubscriberData", sid).getResults()[0];
        assertEquals(1, t.getRowCount());
        t.advanceRow();
        return t;
    }

    private static void createSchemaLikeTheKit() throws Exception {
        // 1. The probe fails with exactly the message the kit's schema builder expects.
        ProcCallException missing = assertThrows(ProcCallException.class,
                () -> client.callProcedure("GetSubscriberData", Long.valueOf(42)));
        assertEquals("Procedure GetSubscriberData was not found", missing.getMessage());

        // 2. DDL through @AdHoc, in the kit's dialect (inline PRIMARY KEY, FOREIGN KEY, lower case).
        String[] ddl = {
            "CREATE TABLE subscriber (s_id BIGINT NOT NULL PRIMARY KEY, sub_nbr VARCHAR(15) NOT NULL , "
                + "bit_1 TINYINT, bit_2 TINYINT, bit_3 TINYINT, bit_4 TINYINT, bit_5 TINYINT, bit_6 TINYINT, bit_7 TINYINT, "
                + "bit_8 TINYINT, bit_9 TINYINT, bit_10 TINYINT, hex_1 TINYINT, hex_2 TINYINT, hex_3 TINYINT, hex_4 TINYINT, "
                + "hex_5 TINYINT, hex_6 TINYINT, hex_7 TINYINT, hex_8 TINYINT, hex_9 TINYINT, hex_10 TINYINT, "
                + "byte2_1 SMALLINT, byte2_2 SMALLINT, byte2_3 SMALLINT, byte2_4 SMALLINT, byte2_5 SMALLINT, byte2_6 SMALLINT, "
                + "byte2_7 SMALLINT, byte2_8 SMALLINT, byte2_9 SMALLINT, byte2_10 SMALLINT, msc_location BIGINT, vlr_location BIGINT);",
            "PARTITION TABLE subscriber ON COLUMN s_id;",
            "create ASSUMEUNIQUE index sub_idx on subscriber(sub_nbr);",
            "CREATE TABLE subscriber_nbr_map ( sub_nbr VARCHAR(15) NOT NULL PRIMARY KEY, s_id BIGINT NOT NULL);",
            "PARTITION TABLE subscriber_nbr_map ON COLUMN sub_nbr;",
            "CREATE ASSUMEUNIQUE INDEX subscriber_nbr_map_ix1 ON subscriber_nbr_map (s_id);",
            "CREATE TABLE access_info (s_id BIGINT NOT NULL, ai_type TINYINT NOT NULL, data1 SMALLINT, data2 SMALLINT, "
                + "data3 VARCHAR(3), data4 VARCHAR(5), PRIMARY KEY (s_id, ai_type), FOREIGN KEY (s_id) REFERENCES subscriber (s_id));",
            "PARTITION TABLE access_info ON COLUMN s_id;",
            "CREATE TABLE special_facility (s_id BIGINT NOT NULL, sf_type TINYINT NOT NULL, is_active TINYINT NOT NULL, "
                + "error_cntrl SMALLINT, data_a SMALLINT, data_b VARCHAR(5), PRIMARY KEY (s_id, sf_type), "
                + "FOREIGN KEY (s_id) REFERENCES subscriber (s_id));",
            "PARTITION TABLE special_facility ON COLUMN s_id;",
            "CREATE TABLE call_forwarding (s_id BIGINT NOT NULL, sf_type TINYINT NOT NULL, start_time TINYINT NOT NULL, "
                + "end_time TINYINT, numberx VARCHAR(15), PRIMARY KEY (s_id, sf_type, start_time), "
                + "FOREIGN KEY (s_id, sf_type) REFERENCES special_facility(s_id, sf_type));",
            "PARTITION TABLE call_forwarding ON COLUMN s_id;"};
        for (String sql : ddl) {
            Clients.adHoc(client, sql);
        }
        // A second client racing to create the schema sees the text the kit tolerates.
        ProcCallException again = assertThrows(ProcCallException.class, () -> client.callProcedure("@AdHoc", ddl[0]));
        assertTrue(again.getMessage().contains("object name already exists"), again.getMessage());

        // 3. A jar with a class that has no Lua file is refused, naming the class and the file.
        ClientResponse refused = assertThrows(ProcCallException.class,
                () -> client.callProcedure("@UpdateClasses", Apps.jar("voltdbtatp/db/Nope.class"), null)).getClientResponse();
        assertEquals(ClientResponse.GRACEFUL_FAILURE, refused.getStatus());
        assertTrue(refused.getStatusString().contains("voltdbtatp.db.Nope") && refused.getStatusString().contains("Nope.lua"),
                refused.getStatusString());
        // The kit's jar: every procedure class, each with its Lua file.
        List<String> paths = new ArrayList<>();
        for (String c : CLASSES) {
            paths.add("voltdbtatp/db/" + c + ".class");
        }
        ClientResponse classes = client.callProcedure("@UpdateClasses", Apps.jar(paths.toArray(new String[0])), null);
        assertEquals(ClientResponse.SUCCESS, classes.getStatus(), classes.getStatusString());

        // 4. CREATE PROCEDURE … FROM CLASS, partitioned on s_id without a PARAMETER clause (parameter 0).
        for (String c : CLASSES) {
            String partition = MP.contains(c) ? "" : "PARTITION ON TABLE subscriber COLUMN s_id ";
            Clients.adHoc(client, "CREATE PROCEDURE " + partition + "FROM CLASS voltdbtatp.db." + c + ";");
        }
    }

    private static long count() throws Exception {
        VoltTable t = call("@AdHoc", "select count(*) as cnt from subscriber;").getResults()[0];
        t.advanceRow();
        return Long.parseLong(t.get("cnt", VoltType.BIGINT).toString());
    }

    private static void loadLikeTheKit() throws Exception {
        assertEquals(0, count());
        assertEquals(5, call("Reset").getResults().length);
        for (int i = 0; i < SUBSCRIBERS; i++) {
            byte[] b = new byte[30];
            for (int j = 0; j < 30; j++) {
                b[j] = (byte) (j < 10 ? i % 2 : j < 20 ? i % 16 : (i * 7) % 256);
            }
            Object[] args = new Object[35];
            args[0] = (long) i;
            args[1] = "0" + i;
            for (int j = 0; j < 30; j++) {
                args[2 + j] = b[j];
            }
            args[32] = 1000L + i;
            args[33] = 2000L + i;
            args[34] = i;
            // The kit's loader answers one count table per row: the subscriber, then its children.
            VoltTable[] loaded = call("LoadSubscriber", args).getResults();
            assertEquals(1, loaded[0].asScalarLong());
            assertEquals(1, Clients.scalar(call("SUBSCRIBER_NBR_MAP.insert", "0" + i, (long) i)));
        }
        assertEquals(SUBSCRIBERS, count());
        assertEquals(LockstepServer.SITES, call("@GetPartitionKeys", "STRING").getResults()[0].getRowCount());
    }

    @Test
    void theKitsStartupAndLoopRunAgainstLuaProcedures() throws Exception {
        createSchemaLikeTheKit();
        loadLikeTheKit();

        // The loop, with Java ints where the procedures declare BIGINT.
        VoltTable s = subscriber(5);
        assertEquals(5L, s.getLong("S_ID"));
        assertEquals("05", s.getString("SUB_NBR"));
        assertEquals(2005L, s.getLong("VLR_LOCATION"));
        assertEquals(0, call("GetSubscriberData", SUBSCRIBERS).getResults()[0].getRowCount(), "NURand can pick s_id = N");
        assertTrue(call("GetAccessData", 5, 1).getResults()[0].getRowCount() <= 1);
        assertEquals(1, call("GetNewDestination", 5, 1, 0L, 24L).getResults().length);
        assertEquals(1, call("UpdateSubscriberData", 5, 1, 100, 1).getResults()[0].asScalarLong());
        assertEquals(1, Clients.scalar(call("UpdateLocation", 5, 77L)));
        assertEquals(77L, subscriber(5).getLong("VLR_LOCATION"));
        // No table when the subscriber has no facility; else (deleted, inserted = 1).
        VoltTable[] ins = call("InsertCallForwarding", 5, 1, 100, 1).getResults();
        assertTrue(ins.length == 0 || ins[1].asScalarLong() == 1, "tables: " + ins.length);
        assertTrue(Clients.scalar(call("DeleteCallForwarding", 5, 1, 0L)) <= 1);

        // FKMODE_TASK_ALL_PARTITIONS: every partition tries; exactly one holds "05".
        ClientResponseWithPartitionKey[] all = client.callAllPartitionProcedure("UpdateLocationMultiPartition", "05", 88L);
        assertEquals(LockstepServer.SITES, all.length);
        long updated = 0;
        for (ClientResponseWithPartitionKey r : all) {
            assertEquals(ClientResponse.SUCCESS, r.response.getStatus());
            VoltTable[] t = r.response.getResults();
            updated += t[t.length - 1].asScalarLong();
        }
        assertEquals(1, updated);
        assertEquals(88L, subscriber(5).getLong("VLR_LOCATION"));
        for (ClientResponseWithPartitionKey r : client.callAllPartitionProcedure("InsertCallForwardingMultiPartition", "05", 1, 100, 1)) {
            assertEquals(ClientResponse.SUCCESS, r.response.getStatus());
        }
        for (ClientResponseWithPartitionKey r : client.callAllPartitionProcedure("DeleteCallForwardingMultiPartition", "05", 0, 1)) {
            assertEquals(ClientResponse.SUCCESS, r.response.getStatus());
        }
        // FKMODE_QUERY_ALL_PARTITIONS_FIRST: one partition answers with the s_id.
        List<Long> found = new ArrayList<>();
        for (ClientResponseWithPartitionKey r : client.callAllPartitionProcedure("MapSubStringToNumberAllPartitions", "05")) {
            VoltTable t = r.response.getResults()[0];
            while (t.advanceRow()) {
                found.add(t.getLong(0));
            }
        }
        assertEquals(List.of(5L), found);
        // FKMODE_MULTI_QUERY_FIRST and FKMODE_CACHED_ANSWER.
        VoltTable mq = call("MapSubStringToNumberNoView", "05").getResults()[0];
        assertEquals(1, mq.getRowCount());
        assertEquals(5L, mq.fetchRow(0).getLong(0));
        VoltTable cached = call("SUBSCRIBER_NBR_MAP.select", "05").getResults()[0];
        assertEquals(5L, cached.fetchRow(0).getLong("S_ID"));
        // FKMODE_COMPOUND_PROCS.
        assertEquals(0, Clients.scalar(call("UpdateLocationCompound", "05", 99L)));
        assertEquals(99L, subscriber(5).getLong("VLR_LOCATION"));
        assertEquals(-1, Clients.scalar(call("UpdateLocationCompound", "0999", 1L)));
        assertEquals(0, Clients.scalar(call("InsertCallForwardingCompound", "05", 1, 100, 1)));
        assertEquals(0, Clients.scalar(call("DeleteCallForwardingCompound", "05", 1, 0L)));
        // UPDATE_SUBSCRIBER_NBR.
        call("UpdateSubNbr", 5, "0500");
        assertEquals(0, call("SUBSCRIBER_NBR_MAP.select", "05").getResults()[0].getRowCount());
        assertEquals(5L, call("SUBSCRIBER_NBR_MAP.select", "0500").getResults()[0].fetchRow(0).getLong("S_ID"));
        assertEquals("0500", subscriber(5).getString("SUB_NBR"));

        // Thread 0's statistics every 5 s.
        VoltTable latency = call("@Statistics", "LATENCY", 1).getResults()[0];
        assertEquals(1, latency.getRowCount());
        latency.advanceRow();
        assertEquals(0L, latency.getLong("HOST_ID"));
        assertEquals(5000L, latency.getLong("INTERVAL"));
        assertTrue(latency.getLong("P50") >= 0);
        VoltTable log = call("@Statistics", "COMMANDLOG", 1).getResults()[0];
        log.advanceRow();
        assertEquals(0L, log.getLong("OUTSTANDING_TXNS"));
        VoltTable profile = call("@Statistics", "PROCEDUREPROFILE", 1).getResults()[0];
        long loads = -1;
        while (profile.advanceRow()) {
            if (profile.getString("PROCEDURE").endsWith("LoadSubscriber")) {
                loads = profile.getLong("INVOCATIONS");
            }
        }
        assertEquals(SUBSCRIBERS, loads);
    }
}
