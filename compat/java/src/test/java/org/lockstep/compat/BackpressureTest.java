// Backpressure and lost connections: a client that floods the server is slowed (the server stops
// reading its socket while its in-flight window is full) and sees no errors, the server's memory
// stays bounded; killing the server mid-flood fails outstanding calls with CONNECTION_LOST.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.InterruptedIOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.junit.jupiter.api.Test;
import org.voltdb.VoltTable;
import org.voltdb.client.Client;
import org.voltdb.client.ClientConfig;
import org.voltdb.client.ClientFactory;
import org.voltdb.client.ClientResponse;

class BackpressureTest {
    /** Calls in the flood; -Dlockstep.flood=N makes it a longer throughput measurement. */
    private static final int FLOOD_CALLS = Integer.getInteger("lockstep.flood", 200_000);
    private static final int LOST_FLOOD_CALLS = 100_000;
    /** Growth of the server's resident memory the flood may cause: with a 5000-call window it
     *  needs a few MiB; holding all 200 000 requests and answers would take far more. */
    private static final long RSS_GROWTH_MAX_KB = 48 * 1024;
    /** The server's default in-flight window per connection (ServerConfig). */
    private static final long SERVER_WINDOW_CALLS = 5000;
    /** The VoltDB client's network log (java.util.logging, "NETWORK"), which prints a stack
     *  trace and a SEVERE line when a server is killed under it, as the kill test does on
     *  purpose. Held here because java.util.logging keeps loggers only weakly. */
    private static final Logger CLIENT_NETWORK_LOG = Logger.getLogger("NETWORK");

    private static Client flooder(int port) throws Exception {
        ClientConfig config = new ClientConfig("compat", "secret");
        config.setMaxOutstandingTxns(FLOOD_CALLS);
        Client c = ClientFactory.createClient(config);
        c.createConnection("127.0.0.1", port);
        return c;
    }

    private static void schema(Client c) throws Exception {
        Clients.adHoc(c, "CREATE TABLE bp (k BIGINT NOT NULL, v VARCHAR(16), PRIMARY KEY (k))");
        Clients.adHoc(c, "PARTITION TABLE bp ON COLUMN k");
        Clients.adHoc(c, "CREATE PROCEDURE BpGet PARTITION ON TABLE bp COLUMN k AS SELECT v FROM bp WHERE k = ?");
    }

    @Test
    void floodIsSlowedWithoutErrorsAndMemoryStaysBounded() throws Exception {
        try (LockstepServer server = LockstepServer.start("flood")) {
            Client c = flooder(server.port());
            try {
                schema(c);
                assertEquals(1L, Clients.scalar(c.callProcedure("BP.insert", 7L, "seven")));
                long rssBefore = server.rssKb();
                AtomicLong peakRss = new AtomicLong(rssBefore);
                AtomicLong peakInFlight = new AtomicLong();
                AtomicLong samples = new AtomicLong();
                // A second connection watches the flooder's window with @Statistics LIVECLIENTS.
                Client watcher = Clients.connect(server.port(), false);
                Thread sampler = new Thread(() -> {
                    while (!Thread.currentThread().isInterrupted()) {
                        try {
                            peakRss.accumulateAndGet(server.rssKb(), Math::max);
                            VoltTable live = watcher.callProcedure("@Statistics", "LIVECLIENTS", 0).getResults()[0];
                            while (live.advanceRow()) {
                                peakInFlight.accumulateAndGet(live.getLong("OUTSTANDING_TRANSACTIONS"), Math::max);
                            }
                            samples.incrementAndGet();
                            Thread.sleep(2);
                        } catch (InterruptedException | InterruptedIOException e) {
                            // The flood is over: interrupted while sleeping, or while waiting
                            // for an answer (the client turns that into an IOException).
                            return;
                        } catch (Exception e) {
                            throw new RuntimeException(e);
                        }
                    }
                }, "window-sampler");
                sampler.setDaemon(true);
                sampler.start();
                Map<Byte, AtomicLong> statuses = new ConcurrentHashMap<>();
                AtomicLong rows = new AtomicLong();
                long t0 = System.nanoTime();
                for (int i = 0; i < FLOOD_CALLS; i++) {
                    assertTrue(c.callProcedure(r -> {
                        statuses.computeIfAbsent(r.getStatus(), s -> new AtomicLong()).incrementAndGet();
                        rows.addAndGet(r.getResults().length == 1 ? r.getResults()[0].getRowCount() : 0);
                    }, "BpGet", (long) (i % 2 == 0 ? 7 : -1 - i)));
                }
                c.drain();
                long elapsedNs = System.nanoTime() - t0;
                sampler.interrupt();
                sampler.join();
                Clients.closeQuietly(watcher);
                assertEquals(1, statuses.size(), "only SUCCESS: " + statuses);
                assertEquals(FLOOD_CALLS, statuses.get(ClientResponse.SUCCESS).get());
                assertEquals(FLOOD_CALLS / 2, rows.get());
                long growth = peakRss.get() - rssBefore;
                System.out.printf("flood: %d async calls in %.2f s = %.0f calls/s; server RSS %d KiB before, peak %d KiB%n",
                        FLOOD_CALLS, elapsedNs / 1e9, FLOOD_CALLS / (elapsedNs / 1e9), rssBefore, peakRss.get());
                assertTrue(growth < RSS_GROWTH_MAX_KB, "server RSS grew by " + growth + " KiB during the flood");
                System.out.printf("flood: %d samples, largest in-flight window seen %d calls%n", samples.get(), peakInFlight.get());
                assertTrue(samples.get() > 0);
                // The server never holds more than its window: beyond it, it stops reading.
                assertTrue(peakInFlight.get() > 0 && peakInFlight.get() <= SERVER_WINDOW_CALLS, "peak in flight " + peakInFlight.get());
            } finally {
                Clients.closeQuietly(c);
            }
        }
    }

