// Starts and stops a real `lockstep server` process for one test class.
package org.lockstep.compat;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * One Lockstep server process on a private data directory. The port is chosen by the
 * server (`--listen 127.0.0.1:0`) and read from its `lockstep ready` line; a restart reuses
 * the same port and data directory.
 */
public final class LockstepServer implements AutoCloseable {
    /** How long a server may take to print its ready line. */
    private static final long START_TIMEOUT_SECONDS = 60;
    /** How long SIGTERM may take to stop the server before it is killed. */
    private static final long STOP_TIMEOUT_SECONDS = 20;
    private static final Pattern READY =
            Pattern.compile("lockstep ready: .*listening on ([0-9.]+):([0-9]+)");

    private static final Pattern PG = Pattern.compile("PostgreSQL clients on (\\S+)");

    public static final int SITES = 2;

    private final Path dataDir;
    private final Path logFile;
    /** Flags added to every start of this server (security, TLS, a config file). */
    private final List<String> extraArgs = new ArrayList<>();
    private Process process;
    private int port;
    /** Lines the current process printed on stdout. */
    private final List<String> stdout = new ArrayList<>();

    private LockstepServer(Path dataDir) {
        this.dataDir = dataDir;
        this.logFile = dataDir.resolveSibling(dataDir.getFileName() + ".log");
    }

    /** Path of the lockstep binary: system property `lockstep.bin`. */
    public static Path binary() {
        String prop = System.getProperty("lockstep.bin", "../../target/debug/lockstep");
        Path bin = Path.of(prop).toAbsolutePath().normalize();
        if (!Files.isExecutable(bin)) {
            throw new IllegalStateException("lockstep binary not found or not executable at " + bin
                    + " (build it with `cargo build -p lockstep-cli`, or pass -Dlockstep.bin=PATH)");
        }
        return bin;
    }

    /** Starts a server with a fresh data directory; `procedures` are written first as NAME.lua files. */
    public static LockstepServer start(String name, String... procedures) throws IOException {
        Path root = Files.createTempDirectory("lockstep-compat-" + name + "-");
        Path data = root.resolve("data");
        Path procs = data.resolve("procedures");
        Files.createDirectories(procs);
        for (int i = 0; i + 1 < procedures.length; i += 2) {
            Files.writeString(procs.resolve(procedures[i] + ".lua"), procedures[i + 1]);
        }
        LockstepServer server = new LockstepServer(data);
        server.launch("127.0.0.1:0");
        return server;
    }

    /** Starts a server with a fresh data directory and these extra flags. */
    public static LockstepServer startWith(String name, List<String> args) throws IOException {
        Path data = Files.createTempDirectory("lockstep-compat-" + name + "-").resolve("data");
        Files.createDirectories(data.resolve("procedures"));
        LockstepServer server = new LockstepServer(data);
        server.extraArgs.addAll(args);
        server.launch("127.0.0.1:0");
        return server;
    }

    /**
     * Starts the nodes of a local cluster (fresh data directories, free ports) and waits until
     * every one is ready: they are started together, since none is ready before a majority runs.
     */
    public static List<LockstepServer> startCluster(String name, int nodes, int kfactor) throws IOException {
        List<Integer> internal = new ArrayList<>();
        List<Integer> client = new ArrayList<>();
        for (int i = 0; i < nodes; i++) {
            internal.add(freePort());
            client.add(freePort());
        }
        String hosts = String.join(",", internal.stream().map(p -> "127.0.0.1:" + p).toList());
        List<LockstepServer> servers = new ArrayList<>();
        List<CompletableFuture<Integer>> ready = new ArrayList<>();
        for (int i = 0; i < nodes; i++) {
            Path data = Files.createTempDirectory("lockstep-compat-" + name + "-" + i + "-").resolve("data");
            Files.createDirectories(data.resolve("procedures"));
            LockstepServer server = new LockstepServer(data);
            server.extraArgs.addAll(List.of("--internal", "127.0.0.1:" + internal.get(i), "--hosts", hosts,
                    "--kfactor", Integer.toString(kfactor)));
            ready.add(server.spawn("127.0.0.1:" + client.get(i)));
            servers.add(server);
        }
        for (int i = 0; i < nodes; i++) {
            servers.get(i).awaitReady(ready.get(i));
        }
        return servers;
    }

