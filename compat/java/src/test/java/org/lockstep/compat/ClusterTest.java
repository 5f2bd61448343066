// The real VoltDB client against a three-node cluster (k = 1): it connects to every node,
// single- and multi-partition calls work through it, it sends each single-partition call to
// its partition's leader, it goes on when a node is killed, and it connects again to the
// node once that node is started again and has rejoined.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.voltdb.VoltTable;
import org.voltdb.client.Client;
import org.voltdb.client.ClientConfig;
import org.voltdb.client.ClientFactory;
import org.voltdb.client.ClientResponse;
import org.voltdb.client.ProcCallException;

class ClusterTest {
    private static final int ROWS = 60;
    /** Longest a call is retried while the cluster fails over (or a node learns the schema). */
    private static final long RETRY_MS = 30_000;
    /** Calls whose routing is counted once the client knows the partitioning. */
    private static final int AFFINITY_CALLS = 400;
    /** Long enough for a server's pushes of the topology and procedures to reach the client. */
    private static final long PUSH_SETTLE_MS = 2_500;
    /** The multi-partition coordinator's row of @Statistics TOPO. */
    private static final long MP_PARTITION_ID = 16383;

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

    @Test
    void theClientSendsEachCallToItsLeaderAndReconnectsToARejoinedNode() throws Exception {
        List<LockstepServer> nodes = LockstepServer.startCluster("cluster-rejoin", 3, 1);
        Client client = null;
        List<Client> perNode = new ArrayList<>();
        try {
            ClientConfig config = new ClientConfig("compat", "secret");
            config.setReconnectOnConnectionLoss(true);
            client = ClientFactory.createClient(config);
            for (LockstepServer n : nodes) {
                client.createConnection("127.0.0.1", n.port());
            }
            Clients.adHoc(client, "CREATE TABLE kv (k BIGINT NOT NULL, v VARCHAR(16), PRIMARY KEY (k))");
            Clients.adHoc(client, "PARTITION TABLE kv ON COLUMN k");
            for (LockstepServer n : nodes) {
                perNode.add(Clients.connect(n.port(), false));
            }
            // The servers push the topology to the client after logins (a second or so), and
            // the procedures after DDL: write until the client has had time to read both.
            long k = 0;
            long settled = System.currentTimeMillis() + PUSH_SETTLE_MS;
            for (; k < ROWS || System.currentTimeMillis() < settled; k++) {
                retry(client, "KV.insert", k, "v" + k);
            }

            // Affinity: once the client knows the partitioning, it sends each call to the node
            // that leads the call's partition, so the nodes pass (almost) none on.
            long before = forwarded(perNode);
            for (; k < ROWS + AFFINITY_CALLS; k++) {
                retry(client, "KV.insert", k, "v" + k);
            }
            long passedOn = forwarded(perNode) - before;
            assertTrue(passedOn <= AFFINITY_CALLS / 20,
                    passedOn + " of " + AFFINITY_CALLS + " calls reached a node that does not lead their partition");

            // Node 1 dies; the client goes on through the others.
            nodes.get(1).kill();
            Clients.closeQuietly(perNode.set(1, null));
            long killedAt = k;
            for (; k < killedAt + ROWS; k++) {
                retry(client, "KV.insert", k, "v" + k);
            }

            // Started again, node 1 rejoins its partitions, and the client connects to it again
            // by itself.
            nodes.get(1).startAgain();
            long deadline = System.currentTimeMillis() + RETRY_MS;
            while (client.getConnectedHostList().size() < 3 || !fullyReplicated(perNode.get(0))) {
                assertTrue(System.currentTimeMillis() < deadline, "node 1 did not rejoin, or the client did not reconnect to it: "
                        + client.getConnectedHostList());
                retry(client, "KV.insert", k, "v" + k);
                k++;
                Thread.sleep(100);
            }

            // Node 0 dies: what it shared with node 1 is served from node 1's rejoined copy.
            nodes.get(0).kill();
            for (long r = 0; r < k; r++) {
                ClientResponse resp = retry(client, "KV.select", r);
                assertEquals(1, resp.getResults()[0].getRowCount(), "row " + r + " after node 1 rejoined and node 0 died");
                assertEquals("v" + r, resp.getResults()[0].fetchRow(0).getString(1), "row " + r);
            }
        } finally {
            Clients.closeQuietly(client);
            for (Client c : perNode) {
                Clients.closeQuietly(c);
            }
            for (LockstepServer n : nodes) {
                n.close();
            }
        }
    }

    /** Single-partition calls the nodes passed on to another node, summed over the nodes. */
    private static long forwarded(List<Client> perNode) throws Exception {
        long sum = 0;
        for (Client c : perNode) {
            VoltTable t = c.callProcedure("@Statistics", "CLUSTER", 0).getResults()[0];
            t.advanceRow();
            sum += t.getLong("FORWARDED_CALLS");
        }
        return sum;
    }

    /** Whether every partition has both its replicas as members, per @Statistics TOPO. */
    private static boolean fullyReplicated(Client c) throws Exception {
        VoltTable t = c.callProcedure("@Statistics", "TOPO", 0).getResults()[0];
        boolean all = t.getRowCount() > 1;
        while (t.advanceRow()) {
            if (t.getLong("Partition") != MP_PARTITION_ID && t.getString("Sites").split(",").length != 2) {
                all = false;
            }
        }
        return all;
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