    @Test
    void killingTheServerFailsOutstandingCallsWithConnectionLost() throws Exception {
        try (LockstepServer server = LockstepServer.start("lost")) {
            Client c = flooder(server.port());
            try {
                schema(c);
                Map<Byte, AtomicLong> statuses = new ConcurrentHashMap<>();
                AtomicLong answered = new AtomicLong();
                // Queue far more than the server answers in the time it takes to see 1000 answers.
                long sent = 0;
                for (int i = 0; i < LOST_FLOOD_CALLS; i++) {
                    assertTrue(c.callProcedure(r -> {
                        statuses.computeIfAbsent(r.getStatus(), s -> new AtomicLong()).incrementAndGet();
                        answered.incrementAndGet();
                    }, "BpGet", (long) i));
                    sent++;
                }
                while (answered.get() < 1000) {
                    Thread.sleep(1);
                }
                // The connection reset the kill causes is what this test expects: the client
                // logs it, and prints its stack trace on System.err. Both are kept out of the
                // test output, and what was printed is shown if an assertion fails.
                Level logLevel = CLIENT_NETWORK_LOG.getLevel();
                CLIENT_NETWORK_LOG.setLevel(Level.OFF);
                PrintStream stderr = System.err;
                ByteArrayOutputStream clientStderr = new ByteArrayOutputStream();
                System.setErr(new PrintStream(clientStderr, true, StandardCharsets.UTF_8));
                try {
                    server.kill();
                    c.drain();
                    // With no connection left drain returns at once; the client fails the
                    // outstanding calls on its own thread.
                    long deadline = System.currentTimeMillis() + 30_000;
                    while (answered.get() < sent && System.currentTimeMillis() < deadline) {
                        Thread.sleep(10);
                    }
                } finally {
                    System.setErr(stderr);
                    CLIENT_NETWORK_LOG.setLevel(logLevel);
                }
                String printed = "; the client printed:\n" + clientStderr.toString(StandardCharsets.UTF_8);
                long lost = statuses.getOrDefault(ClientResponse.CONNECTION_LOST, new AtomicLong()).get();
                long ok = statuses.getOrDefault(ClientResponse.SUCCESS, new AtomicLong()).get();
                assertEquals(sent, ok + lost, "every queued call is answered once: " + statuses + printed);
                assertTrue(ok >= 1000, "answers before the kill: " + statuses + printed);
                assertTrue(lost > 0, "calls outstanding at the kill fail with CONNECTION_LOST: " + statuses + printed);
            } finally {
                Clients.closeQuietly(c);
            }
        }
    }
}
