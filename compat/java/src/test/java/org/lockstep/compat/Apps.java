// The repository's apps (apps/NAME): their Lua procedures and DDL, for the kit call-sequence tests.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.jar.JarEntry;
import java.util.jar.JarOutputStream;
import java.util.stream.Stream;
import org.voltdb.client.Client;
import org.voltdb.client.ClientResponse;

public final class Apps {
    private Apps() {}

    /** apps/NAME of this repository (tests run in compat/java). */
    public static Path dir(String app) {
        return Path.of("../../apps", app).toAbsolutePath().normalize();
    }

    /** NAME, source pairs of apps/APP/procedures/NAME.lua, for LockstepServer.start. */
    public static String[] procedures(String app) throws IOException {
        List<String> out = new ArrayList<>();
        try (Stream<Path> files = Files.list(dir(app).resolve("procedures"))) {
            for (Path p : files.filter(f -> f.toString().endsWith(".lua")).sorted().toList()) {
                String name = p.getFileName().toString();
                out.add(name.substring(0, name.length() - ".lua".length()));
                out.add(Files.readString(p));
            }
        }
        return out.toArray(new String[0]);
    }

    /**
     * Runs apps/APP/ddl.sql statement by statement through @AdHoc. The server finds the Lua
     * files in its procedure directory, so `FROM FILE 'procedures/X.lua'` becomes
     * `FROM CLASS app.X`, which binds the same X.lua.
     */
    public static void loadDdl(Client client, String app) throws Exception {
        StringBuilder text = new StringBuilder();
        for (String line : Files.readAllLines(dir(app).resolve("ddl.sql"))) {
            if (!line.trim().startsWith("--")) {
                text.append(line).append('\n');
            }
        }
        for (String stmt : text.toString().split(";")) {
            String sql = stmt.trim().replaceAll("FROM FILE 'procedures/([A-Za-z0-9_]+)\\.lua'", "FROM CLASS " + app + ".$1");
            if (!sql.isEmpty()) {
                ClientResponse r = client.callProcedure("@AdHoc", sql);
                assertEquals(ClientResponse.SUCCESS, r.getStatus(), sql);
            }
        }
    }

    /** A jar like the kits build for @UpdateClasses: a manifest and one entry per class path. */
    public static byte[] jar(String... classPaths) throws IOException {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try (JarOutputStream jar = new JarOutputStream(bytes, new java.util.jar.Manifest())) {
            for (String path : classPaths) {
                jar.putNextEntry(new JarEntry(path));
                // Not a real class: the server reads the jar's directory, never the classes.
                jar.write(new byte[] {(byte) 0xCA, (byte) 0xFE, (byte) 0xBA, (byte) 0xBE});
                jar.closeEntry();
            }
        }
        return bytes.toByteArray();
    }
}
