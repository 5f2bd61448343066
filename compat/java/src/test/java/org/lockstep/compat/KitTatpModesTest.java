// The TATP kit (srmadscience/voltdb-tatpbenchmark) in each of its foreign-key modes, replayed
// with our own code against apps/tatp/ddl.sql: the calls its TatpClient makes for
// UPDATE_LOCATION, INSERT_CALL_FORWARDING and DELETE_CALL_FORWARDING, and the checks its
// callbacks make on the answers (SUCCESS, the S_ID of the lookup, and in the tasked mode
// "exactly one record updated" over every partition's answer). Also the loader: the kit's
// LoadSubscriber draws its rows from java.util.Random(seed), so the rows are known here.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Random;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.voltdb.VoltTable;
import org.voltdb.client.Client;
import org.voltdb.client.ClientResponse;
import org.voltdb.client.ClientResponseWithPartitionKey;

class KitTatpModesTest {
    private static final int SUBSCRIBERS = 40;
    private static LockstepServer server;
    private static Client client;
    /** Per subscriber (index = s_id): its facility types as the kit's loader drew them. */
    private static final int[][] FACILITIES = new int[SUBSCRIBERS][];

    @BeforeAll
    static void start() throws Exception {
        server = LockstepServer.start("kit-tatp-modes", Apps.procedures("tatp"));
        client = Clients.connect(server.port());
        Apps.loadDdl(client, "tatp");
        for (int i = 0; i < SUBSCRIBERS; i++) {
            load(i);
        }
    }

    @AfterAll
    static void stop() {
        Clients.closeQuietly(client);
        server.close();
    }

    private static ClientResponse ok(String proc, Object... args) throws Exception {
        ClientResponse r = client.callProcedure(proc, args);
        assertEquals(ClientResponse.SUCCESS, r.getStatus(), proc + ": " + r.getStatusString());
        return r;
    }

    private static long count(String sql) throws Exception {
        return Clients.scalar(Clients.adHoc(client, sql));
    }

    /**
     * The kit's loader call for subscriber i (seed i), and the rows it must make: the kit's
     * rule, restated: for types 0..3 an access row one time in four (two ints, two strings
     * drawn), then for types 0..3 a facility one time in four (active, two ints, a string),
     * each with nextInt(3) forwardings (an int and a string each).
     */
    private static void load(int i) throws Exception {
        Object[] args = new Object[35];
        args[0] = (long) i;
        args[1] = "0" + i;
        for (int j = 0; j < 30; j++) {
            args[2 + j] = (byte) (j % 2);
        }
        args[32] = 1000L + i;
        args[33] = 2000L + i;
        args[34] = i;
        VoltTable[] tables = ok("LoadSubscriber", args).getResults();
        ok("SUBSCRIBER_NBR_MAP.insert", "0" + i, (long) i);

        Random r = new Random(i);
        int access = 0;
        int forwardings = 0;
        java.util.List<Integer> facilities = new java.util.ArrayList<>();
        for (int t = 0; t < 4; t++) {
            if (r.nextInt(4) == 0) {
                access++;
                r.nextInt(256);
                r.nextInt(256);
                skip(r, 26, 3 + 5);
            }
        }
        for (int t = 0; t < 4; t++) {
            if (r.nextInt(4) == 0) {
                facilities.add(t);
                r.nextInt(100);
                r.nextInt(256);
                r.nextInt(256);
                skip(r, 26, 5);
                int n = r.nextInt(3);
                for (int j = 0; j < n; j++) {
                    forwardings++;
                    r.nextInt(8);
                    skip(r, 10, 15);
                }
            }
        }
        FACILITIES[i] = facilities.stream().mapToInt(Integer::intValue).toArray();
        assertEquals(1 + access + facilities.size() + forwardings, tables.length, "tables of LoadSubscriber(" + i + ")");
        for (VoltTable t : tables) {
            assertEquals(1, t.asScalarLong());
        }
        assertEquals(access, count("SELECT COUNT(*) FROM access_info WHERE s_id = " + i));
        assertEquals(facilities.size(), count("SELECT COUNT(*) FROM special_facility WHERE s_id = " + i));
        assertEquals(forwardings, count("SELECT COUNT(*) FROM call_forwarding WHERE s_id = " + i));
    }

