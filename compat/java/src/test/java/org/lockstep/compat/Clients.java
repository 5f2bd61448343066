// Helpers shared by the test classes: connecting the real client and running @AdHoc.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.voltdb.VoltTable;
import org.voltdb.client.Client;
import org.voltdb.client.ClientConfig;
import org.voltdb.client.ClientFactory;
import org.voltdb.client.ClientResponse;

public final class Clients {
    private Clients() {}

    /** A client connected to 127.0.0.1:port, with credentials and the given affinity setting. */
    public static Client connect(int port, boolean affinity) throws Exception {
        ClientConfig config = new ClientConfig("compat", "secret");
        config.setClientAffinity(affinity);
        Client client = ClientFactory.createClient(config);
        client.createConnection("127.0.0.1", port);
        return client;
    }

    /** A client with the default configuration (affinity on). */
    public static Client connect(int port) throws Exception {
        return connect(port, true);
    }

    /** Runs one @AdHoc statement that must succeed and returns its response. */
    public static ClientResponse adHoc(Client client, String sql, Object... params) throws Exception {
        Object[] args = new Object[params.length + 1];
        args[0] = sql;
        System.arraycopy(params, 0, args, 1, params.length);
        ClientResponse r = client.callProcedure("@AdHoc", args);
        assertEquals(ClientResponse.SUCCESS, r.getStatus(), r.getStatusString());
        return r;
    }

    /** The single BIGINT of a one-row, one-column result (DML counts, COUNT(*)). */
    public static long scalar(ClientResponse r) {
        VoltTable[] t = r.getResults();
        assertEquals(1, t.length, "result table count");
        assertEquals(1, t[0].getRowCount(), "row count");
        return t[0].asScalarLong();
    }

    /** The client-side hashinator built from the server's @Statistics TOPO ring. */
    public static org.voltdb.client.HashinatorLite hashinator(Client client) throws Exception {
        VoltTable[] topo = client.callProcedure("@Statistics", "TOPO", 0).getResults();
        VoltTable ring = topo[1];
        ring.advanceRow();
        return new org.voltdb.client.HashinatorLite(ring.getVarbinary("HASHCONFIG"), false);
    }

    /** The partition the client's hashinator sends a BIGINT key to. */
    public static int partitionOf(org.voltdb.client.HashinatorLite h, long key) {
        return h.getHashedPartitionForParameter(org.voltdb.VoltType.BIGINT.getValue(), key);
    }

    public static void closeQuietly(Client c) {
        if (c == null) {
            return;
        }
        try {
            c.close();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