    private static int freePort() throws IOException {
        try (java.net.ServerSocket s = new java.net.ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    public int port() {
        return port;
    }

    public Path dataDir() {
        return dataDir;
    }

    /** Stops the server with SIGTERM and starts it again on the same port and data directory. */
    public void restart() throws IOException {
        stop();
        launch("127.0.0.1:" + port);
    }

    /** Starts a killed or stopped server again, on the same port and data directory. */
    public void startAgain() throws IOException {
        launch("127.0.0.1:" + port);
    }

    private void launch(String listen) throws IOException {
        awaitReady(spawn(listen));
    }

    /** Starts the process; the future completes with its client port once it is ready. */
    private CompletableFuture<Integer> spawn(String listen) throws IOException {
        List<String> command = new ArrayList<>(List.of(binary().toString(), "server", "--listen", listen,
                "--data", dataDir.toString(), "--sites", Integer.toString(SITES)));
        command.addAll(extraArgs);
        // The PostgreSQL port stays closed unless a test asks for it.
        if (!extraArgs.contains("--pg")) {
            command.addAll(List.of("--pg", "off"));
        }
        // Tests run servers side by side: none takes the HTTP port unless a test asks for it.
        if (!extraArgs.contains("--http")) {
            command.addAll(List.of("--http", "off"));
        }
        ProcessBuilder pb = new ProcessBuilder(command);
        pb.redirectError(ProcessBuilder.Redirect.appendTo(logFile.toFile()));
        process = pb.start();
        BufferedReader out = new BufferedReader(
                new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8));
        CompletableFuture<Integer> ready = new CompletableFuture<>();
        List<String> seen = stdout;
        synchronized (seen) {
            seen.clear();
        }
        Thread reader = new Thread(() -> {
            try {
                String line;
                while ((line = out.readLine()) != null) {
                    synchronized (seen) {
                        seen.add(line);
                    }
                    Matcher m = READY.matcher(line);
                    if (m.find()) {
                        ready.complete(Integer.parseInt(m.group(2)));
                    }
                }
            } catch (IOException e) {
                // The process ended; the ready wait below reports it.
            }
            ready.completeExceptionally(new IOException("lockstep exited before its ready line"));
        }, "lockstep-stdout");
        reader.setDaemon(true);
        reader.start();
        return ready;
    }

    private void awaitReady(CompletableFuture<Integer> ready) throws IOException {
        List<String> seen = stdout;
        try {
            port = ready.get(START_TIMEOUT_SECONDS, TimeUnit.SECONDS);
        } catch (Exception e) {
            process.destroyForcibly();
            String log = Files.exists(logFile) ? Files.readString(logFile) : "";
            throw new IOException("lockstep server did not start (" + e + "); stdout: " + seen
                    + "; stderr: " + log, e);
        }
    }

    /** Process id of the running server. */
    public long pid() {
        return process.pid();
    }

    /** Resident set size of the server process in KiB, from /proc. */
    public long rssKb() throws IOException {
        for (String line : Files.readAllLines(Path.of("/proc/" + pid() + "/status"))) {
            if (line.startsWith("VmRSS:")) {
                return Long.parseLong(line.replaceAll("[^0-9]", ""));
            }
        }
        throw new IOException("no VmRSS line for process " + pid());
    }

    /** Waits for the server to exit on its own; returns its exit code. */
    public int awaitExit(long seconds) throws Exception {
        if (!process.waitFor(seconds, TimeUnit.SECONDS)) {
            throw new IllegalStateException("lockstep did not exit within " + seconds + " s");
        }
        int code = process.exitValue();
        process = null;
        return code;
    }

    /** Kills the server at once (SIGKILL), as a crash would. */
    public void kill() throws InterruptedException {
        process.destroyForcibly().waitFor(STOP_TIMEOUT_SECONDS, TimeUnit.SECONDS);
        process = null;
    }

    /** The `host:port` of the PostgreSQL port, as the server printed it (started with `--pg`). */
    public String pgAddress() {
        for (String line : stdoutLines()) {
            Matcher m = PG.matcher(line);
            if (m.find()) {
                return m.group(1);
            }
        }
        throw new IllegalStateException("the server printed no PostgreSQL address: start it with --pg HOST:PORT");
    }

    /** What the server printed on stdout so far. */
    public List<String> stdoutLines() {
        synchronized (stdout) {
            return new ArrayList<>(stdout);
        }
    }

    /** Sends SIGTERM and waits for the process to exit. */
    public void stop() {
        if (process == null) {
            return;
        }
        process.destroy();
        try {
            if (!process.waitFor(STOP_TIMEOUT_SECONDS, TimeUnit.SECONDS)) {
                process.destroyForcibly().waitFor(STOP_TIMEOUT_SECONDS, TimeUnit.SECONDS);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        process = null;
    }

    @Override
    public void close() {
        stop();
        // Keep the directory when asked to, so a failing run can be inspected.
        if (Boolean.getBoolean("lockstep.keep")) {
            return;
        }
        try (Stream<Path> walk = Files.walk(dataDir.getParent())) {
            walk.sorted(Comparator.reverseOrder()).map(Path::toFile).forEach(File::delete);
        } catch (IOException e) {
            // A leftover temporary directory is harmless.
        }
    }
}