    /** The draws of a random string of n characters from an alphabet of `size`. */
    private static void skip(Random r, int size, int n) {
        for (int k = 0; k < n; k++) {
            r.nextInt(size);
        }
    }

    /** The kit's AbstactCallback.getSid: S_ID of the first row of a successful answer, else -1. */
    private static int sid(ClientResponse r) {
        if (r.getStatus() == ClientResponse.SUCCESS && r.getResults()[0].advanceRow()) {
            return (int) r.getResults()[0].getLong("S_ID");
        }
        return -1;
    }

    /** The mode-0 lookup: every partition asked, the first that knows the number answers. */
    private static int sidFromAllPartitions(String fk) throws Exception {
        int found = -1;
        for (ClientResponseWithPartitionKey r : client.callAllPartitionProcedure("MapSubStringToNumberAllPartitions", fk)) {
            assertEquals(ClientResponse.SUCCESS, r.response.getStatus());
            int s = sid(r.response);
            if (s > -1) {
                found = s;
            }
        }
        return found;
    }

    /** The s_id each lookup mode finds for subscriber i's number. */
    private static int lookup(int mode, int i) throws Exception {
        String fk = "0" + i;
        switch (mode) {
            case 0:
                return sidFromAllPartitions(fk);
            case 2:
                return sid(ok("MapSubStringToNumberNoView", fk));
            default:
                return sid(ok("SUBSCRIBER_NBR_MAP.select", fk));
        }
    }

    /** Modes 0, 2 and 3: lookup, then the single-partition write, each answer SUCCESS. */
    @Test
    void lookupFirstModesFindTheSubscriberAndTheWritesSucceed() throws Exception {
        Random r = new Random(42);
        for (int mode : new int[] {0, 2, 3}) {
            for (int i = 1; i < SUBSCRIBERS; i += 7) {
                int sid = lookup(mode, i);
                assertEquals(i, sid, "mode " + mode);
                long location = r.nextLong();
                assertEquals(1, ok("UpdateLocation", sid, location).getResults()[0].asScalarLong());
                assertEquals(location, count("SELECT vlr_location FROM subscriber WHERE s_id = " + i));
                insertLikeTheKit(sid, r.nextInt(2), r.nextInt(256), r.nextInt(4) + 1);
                long deleted = ok("DeleteCallForwarding", sid, r.nextInt(4) + 1, 0L).getResults()[0].asScalarLong();
                assertTrue(deleted == 0 || deleted == 1);
            }
            assertEquals(-1, lookup(mode, 999), "an unknown number finds nothing in mode " + mode);
        }
    }

    /**
     * InsertCallForwarding as the kit's Java does it: sf_type is ignored; the subscriber's
     * lowest facility type gets a row (deleted first) at start 0, 8 or 16; no facility, no table.
     */
    private static void insertLikeTheKit(int sid, int bit, int dataA, int sfType) throws Exception {
        VoltTable[] t = ok("InsertCallForwarding", sid, bit, dataA, sfType).getResults();
        if (FACILITIES[sid].length == 0) {
            assertEquals(0, t.length, "no facility, no table");
            return;
        }
        assertEquals(2, t.length);
        assertEquals(1, t[1].asScalarLong());
        int lowest = FACILITIES[sid][0];
        VoltTable rows = Clients.adHoc(client, "SELECT start_time, end_time, numberx FROM call_forwarding WHERE s_id = "
                + sid + " AND sf_type = " + lowest + " AND numberx >= 'A' ORDER BY start_time").getResults()[0];
        assertTrue(rows.advanceRow(), "a row of the lowest facility type " + lowest);
        long start = rows.getLong(0);
        assertTrue(start == 0 || start == 8 || start == 16, "start " + start);
        long end = rows.getLong(1);
        assertTrue(end >= start + 1 && end <= start + 24, "end " + end);
        assertTrue(rows.getString(2).matches("[A-Z]{15}"), rows.getString(2));
    }

