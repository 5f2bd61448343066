// Partition-aware routing: the client's own hashinator, TOPO/PROCEDURES/keys shapes, all-partition calls.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.json_voltpatches.JSONObject;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.voltdb.VoltTable;
import org.voltdb.VoltType;
import org.voltdb.client.Client;
import org.voltdb.client.ClientResponse;
import org.voltdb.client.ClientResponseWithPartitionKey;
import org.voltdb.client.HashinatorLite;

class RoutingTest {
    private static final int ROWS = 200;
    /** The partition id VoltDB uses for the multi-partition initiator row of TOPO. */
    private static final int MP_INITIATOR_PARTITION = 16383;

    private static LockstepServer server;
    private static Client client;
    private static HashinatorLite hashinator;

    @BeforeAll
    static void start() throws Exception {
        server = LockstepServer.start("routing");
        client = Clients.connect(server.port());
        Clients.adHoc(client, "CREATE TABLE routed (k BIGINT NOT NULL, v VARCHAR(16), PRIMARY KEY (k))");
        Clients.adHoc(client, "PARTITION TABLE routed ON COLUMN k");
        Clients.adHoc(client, "CREATE PROCEDURE RowsHere PARTITION ON TABLE routed COLUMN k PARAMETER 0"
                + " FROM FILE 'RowsHere.lua' SOURCE $lua$"
                + " local q = sql [[SELECT k FROM routed ORDER BY k]]"
                + " return function(key) return q:query() end $lua$");
        // Re-subscribe with a new client so that its PROCEDURES info includes the procedures above.
        Clients.closeQuietly(client);
        client = Clients.connect(server.port());
        hashinator = new HashinatorLite(hashConfig(client), false);
        for (long k = 0; k < ROWS; k++) {
            ClientResponse r = client.callProcedure("ROUTED.insert", k, "v" + k);
            assertEquals(1L, r.getResults()[0].asScalarLong());
        }
    }

    @AfterAll
    static void stop() {
        Clients.closeQuietly(client);
        server.close();
    }

    private static byte[] hashConfig(Client c) throws Exception {
        VoltTable[] topo = c.callProcedure("@Statistics", "TOPO", 0).getResults();
        assertTrue(topo.length >= 2, "@Statistics TOPO returns two tables");
        VoltTable ring = topo[1];
        assertTrue(ring.advanceRow());
        byte[] config = ring.getVarbinary("HASHCONFIG");
        assertNotNull(config);
        return config;
    }

    private static int partitionOf(long key) throws Exception {
        return hashinator.getHashedPartitionForParameter(VoltType.BIGINT.getValue(), key);
    }

    @Test
    void topologyHasOneRowPerPartitionAndTheMpInitiator() throws Exception {
        VoltTable t = client.callProcedure("@Statistics", "TOPO", 0).getResults()[0];
        Set<Integer> partitions = new TreeSet<>();
        while (t.advanceRow()) {
            partitions.add((int) t.getLong("Partition"));
            assertFalse(t.getString("Sites").isEmpty());
            assertFalse(t.getString("Leader").isEmpty());
        }
        assertEquals(Set.of(0, 1, MP_INITIATOR_PARTITION), partitions);
    }

    @Test
    void partitionKeysHashToTheirOwnPartitions() throws Exception {
        VoltTable t = client.callProcedure("@GetPartitionKeys", "INTEGER").getResults()[0];
        assertEquals(2, t.getColumnCount());
        assertEquals("PARTITION_ID", t.getColumnName(0));
        assertEquals("PARTITION_KEY", t.getColumnName(1));
        assertEquals(LockstepServer.SITES, t.getRowCount());
        Set<Integer> seen = new TreeSet<>();
        while (t.advanceRow()) {
            int partition = (int) t.getLong(0);
            long key = t.getLong(1);
            seen.add(partition);
            assertEquals(partition, partitionOf(key), "key " + key);
        }
        assertEquals(Set.of(0, 1), seen);
    }

