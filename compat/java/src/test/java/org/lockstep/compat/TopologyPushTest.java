// Procedure pushes: a subscribed client learns of procedures created after it connected (handle
// Long.MAX_VALUE-2, voltdb-wire.md §1.8) and routes them to their partition.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.lang.reflect.Field;
import java.util.Map;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.voltdb.VoltTable;
import org.voltdb.VoltType;
import org.voltdb.client.Client;
import org.voltdb.client.ClientResponseWithPartitionKey;
import org.voltdb.client.HashinatorLite;

class TopologyPushTest {
    /** How long to wait for the client to take in an answer it did not ask for. */
    private static final long PUSH_WAIT_MS = 20_000;

    private static LockstepServer server;

    @BeforeAll
    static void start() throws Exception {
        server = LockstepServer.start("push");
    }

    @AfterAll
    static void stop() {
        server.close();
    }

    private static Object field(Object o, String name) throws Exception {
        Field f = o.getClass().getDeclaredField(name);
        f.setAccessible(true);
        return f.get(o);
    }

    /** A field read through a VarHandle of the given type (see routingInfo). */
    private static Object field(Object o, String name, Class<?> type) throws Exception {
        return MethodHandles.privateLookupIn(o.getClass(), MethodHandles.lookup())
                .findVarHandle(o.getClass(), name, type).get(o);
    }

    /** The client's routing entry for a procedure (Distributer.m_procedureInfo), or null.
     *  Read through a VarHandle: plain reflection on Distributer would load every field's
     *  type, and some (netty's SSL classes) are not on the classpath. */
    private static Object routingInfo(Client c, String proc) throws Exception {
        Object distributer = field(c, "m_distributer", Class.forName("org.voltdb.client.Distributer"));
        VarHandle handle = MethodHandles.privateLookupIn(distributer.getClass(), MethodHandles.lookup())
                .findVarHandle(distributer.getClass(), "m_procedureInfo", AtomicReference.class);
        @SuppressWarnings("unchecked")
        AtomicReference<Map<String, Object>> info = (AtomicReference<Map<String, Object>>) handle.get(distributer);
        Map<String, Object> map = info.get();
        if (map == null) {
            return null;
        }
        // The client's map is case-sensitive; the catalog may list DDL names upper-cased.
        for (Map.Entry<String, Object> e : map.entrySet()) {
            if (e.getKey().equalsIgnoreCase(proc)) {
                return Map.entry(e.getKey(), e.getValue());
            }
        }
        return null;
    }

    private static Object awaitRoutingInfo(Client c, String proc) throws Exception {
        long deadline = System.currentTimeMillis() + PUSH_WAIT_MS;
        Object p;
        while ((p = routingInfo(c, proc)) == null && System.currentTimeMillis() < deadline) {
            Thread.sleep(20);
        }
        return p;
    }

    @Test
    void subscribedClientLearnsNewProceduresAndRoutesThem() throws Exception {
        Client watcher = Clients.connect(server.port());
        Client admin = Clients.connect(server.port(), false);
        try {
            Clients.adHoc(admin, "CREATE TABLE pushed (k BIGINT NOT NULL, v VARCHAR(16), PRIMARY KEY (k))");
            Clients.adHoc(admin, "PARTITION TABLE pushed ON COLUMN k");
            // The default procedures of the new table reach the watcher by push.
            assertNotNull(awaitRoutingInfo(watcher, "PUSHED.insert"), "PUSHED.insert pushed to the subscribed client");

            Clients.adHoc(admin, "CREATE PROCEDURE PushedGet PARTITION ON TABLE pushed COLUMN k PARAMETER 0"
                    + " FROM FILE 'PushedGet.lua' SOURCE $lua$ local q = sql [[SELECT v FROM pushed WHERE k = ?]]"
                    + " return function(k) return q:query(k) end $lua$");
            @SuppressWarnings("unchecked")
            Map.Entry<String, Object> entry = (Map.Entry<String, Object>) awaitRoutingInfo(watcher, "PushedGet");
            assertNotNull(entry, "PushedGet pushed to the subscribed client");
            // Call it by the name the client knows, so the client routes it by key.
            String pushedGet = entry.getKey();
            Object info = entry.getValue();
            assertEquals(false, field(info, "multiPart"));
            assertEquals(0, field(info, "partitionParameter"));
            assertEquals((int) VoltType.BIGINT.getValue(), field(info, "partitionParameterType"));

            // Calls of the new procedure are routed by key and land where the client's hash says.
            HashinatorLite h = Clients.hashinator(watcher);
            for (long k = 0; k < 20; k++) {
                assertEquals(1L, Clients.scalar(watcher.callProcedure("PUSHED.insert", k, "v" + k)));
            }
            for (long k = 0; k < 20; k++) {
                VoltTable t = watcher.callProcedure(pushedGet, k).getResults()[0];
                assertEquals(1, t.getRowCount(), "key " + k);
                t.advanceRow();
                assertEquals("v" + k, t.getString(0));
            }
            // Every row sits in the partition the client routed its insert to.
            Clients.adHoc(admin, "CREATE PROCEDURE PushedCount DIRECTED AS SELECT COUNT(*) FROM pushed");
            long[] expected = new long[LockstepServer.SITES];
            for (long k = 0; k < 20; k++) {
                expected[Clients.partitionOf(h, k)]++;
            }
            assertFalse(expected[0] == 0 || expected[1] == 0, "keys spread over both partitions");
            long[] actual = new long[LockstepServer.SITES];
            for (ClientResponseWithPartitionKey r : watcher.callAllPartitionProcedure("PushedCount")) {
                actual[Clients.partitionOf(h, ((Number) r.partitionKey).longValue())] = r.response.getResults()[0].asScalarLong();
            }
            assertArrayEquals(expected, actual);
        } finally {
            Clients.closeQuietly(watcher);
            Clients.closeQuietly(admin);
        }
    }
}