    /** The kit's GenericUpdateOneRowInAllPartitionsCallback sum; -1 marks an answer without tables. */
    private static long updatedOverPartitions(ClientResponseWithPartitionKey[] answers, int[] empty) {
        long updated = 0;
        for (ClientResponseWithPartitionKey a : answers) {
            assertEquals(ClientResponse.SUCCESS, a.response.getStatus(), a.response.getStatusString());
            VoltTable[] t = a.response.getResults();
            if (t.length == 0) {
                empty[0]++;
                continue;
            }
            if (t[t.length - 1].advanceRow()) {
                updated += t[t.length - 1].getLong(0);
            }
        }
        return updated;
    }

    /** Mode 1: every partition is tasked; the kit expects "1 and only 1 record" in total. */
    @Test
    void taskedModeUpdatesOneAndOnlyOneRecord() throws Exception {
        Random r = new Random(7);
        int[] empty = {0};
        for (int i = 2; i < SUBSCRIBERS; i += 5) {
            String fk = "0" + i;
            long location = r.nextLong();
            assertEquals(1, updatedOverPartitions(client.callAllPartitionProcedure("UpdateLocationMultiPartition", fk, location), empty));
            assertEquals(location, count("SELECT vlr_location FROM subscriber WHERE s_id = " + i));

            // The kit passes (start time, sf type) where the procedure takes (sf_type, start_time).
            long startTime = new long[] {0, 8, 16, 16}[r.nextInt(4)];
            int sfType = r.nextInt(4) + 1;
            assertEquals(1, updatedOverPartitions(client.callAllPartitionProcedure("DeleteCallForwardingMultiPartition", fk,
                    startTime, sfType), empty), "the lookup answers, whether or not a row was deleted");
        }
        assertEquals(0, empty[0], "updates and deletes answer a table on every partition");

        // The delete does delete: a row put there is gone, and the answer is still 1.
        long facility = FACILITIES[3].length > 0 ? FACILITIES[3][0] : -1;
        if (facility >= 0) {
            Clients.adHoc(client, "DELETE FROM call_forwarding WHERE s_id = 3 AND sf_type = " + facility + " AND start_time = 16");
            Clients.adHoc(client, "INSERT INTO call_forwarding VALUES (3, " + facility + ", 16, 20, '123')");
            assertEquals(1, updatedOverPartitions(client.callAllPartitionProcedure("DeleteCallForwardingMultiPartition", "03",
                    facility, 16L), empty));
            assertEquals(0, count("SELECT COUNT(*) FROM call_forwarding WHERE s_id = 3 AND start_time = 16 AND sf_type = " + facility));
        }
        assertEquals(0, updatedOverPartitions(client.callAllPartitionProcedure("DeleteCallForwardingMultiPartition", "0999", 1, 0L), empty));

        // Insert: the partition holding a subscriber with a facility answers (deleted, inserted = 1);
        // every other answer has no table, as the kit's Java returns an empty batch there.
        for (int i = 0; i < SUBSCRIBERS - 1; i++) {
            int[] none = {0};
            long inserted = updatedOverPartitions(client.callAllPartitionProcedure("InsertCallForwardingMultiPartition", "0" + i,
                    r.nextInt(2), r.nextInt(256), r.nextInt(4) + 1), none);
            boolean has = FACILITIES[i].length > 0;
            assertEquals(has ? 1 : 0, inserted, "subscriber " + i);
            assertEquals(has ? LockstepServer.SITES - 1 : LockstepServer.SITES, none[0], "answers without a table, subscriber " + i);
        }
    }

