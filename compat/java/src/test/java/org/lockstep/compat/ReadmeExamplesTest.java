// The README's Java examples (VoterClient and VoterJdbc, in the default package of the test
// sources; the README shows them verbatim, crates/cli/tests/docs.rs checks that) run
// against a server with apps/voter loaded and print what the README says they print.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.voltdb.client.Client;

class ReadmeExamplesTest {
    private static final String CONTESTANTS =
            "Edwina Burnam,Tabatha Gehling,Kelly Clauss,Jessie Alloway,Alana Bregman,Jessie Eichman";

    /** Runs CLASS.main(args) (a class of the default package) and returns what it printed. */
    private static List<String> runMain(String className, String... args) throws Exception {
        Method main = Class.forName(className).getMethod("main", String[].class);
        PrintStream saved = System.out;
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try (PrintStream capture = new PrintStream(bytes, true, StandardCharsets.UTF_8)) {
            System.setOut(capture);
            main.invoke(null, (Object) args);
        } finally {
            System.setOut(saved);
        }
        List<String> lines = bytes.toString(StandardCharsets.UTF_8).lines().toList();
        lines.forEach(saved::println);
        return lines;
    }

    @Test
    void readmeJavaExamplesVoteAndPrint() throws Exception {
        try (LockstepServer server = LockstepServer.start("readme", Apps.procedures("voter"))) {
            Client c = Clients.connect(server.port());
            try {
                Apps.loadDdl(c, "voter");
                c.callProcedure("Initialize", 6, CONTESTANTS);
            } finally {
                Clients.closeQuietly(c);
            }
            String address = "127.0.0.1:" + server.port();
            // Contestant 3 is Kelly Clauss: the only vote so far.
            assertEquals(List.of("Vote returned 0", "Kelly Clauss has 1 votes"), runMain("VoterClient", address));
            List<String> jdbc = runMain("VoterJdbc", address);
            assertEquals(List.of("Vote returned 0", "2 votes so far"), jdbc);
            // A second run: each phone has 2 votes, so both examples still count theirs.
            assertTrue(runMain("VoterClient", address).contains("Vote returned 0"));
        }
    }
}