    @Test
    void proceduresCatalogDescribesPartitioning() throws Exception {
        VoltTable t = client.callProcedure("@SystemCatalog", "PROCEDURES").getResults()[0];
        JSONObject insert = null;
        JSONObject rowsHere = null;
        while (t.advanceRow()) {
            String name = t.getString(2);
            if (name.equalsIgnoreCase("ROUTED.insert")) {
                insert = new JSONObject(t.getString(6));
            } else if (name.equalsIgnoreCase("RowsHere")) {
                rowsHere = new JSONObject(t.getString(6));
            }
        }
        assertNotNull(insert, "ROUTED.insert listed");
        assertFalse(insert.getBoolean("readOnly"));
        assertTrue(insert.getBoolean("singlePartition"));
        assertEquals(0, insert.getInt("partitionParameter"));
        assertEquals(VoltType.BIGINT.getValue(), insert.getInt("partitionParameterType"));
        assertNotNull(rowsHere, "RowsHere listed");
        assertTrue(rowsHere.getBoolean("singlePartition"));
        assertEquals(0, rowsHere.getInt("partitionParameter"));
    }

    @Test
    void everyRowLandsOnThePartitionTheClientHashSays() throws Exception {
        ClientResponseWithPartitionKey[] all = client.callAllPartitionProcedure("RowsHere");
        assertEquals(LockstepServer.SITES, all.length);
        TreeMap<Integer, Set<Long>> actual = new TreeMap<>();
        for (ClientResponseWithPartitionKey r : all) {
            assertEquals(ClientResponse.SUCCESS, r.response.getStatus(), r.response.getStatusString());
            int partition = partitionOf(((Number) r.partitionKey).longValue());
            Set<Long> keys = new TreeSet<>();
            VoltTable t = r.response.getResults()[0];
            while (t.advanceRow()) {
                keys.add(t.getLong(0));
            }
            actual.put(partition, keys);
        }
        TreeMap<Integer, Set<Long>> expected = new TreeMap<>();
        expected.put(0, new TreeSet<>());
        expected.put(1, new TreeSet<>());
        for (long k = 0; k < ROWS; k++) {
            expected.get(partitionOf(k)).add(k);
        }
        assertFalse(expected.get(0).isEmpty());
        assertFalse(expected.get(1).isEmpty());
        assertEquals(expected, actual);
    }

    @Test
    void affinityOffClientCanCallAllPartitions() throws Exception {
        Client plain = Clients.connect(server.port(), false);
        try {
            ClientResponseWithPartitionKey[] all = plain.callAllPartitionProcedure("RowsHere");
            assertEquals(LockstepServer.SITES, all.length);
            long total = 0;
            for (ClientResponseWithPartitionKey r : all) {
                assertEquals(ClientResponse.SUCCESS, r.response.getStatus(), r.response.getStatusString());
                total += r.response.getResults()[0].getRowCount();
            }
            assertEquals(ROWS, total);
        } finally {
            Clients.closeQuietly(plain);
        }
    }

    @Test
    void directedProcedureRunsOncePerPartition() throws Exception {
        Clients.adHoc(client, "CREATE PROCEDURE CountHere DIRECTED AS SELECT COUNT(*) FROM routed");
        ClientResponseWithPartitionKey[] all = client.callAllPartitionProcedure("CountHere");
        assertEquals(LockstepServer.SITES, all.length);
        long expected0 = 0;
        for (long k = 0; k < ROWS; k++) {
            if (partitionOf(k) == 0) {
                expected0++;
            }
        }
        long[] byPartition = new long[LockstepServer.SITES];
        for (ClientResponseWithPartitionKey r : all) {
            assertEquals(ClientResponse.SUCCESS, r.response.getStatus(), r.response.getStatusString());
            byPartition[partitionOf(((Number) r.partitionKey).longValue())] = r.response.getResults()[0].asScalarLong();
        }
        assertEquals(expected0, byPartition[0]);
        assertEquals(ROWS - expected0, byPartition[1]);
    }
}