    /** Mode 4: the compound procedures answer SUCCESS (0), and -1 for an unknown number. */
    @Test
    void compoundModeAnswersSuccess() throws Exception {
        assertEquals(0, Clients.scalar(ok("UpdateLocationCompound", "05", 1234L)));
        assertEquals(1234L, count("SELECT vlr_location FROM subscriber WHERE s_id = 5"));
        assertEquals(0, Clients.scalar(ok("InsertCallForwardingCompound", "05", 1, 100, 1)));
        assertEquals(0, Clients.scalar(ok("DeleteCallForwardingCompound", "05", 1, 0L)));
        assertEquals(-1, Clients.scalar(ok("UpdateLocationCompound", "0999", 1L)));
    }

    /**
     * Mode 4 under concurrency: the kit's client fires the compound procedures asynchronously
     * and checks each callback for SUCCESS. Every subscriber's UpdateLocationCompound in flight
     * at once, then the locations read back (each call's write happened exactly once).
     */
    @Test
    void compoundModeUnderConcurrency() throws Exception {
        java.util.concurrent.ConcurrentLinkedQueue<String> bad = new java.util.concurrent.ConcurrentLinkedQueue<>();
        java.util.concurrent.CountDownLatch done = new java.util.concurrent.CountDownLatch(3 * SUBSCRIBERS);
        org.voltdb.client.ProcedureCallback check = r -> {
            if (r.getStatus() != ClientResponse.SUCCESS || r.getResults()[0].asScalarLong() != 0) {
                bad.add(r.getStatusString());
            }
            done.countDown();
        };
        for (int i = 0; i < SUBSCRIBERS; i++) {
            client.callProcedure(check, "UpdateLocationCompound", "0" + i, 5000L + i);
            client.callProcedure(check, "InsertCallForwardingCompound", "0" + i, 1, 100, 1);
            client.callProcedure(check, "DeleteCallForwardingCompound", "0" + i, 1, 16L);
        }
        assertTrue(done.await(60, java.util.concurrent.TimeUnit.SECONDS), "every compound call answered");
        assertTrue(bad.isEmpty(), "failed or non-zero answers: " + bad);
        for (int i = 0; i < SUBSCRIBERS; i++) {
            assertEquals(5000L + i, count("SELECT vlr_location FROM subscriber WHERE s_id = " + i));
        }
    }

    /** The read transactions of the loop, in every mode, with the kit's parameter types. */
    @Test
    void readsAndSubscriberDataUpdatesAnswerTheKitsShapes() throws Exception {
        VoltTable s = ok("GetSubscriberData", 4).getResults()[0];
        assertEquals(1, s.getRowCount());
        s.advanceRow();
        assertEquals("04", s.getString("SUB_NBR"));
        assertEquals(21L, s.getLong("BYTE2_1"), "the kit's loader stores 21 in byte2_1");
        assertEquals(210L, s.getLong("BYTE2_10"));
        VoltTable[] u = ok("UpdateSubscriberData", 4, 1, 100, 1).getResults();
        assertEquals(2, u.length);
        assertEquals(1, u[0].asScalarLong());
        long hasType1 = count("SELECT COUNT(*) FROM special_facility WHERE s_id = 4 AND sf_type = 1");
        assertEquals(hasType1, u[1].asScalarLong());
        VoltTable access = ok("GetAccessData", 4, 1).getResults()[0];
        assertEquals(count("SELECT COUNT(*) FROM access_info WHERE s_id = 4 AND ai_type = 1"), access.getRowCount());
        assertEquals(1, ok("GetNewDestination", 4, 1, 0L, 24L).getResults().length);
        // UPDATE_SUBSCRIBER_NBR: three count tables; an unknown s_id changes nothing but the map.
        VoltTable[] nbr = ok("UpdateSubNbr", SUBSCRIBERS - 1, "0_last").getResults();
        assertEquals(3, nbr.length);
        assertEquals(1, nbr[0].asScalarLong());
        assertEquals(1, nbr[1].asScalarLong());
        assertEquals(1, nbr[2].asScalarLong());
        assertEquals(SUBSCRIBERS - 1, sid(ok("SUBSCRIBER_NBR_MAP.select", "0_last")));
        assertEquals(0, ok("SUBSCRIBER_NBR_MAP.select", "0" + (SUBSCRIBERS - 1)).getResults()[0].getRowCount());
    }
}
