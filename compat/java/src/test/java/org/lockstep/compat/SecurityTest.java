// Security with the real client: users written by `lockstep user add`, logins with the right
// and wrong passwords (SHA-256 and SHA-1 digests), calls refused for lack of a permission,
// and the same over TLS (the client's enableSSL() with a trust store), where a client
// without SSL fails cleanly.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.voltdb.client.Client;
import org.voltdb.client.ClientAuthScheme;
import org.voltdb.client.ClientConfig;
import org.voltdb.client.ClientFactory;
import org.voltdb.client.ClientResponse;
import org.voltdb.client.ClientStatusListenerExt;
import org.voltdb.client.ProcCallException;

class SecurityTest {
    /** How long a helper command (lockstep user add, openssl, keytool) may take. */
    private static final long COMMAND_TIMEOUT_SECONDS = 60;
    private static final String TRUST_PASSWORD = "changeit";

    private static Path dir;
    private static Path trustStore;
    private static LockstepServer plain;
    private static LockstepServer tls;

    @BeforeAll
    static void start() throws Exception {
        dir = Files.createTempDirectory("lockstep-compat-security-");
        Path config = dir.resolve("lockstep.toml");
        addUser(config, "admin", "administrator", "admin-pw");
        addUser(config, "reader", "reader", "reader-pw");
        Path cert = dir.resolve("cert.pem");
        Path key = dir.resolve("key.pem");
        run(List.of("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-days", "2", "-keyout", key.toString(), "-out", cert.toString(), "-subj", "/CN=localhost",
                "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                "-addext", "basicConstraints=critical,CA:FALSE"), null);
        trustStore = dir.resolve("trust.p12");
        run(List.of("keytool", "-importcert", "-noprompt", "-alias", "lockstep", "-file", cert.toString(),
                "-keystore", trustStore.toString(), "-storetype", "PKCS12", "-storepass", TRUST_PASSWORD), null);
        List<String> secured = List.of("--security", "on", "--config", config.toString());
        plain = LockstepServer.startWith("security", secured);
        tls = LockstepServer.startWith("security-tls", Stream.concat(secured.stream(),
                Stream.of("--tls-cert", cert.toString(), "--tls-key", key.toString())).toList());
        for (LockstepServer s : List.of(plain, tls)) {
            Client admin = connect(s, "admin", "admin-pw", ClientAuthScheme.HASH_SHA256, s == tls);
            Clients.adHoc(admin, "CREATE TABLE acct (id BIGINT NOT NULL, balance BIGINT, PRIMARY KEY (id))");
            Clients.adHoc(admin, "PARTITION TABLE acct ON COLUMN id");
            Clients.adHoc(admin, "CREATE ROLE reader WITH SQLREAD");
            Clients.adHoc(admin, "CREATE PROCEDURE Balance ALLOW reader PARTITION ON TABLE acct COLUMN id"
                    + " AS SELECT balance FROM acct WHERE id = ?");
            Clients.adHoc(admin, "CREATE PROCEDURE Credit PARTITION ON TABLE acct COLUMN id"
                    + " AS UPDATE acct SET balance = balance + ? WHERE id = ?");
            Clients.adHoc(admin, "INSERT INTO acct VALUES (1, 100)");
            Clients.closeQuietly(admin);
        }
    }

    @AfterAll
    static void stop() throws IOException {
        if (plain != null) {
            plain.close();
        }
        if (tls != null) {
            tls.close();
        }
        try (Stream<Path> walk = Files.walk(dir)) {
            walk.sorted(Comparator.reverseOrder()).map(Path::toFile).forEach(File::delete);
        }
    }

    /** Runs a command to completion; `stdin` (if any) is written to it first. */
    private static void run(List<String> command, String stdin) throws Exception {
        Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
        if (stdin != null) {
            try (OutputStream in = p.getOutputStream()) {
                in.write(stdin.getBytes(StandardCharsets.UTF_8));
            }
        }
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(COMMAND_TIMEOUT_SECONDS, TimeUnit.SECONDS), command.get(0) + " did not finish");
        assertEquals(0, p.exitValue(), command + ": " + out);
    }

    private static void addUser(Path config, String name, String roles, String password) throws Exception {
        run(List.of(LockstepServer.binary().toString(), "user", "add", name, "--roles", roles,
                "--password-stdin", "--config", config.toString()), password + "\n");
    }

    private static Client connect(LockstepServer s, String user, String password, ClientAuthScheme scheme,
            boolean ssl) throws Exception {
        ClientConfig config = new ClientConfig(user, password, (ClientStatusListenerExt) null, scheme);
        if (ssl) {
            config.setTrustStore(trustStore.toString(), TRUST_PASSWORD);
            config.enableSSL();
        }
        Client client = ClientFactory.createClient(config);
        try {
            client.createConnection("127.0.0.1", s.port());
        } catch (IOException e) {
            Clients.closeQuietly(client);
            throw e;
        }
        return client;
    }

    private static void assertRejected(LockstepServer s, String user, String password, boolean ssl) {
        IOException e = assertThrows(IOException.class,
                () -> connect(s, user, password, ClientAuthScheme.HASH_SHA256, ssl));
        assertTrue(String.valueOf(e.getMessage()).contains("Authentication rejected"), String.valueOf(e));
    }

    private static ClientResponse attempt(Client c, String proc, Object... args) throws Exception {
        try {
            return c.callProcedure(proc, args);
        } catch (ProcCallException e) {
            return e.getClientResponse();
        }
    }

    private static void assertRefused(ClientResponse r, String permission) {
        assertEquals(ClientResponse.UNEXPECTED_FAILURE, r.getStatus(), r.getStatusString());
        assertTrue(r.getStatusString().contains("User reader") && r.getStatusString().contains(permission),
                r.getStatusString());
    }

    @Test
    void rightPasswordsLogInWithSha256AndSha1() throws Exception {
        for (ClientAuthScheme scheme : List.of(ClientAuthScheme.HASH_SHA256, ClientAuthScheme.HASH_SHA1)) {
            Client c = connect(plain, "reader", "reader-pw", scheme, false);
            assertEquals(100L, Clients.scalar(c.callProcedure("Balance", 1L)));
            Clients.closeQuietly(c);
        }
    }

    @Test
    void wrongPasswordsAndUnknownUsersAreRejected() {
        assertRejected(plain, "reader", "wrong", false);
        assertRejected(plain, "nobody", "reader-pw", false);
        assertRejected(plain, "admin", "", false);
    }

    @Test
    void callsTheRoleDoesNotAllowAreRefused() throws Exception {
        Client c = connect(plain, "reader", "reader-pw", ClientAuthScheme.HASH_SHA256, false);
        try {
            assertEquals(1L, Clients.scalar(c.callProcedure("@AdHoc", "SELECT COUNT(*) FROM acct")));
            assertRefused(attempt(c, "@AdHoc", "UPDATE acct SET balance = 0"), "SQL permission");
            assertRefused(attempt(c, "@AdHoc", "CREATE TABLE x (a INTEGER)"), "ADMIN");
            assertRefused(attempt(c, "Credit", 5L, 1L), "ALLPROC");
            assertRefused(attempt(c, "ACCT.insert", 2L, 5L), "DEFAULTPROC");
            assertRefused(attempt(c, "@Pause"), "ADMIN");
            assertRefused(attempt(c, "@SnapshotSave"), "ADMIN");
            assertRefused(attempt(c, "@Shutdown"), "ADMIN");
            assertEquals(ClientResponse.SUCCESS, c.callProcedure("@Ping").getStatus());
            assertEquals(100L, Clients.scalar(c.callProcedure("@AdHoc", "SELECT balance FROM acct WHERE id = 1")));
        } finally {
            Clients.closeQuietly(c);
        }
    }

    @Test
    void tlsLogsInWithTheRightPasswordAndRefusesTheRest() throws Exception {
        Client admin = connect(tls, "admin", "admin-pw", ClientAuthScheme.HASH_SHA256, true);
        Client reader = connect(tls, "reader", "reader-pw", ClientAuthScheme.HASH_SHA1, true);
        try {
            assertEquals(1L, Clients.scalar(admin.callProcedure("Credit", 5L, 1L)));
            for (long id = 10; id < 300; id++) {
                admin.callProcedure("ACCT.insert", id, id);
            }
            ClientResponse all = admin.callProcedure("@AdHoc", "SELECT id, balance FROM acct ORDER BY id");
            assertEquals(291, all.getResults()[0].getRowCount());
            assertEquals(105L, Clients.scalar(reader.callProcedure("Balance", 1L)));
            assertRefused(attempt(reader, "Credit", 5L, 1L), "ALLPROC");
            assertRefused(attempt(reader, "@Shutdown"), "ADMIN");
        } finally {
            Clients.closeQuietly(admin);
            Clients.closeQuietly(reader);
        }
        assertRejected(tls, "reader", "wrong", true);
        // A client without SSL cannot log in to the TLS port, and the server goes on.
        assertThrows(IOException.class, () -> connect(tls, "admin", "admin-pw", ClientAuthScheme.HASH_SHA256, false));
        Client again = connect(tls, "reader", "reader-pw", ClientAuthScheme.HASH_SHA256, true);
        assertEquals(ClientResponse.SUCCESS, again.callProcedure("@Ping").getStatus());
        Clients.closeQuietly(again);
    }
}
