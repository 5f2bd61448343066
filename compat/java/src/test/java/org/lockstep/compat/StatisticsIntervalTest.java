// @Statistics with the interval flag, through the real client: with 1 a counter selector
// answers the change since this connection's last interval read (what the TATP kit divides by
// its 5-second period to print TPS); with 0 the totals since start.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;
import org.voltdb.VoltTable;
import org.voltdb.client.Client;
import org.voltdb.client.ClientResponse;

class StatisticsIntervalTest {
    /** INVOCATIONS of `proc` summed over the rows of `selector` (PROCEDURE has one per site). */
    private static long invocations(Client c, String selector, int interval, String proc) throws Exception {
        ClientResponse r = c.callProcedure("@Statistics", selector, interval);
        assertEquals(ClientResponse.SUCCESS, r.getStatus(), r.getStatusString());
        VoltTable t = r.getResults()[0];
        long n = 0;
        while (t.advanceRow()) {
            if (t.getString("PROCEDURE").endsWith(proc)) {
                n += t.getLong("INVOCATIONS");
            }
        }
        return n;
    }

    private static void calls(Client c, int n) throws Exception {
        for (int i = 0; i < n; i++) {
            assertEquals(ClientResponse.SUCCESS, c.callProcedure("KV.upsert", i, "v").getStatus());
        }
    }

    @Test
    void intervalReadsCountOnlyTheCallsSinceTheCallersLastOne() throws Exception {
        try (LockstepServer server = LockstepServer.start("statistics-interval")) {
            Client c = Clients.connect(server.port());
            Client other = Clients.connect(server.port());
            try {
                Clients.adHoc(c, "CREATE TABLE kv (k INTEGER NOT NULL PRIMARY KEY, v VARCHAR(8))");
                Clients.adHoc(c, "PARTITION TABLE kv ON COLUMN k");
                calls(c, 7);
                // The first interval read of a connection counts everything so far.
                assertEquals(7, invocations(c, "PROCEDUREPROFILE", 1, "KV.upsert"));
                calls(c, 5);
                assertEquals(5, invocations(c, "PROCEDUREPROFILE", 1, "KV.upsert"), "only the calls in between");
                assertEquals(0, invocations(c, "PROCEDUREPROFILE", 1, "KV.upsert"), "none since");
                // Totals are unchanged by interval reads; PROCEDURE has baselines of its own.
                assertEquals(12, invocations(c, "PROCEDUREPROFILE", 0, "KV.upsert"));
                assertEquals(12, invocations(c, "PROCEDURE", 1, "KV.upsert"));
                calls(c, 2);
                assertEquals(2, invocations(c, "PROCEDURE", 1, "KV.upsert"));
                // Another connection measures from its own last read, not this one's.
                assertEquals(14, invocations(other, "PROCEDUREPROFILE", 1, "KV.upsert"));
                assertEquals(2, invocations(c, "PROCEDUREPROFILE", 1, "KV.upsert"));
            } finally {
                Clients.closeQuietly(other);
                Clients.closeQuietly(c);
            }
        }
    }
}
