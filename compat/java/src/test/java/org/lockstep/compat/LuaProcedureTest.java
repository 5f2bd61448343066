// Lua procedures called through the real client: sync, async in bulk, aborts, app status, arrays.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.voltdb.VoltTable;
import org.voltdb.client.Client;
import org.voltdb.client.ClientResponse;
import org.voltdb.client.ProcCallException;
import org.voltdb.client.ProcedureCallback;

class LuaProcedureTest {
    /** Async calls kept in flight by the bulk test (the client caps outstanding calls at 3000). */
    private static final int ASYNC_CALLS = 20_000;
    private static final long ASYNC_BASE_ID = 1_000_000L;

    /** Bound with FROM CLASS: lives in the server's procedure directory as GetEvent.lua. */
    private static final String GET_EVENT_LUA = String.join("\n",
            "local find = sql [[SELECT id, payload FROM events WHERE id = ?]]",
            "local count = sql [[SELECT COUNT(*) AS n FROM events WHERE id = ?]]",
            "return function(id)",
            "  local row = find:first(id)",
            "  if not row then abort('no event ' .. id) end",
            "  set_app_status(7, 'found ' .. row.payload)",
            "  return find:query(id), count:query(id)",
            "end",
            "");

    private static LockstepServer server;
    private static Client client;

    @BeforeAll
    static void start() throws Exception {
        server = LockstepServer.start("lua", "GetEvent", GET_EVENT_LUA);
        client = Clients.connect(server.port());
        Clients.adHoc(client, "CREATE TABLE events (id BIGINT NOT NULL, payload VARCHAR(64), PRIMARY KEY (id))");
        Clients.adHoc(client, "PARTITION TABLE events ON COLUMN id");
        Clients.adHoc(client, "CREATE PROCEDURE AddEvent PARTITION ON TABLE events COLUMN id PARAMETER 0"
                + " FROM FILE 'AddEvent.lua' SOURCE $lua$"
                + " local ins = sql [[INSERT INTO events (id, payload) VALUES (?, ?)]]"
                + " return function(id, payload) return ins:exec(id, payload) end"
                + " $lua$");
        Clients.adHoc(client, "CREATE PROCEDURE PARTITION ON TABLE events COLUMN id FROM CLASS com.example.procs.GetEvent");
        Clients.adHoc(client, "CREATE PROCEDURE CountEvents AS SELECT COUNT(*) FROM events");
        Clients.adHoc(client, "CREATE PROCEDURE SumArrays FROM FILE 'SumArrays.lua' SOURCE $lua$"
                + " return function(xs, names)"
                + "   local s = 0"
                + "   for _, x in ipairs(xs) do s = s + x end"
                + "   return s + 1000 * #names"
                + " end $lua$");
    }

    @AfterAll
    static void stop() {
        Clients.closeQuietly(client);
        server.close();
    }

    private static long countEvents() throws Exception {
        return client.callProcedure("CountEvents").getResults()[0].asScalarLong();
    }

    @Test
    void syncCallReturnsIntegerAsBigintTable() throws Exception {
        ClientResponse r = client.callProcedure("AddEvent", 1L, "first");
        assertEquals(ClientResponse.SUCCESS, r.getStatus());
        assertEquals(1, r.getResults().length);
        assertEquals(1L, r.getResults()[0].asScalarLong());
        assertEquals(ClientResponse.UNINITIALIZED_APP_STATUS_CODE, r.getAppStatus());
    }

    @Test
    void fromClassProcedureReturnsSeveralTablesAndAppStatus() throws Exception {
        assertEquals(1L, client.callProcedure("AddEvent", 5, "five").getResults()[0].asScalarLong());
        ClientResponse r = client.callProcedure("GetEvent", 5);
        assertEquals(ClientResponse.SUCCESS, r.getStatus());
        assertEquals((byte) 7, r.getAppStatus());
        assertEquals("found five", r.getAppStatusString());
        VoltTable[] t = r.getResults();
        assertEquals(2, t.length);
        assertEquals(1, t[0].getRowCount());
        t[0].advanceRow();
        assertEquals(5L, t[0].getLong("ID"));
        assertEquals("five", t[0].getString("PAYLOAD"));
        assertEquals(1L, t[1].asScalarLong());
    }

    @Test
    void userAbortIsStatusUserAbortWithTheMessage() throws Exception {
        ProcCallException e = assertThrows(ProcCallException.class, () -> client.callProcedure("GetEvent", 999));
        ClientResponse r = e.getClientResponse();
        assertEquals(ClientResponse.USER_ABORT, r.getStatus());
        assertTrue(r.getStatusString().contains("no event 999"), r.getStatusString());
    }

    @Test
    void unknownProcedureIsUnexpectedFailure() throws Exception {
        ProcCallException e = assertThrows(ProcCallException.class, () -> client.callProcedure("NoSuchProc", 1));
        ClientResponse r = e.getClientResponse();
        assertEquals(ClientResponse.UNEXPECTED_FAILURE, r.getStatus());
        assertTrue(r.getStatusString().contains("Procedure NoSuchProc was not found"), r.getStatusString());
    }

    @Test
    void arrayParametersReachLua() throws Exception {
        ClientResponse r = client.callProcedure("SumArrays", new long[] {1, 2, 3}, new String[] {"a", "b"});
        assertEquals(2006L, r.getResults()[0].asScalarLong());
        ClientResponse ints = client.callProcedure("SumArrays", new int[] {10, -4}, new String[] {});
        assertEquals(6L, ints.getResults()[0].asScalarLong());
    }

    @Test
    void twentyThousandAsyncCallsInFlight() throws Exception {
        long before = countEvents();
        AtomicInteger ok = new AtomicInteger();
        AtomicLong modified = new AtomicLong();
        Map<String, Integer> failures = new ConcurrentHashMap<>();
        ProcedureCallback cb = response -> {
            if (response.getStatus() == ClientResponse.SUCCESS) {
                ok.incrementAndGet();
                modified.addAndGet(response.getResults()[0].asScalarLong());
            } else {
                failures.merge(response.getStatus() + " " + response.getStatusString(), 1, Integer::sum);
            }
        };
        long start = System.nanoTime();
        for (int i = 0; i < ASYNC_CALLS; i++) {
            assertTrue(client.callProcedure(cb, "AddEvent", ASYNC_BASE_ID + i, "async " + i));
        }
        client.drain();
        double seconds = (System.nanoTime() - start) / 1e9;
        System.out.printf("lockstep compat: %d async AddEvent calls in %.2f s = %.0f calls/s%n",
                ASYNC_CALLS, seconds, ASYNC_CALLS / seconds);
        assertEquals(Map.of(), failures);
        assertEquals(ASYNC_CALLS, ok.get());
        assertEquals(ASYNC_CALLS, modified.get());
        assertEquals(before + ASYNC_CALLS, countEvents());
        VoltTable last = client.callProcedure("GetEvent", ASYNC_BASE_ID + ASYNC_CALLS - 1).getResults()[0];
        last.advanceRow();
        assertEquals("async " + (ASYNC_CALLS - 1), last.getString("PAYLOAD"));
    }
}
