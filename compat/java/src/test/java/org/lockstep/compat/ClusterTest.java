// The real VoltDB client against a three-node cluster (k = 1): it connects to every node,
// single- and multi-partition calls work through it, and it goes on when a node is killed.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;
import org.voltdb.client.Client;
import org.voltdb.client.ClientConfig;
import org.voltdb.client.ClientFactory;
import org.voltdb.client.ClientResponse;
import org.voltdb.client.ProcCallException;

class ClusterTest {
    private static final int ROWS = 60;
    /** Longest a call is retried while the cluster fails over (or a node learns the schema). */
    private static final long RETRY_MS = 30_000;

    @Test
    void theClientUsesEveryNodeAndSurvivesAKilledNode() throws Exception {
        List<LockstepServer> nodes = LockstepServer.startCluster("cluster", 3, 1);
        Client client = null;
        try {
            ClientConfig config = new ClientConfig("compat", "secret");
            client = ClientFactory.createClient(config);
            for (LockstepServer n : nodes) {
                client.createConnection("127.0.0.1", n.port());
            }
            // Every node reports the same cluster instance, so the client keeps all three.
            assertEquals(3, client.getConnectedHostList().size(), "connections kept: " + client.getConnectedHostList());

            Clients.adHoc(client, "CREATE TABLE kv (k BIGINT NOT NULL, v VARCHAR(16), PRIMARY KEY (k))");
            Clients.adHoc(client, "PARTITION TABLE kv ON COLUMN k");
            for (long k = 0; k < ROWS; k++) {
                ClientResponse r = retry(client, "KV.insert", k, "v" + k);
                assertEquals(1L, r.getResults()[0].asScalarLong());
            }
            assertEquals(ROWS, Clients.scalar(retry(client, "@AdHoc", "SELECT COUNT(*) FROM kv")));

            // Kill node 1: with k = 1 the others hold a copy of each of its partitions and take
            // over; every acknowledged row is still there.
            nodes.get(1).kill();
            for (long k = ROWS; k < 2 * ROWS; k++) {
                retry(client, "KV.insert", k, "v" + k);
            }
            assertEquals(2L * ROWS, Clients.scalar(retry(client, "@AdHoc", "SELECT COUNT(*) FROM kv")));
            for (long k = 0; k < 2 * ROWS; k++) {
                ClientResponse r = retry(client, "KV.select", k);
                assertEquals("v" + k, r.getResults()[0].fetchRow(0).getString(1), "row " + k);
            }
        } finally {
            Clients.closeQuietly(client);
            for (LockstepServer n : nodes) {
                n.close();
            }
        }
    }

    /**
     * Calls until it succeeds: a call refused while the cluster fails over (or before a node
     * applied the schema) did not run, and one lost with its connection is written again,
     * which is harmless here (an insert of a row already there fails, and is checked below
     * by reading every row).
     */
    private static ClientResponse retry(Client client, String proc, Object... params) throws Exception {
        long deadline = System.currentTimeMillis() + RETRY_MS;
        while (true) {
            try {
                return client.callProcedure(proc, params);
            } catch (ProcCallException e) {
                String why = String.valueOf(e.getClientResponse().getStatusString());
                if (why.contains("already exists") || why.contains("unique") || why.contains("UNIQUE")) {
                    return e.getClientResponse();
                }
                assertTrue(System.currentTimeMillis() < deadline, proc + " kept failing: " + why);
            } catch (Exception e) {
                assertTrue(System.currentTimeMillis() < deadline, proc + " kept failing: " + e);
            }
            Thread.sleep(50);
        }
    }
}
