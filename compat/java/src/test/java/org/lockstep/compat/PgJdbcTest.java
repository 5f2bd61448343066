// PostgreSQL's JDBC driver (org.postgresql:postgresql) against Lockstep's PostgreSQL port:
// prepared statements, every Lockstep type in binary and in text, NULLs, an error's SQLSTATE,
// CALL of a procedure and the transaction rules of docs/guide/postgres.md.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigDecimal;
import java.sql.CallableStatement;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Types;
import java.time.LocalDateTime;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

class PgJdbcTest {
    private static LockstepServer server;

    private static final String COLUMNS = "id, ti, si, i, bi, f, d, v, b, ts";
    private static final String INSERT = "INSERT INTO t (" + COLUMNS + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
    private static final String SELECT = "SELECT " + COLUMNS + " FROM t WHERE id = ?";
    // Each integer type's lowest value is VoltDB's NULL: the lowest storable is one above.
    private static final short TI = -127;
    private static final short SI = 32767;
    private static final int I = -2147483647;
    private static final long BI = -9223372036854775807L;
    private static final double F = -0.25;
    private static final BigDecimal D = new BigDecimal("-12345678901234567890123456.123456789012");
    private static final String V = "héllo, it's";
    private static final byte[] B = {0, (byte) 0xff, 0x10, 0x5c};
    private static final LocalDateTime TS = LocalDateTime.of(2024, 2, 29, 23, 59, 58, 123_456_000);

    /** How each connection moves values: binary (every statement prepared on the server) or text. */
    private enum Transfer {
        BINARY("prepareThreshold=-1&binaryTransfer=true"),
        TEXT("binaryTransfer=false");

        final String options;

        Transfer(String options) {
            this.options = options;
        }
    }

    @BeforeAll
    static void start() throws Exception {
        server = LockstepServer.startWith("pgjdbc", List.of("--pg", "127.0.0.1:0"));
        try (Connection c = connect(Transfer.TEXT); Statement s = c.createStatement()) {
            s.execute("CREATE TABLE t (id INTEGER NOT NULL PRIMARY KEY, ti TINYINT, si SMALLINT, i INTEGER,"
                    + " bi BIGINT, f FLOAT, d DECIMAL, v VARCHAR(40), b VARBINARY(16), ts TIMESTAMP)");
            s.execute("PARTITION TABLE t ON COLUMN id");
            s.execute("CREATE PROCEDURE NameOf PARTITION ON TABLE t COLUMN id AS SELECT v FROM t WHERE id = ?");
        }
    }

    @AfterAll
    static void stop() {
        if (server != null) {
            server.close();
        }
    }

    private static Connection connect(Transfer transfer) throws SQLException {
        Properties p = new Properties();
        p.setProperty("user", "tester");
        p.setProperty("connectTimeout", "10");
        return DriverManager.getConnection("jdbc:postgresql://" + server.pgAddress() + "/lockstep?" + transfer.options, p);
    }

    private static void insertSample(Connection c, int id) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(INSERT)) {
            ps.setInt(1, id);
            ps.setShort(2, TI);
            ps.setShort(3, SI);
            ps.setInt(4, I);
            ps.setLong(5, BI);
            ps.setDouble(6, F);
            ps.setBigDecimal(7, D);
            ps.setString(8, V);
            ps.setBytes(9, B);
            ps.setObject(10, TS);
            assertEquals(1, ps.executeUpdate());
        }
    }

    private static void assertSample(Connection c, int id, String what) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(SELECT)) {
            ps.setInt(1, id);
            try (ResultSet rs = ps.executeQuery()) {
                assertTrue(rs.next(), what);
                assertEquals(id, rs.getInt(1), what);
                assertEquals(TI, rs.getShort(2), what);
                assertEquals(SI, rs.getShort(3), what);
                assertEquals(I, rs.getInt(4), what);
                assertEquals(BI, rs.getLong(5), what);
                assertEquals(F, rs.getDouble(6), what);
                assertEquals(D.setScale(12), rs.getBigDecimal(7), what);
                assertEquals(V, rs.getString(8), what);
                assertArrayEquals(B, rs.getBytes(9), what);
                assertEquals(TS, rs.getObject(10, LocalDateTime.class), what);
                assertFalse(rs.next(), what);
            }
        }
    }

    @Test
    void everyTypeRoundTripsInBinaryAndInText() throws Exception {
        int id = 1;
        for (Transfer write : Transfer.values()) {
            try (Connection w = connect(write)) {
                insertSample(w, id);
            }
            for (Transfer read : Transfer.values()) {
                try (Connection r = connect(read)) {
                    // Several runs: the driver switches to a server-side statement after a few.
                    for (int run = 0; run < 6; run++) {
                        assertSample(r, id, "written in " + write + ", read in " + read + ", run " + run);
                    }
                }
            }
            id++;
        }
        try (Connection c = connect(Transfer.BINARY); Statement s = c.createStatement();
                ResultSet rs = s.executeQuery("SELECT " + COLUMNS + " FROM t WHERE id = 1")) {
            ResultSetMetaData md = rs.getMetaData();
            List<String> types = new ArrayList<>();
            for (int i = 1; i <= md.getColumnCount(); i++) {
                types.add(md.getColumnTypeName(i));
            }
            assertEquals(List.of("int4", "int2", "int2", "int4", "int8", "float8", "numeric", "varchar", "bytea", "timestamp"),
                    types);
            assertEquals(Types.BIGINT, md.getColumnType(5));
        }
    }

    @Test
    void nullsRoundTripInBothFormats() throws Exception {
        int id = 10;
        int[] sqlTypes = {Types.SMALLINT, Types.SMALLINT, Types.INTEGER, Types.BIGINT, Types.DOUBLE, Types.NUMERIC,
            Types.VARCHAR, Types.BINARY, Types.TIMESTAMP};
        for (Transfer transfer : Transfer.values()) {
            try (Connection c = connect(transfer)) {
                try (PreparedStatement ps = c.prepareStatement(INSERT)) {
                    ps.setInt(1, id);
                    for (int i = 0; i < sqlTypes.length; i++) {
                        ps.setNull(i + 2, sqlTypes[i]);
                    }
                    assertEquals(1, ps.executeUpdate());
                }
                try (PreparedStatement ps = c.prepareStatement(SELECT)) {
                    ps.setInt(1, id);
                    try (ResultSet rs = ps.executeQuery()) {
                        assertTrue(rs.next());
                        for (int col = 2; col <= 10; col++) {
                            assertNull(rs.getObject(col), transfer + " column " + col);
                        }
                        assertEquals(0, rs.getLong(5));
                        assertTrue(rs.wasNull());
                    }
                }
            }
            id++;
        }
    }

    @Test
    void aPreparedStatementRunsManyTimesAndInABatch() throws Exception {
        try (Connection c = connect(Transfer.BINARY)) {
            try (PreparedStatement ps = c.prepareStatement("INSERT INTO t (id, v) VALUES (?, ?)")) {
                for (int n = 100; n < 110; n++) {
                    ps.setInt(1, n);
                    ps.setString(2, "n" + n);
                    assertEquals(1, ps.executeUpdate());
                }
                for (int n = 110; n < 115; n++) {
                    ps.setInt(1, n);
                    ps.setString(2, "n" + n);
                    ps.addBatch();
                }
                int[] counts = ps.executeBatch();
                assertEquals(5, counts.length);
                for (int n : counts) {
                    assertEquals(1, n);
                }
            }
            try (PreparedStatement ps = c.prepareStatement("SELECT COUNT(*), MIN(v), MAX(v) FROM t WHERE id >= ? AND id < ?")) {
                ps.setInt(1, 100);
                ps.setInt(2, 115);
                try (ResultSet rs = ps.executeQuery()) {
                    assertTrue(rs.next());
                    assertEquals(15, rs.getLong(1));
                    assertEquals("n100", rs.getString(2));
                    assertEquals("n114", rs.getString(3));
                }
            }
        }
    }

    @Test
    void errorsCarryTheirSqlState() throws Exception {
        try (Connection c = connect(Transfer.TEXT); Statement s = c.createStatement()) {
            s.executeUpdate("INSERT INTO t (id) VALUES (300)");
            assertEquals("23505", assertThrows(SQLException.class, () -> s.executeUpdate("INSERT INTO t (id) VALUES (300)")).getSQLState());
            assertEquals("42P01", assertThrows(SQLException.class, () -> s.executeQuery("SELECT * FROM no_such_table")).getSQLState());
            assertEquals("42601", assertThrows(SQLException.class, () -> s.execute("SELEKT 1")).getSQLState());
            try (ResultSet rs = s.executeQuery("SELECT COUNT(*) FROM t WHERE id = 300")) {
                assertTrue(rs.next());
                assertEquals(1, rs.getLong(1), "the connection goes on after errors");
            }
        }
    }

    @Test
    void callRunsAProcedureWithItsRows() throws Exception {
        for (Transfer transfer : Transfer.values()) {
            try (Connection c = connect(transfer)) {
                int id = transfer == Transfer.BINARY ? 400 : 401;
                try (PreparedStatement ps = c.prepareStatement("CALL T.insert(?, NULL, NULL, NULL, NULL, NULL, NULL, ?, NULL, NULL)")) {
                    ps.setInt(1, id);
                    ps.setString(2, "called " + id);
                    ps.execute();
                }
                for (String sql : List.of("CALL NameOf(?)", "SELECT * FROM NameOf(?)")) {
                    try (PreparedStatement ps = c.prepareStatement(sql)) {
                        ps.setInt(1, id);
                        try (ResultSet rs = ps.executeQuery()) {
                            assertTrue(rs.next(), sql);
                            assertEquals("called " + id, rs.getString(1), sql);
                            assertFalse(rs.next(), sql);
                        }
                    }
                }
                // JDBC's escape syntax: the driver sends `select * from NameOf($1) as result`.
                try (CallableStatement cs = c.prepareCall("{call NameOf(?)}")) {
                    cs.setInt(1, id);
                    try (ResultSet rs = cs.executeQuery()) {
                        assertTrue(rs.next());
                        assertEquals("called " + id, rs.getString(1));
                    }
                }
                SQLException e = assertThrows(SQLException.class, () -> c.createStatement().execute("CALL NoSuchProcedure(1)"));
                assertEquals("42883", e.getSQLState());
            }
        }
    }

    @Test
    void aTransactionCommitsOneChangeAndRefusesASecond() throws Exception {
        try (Connection c = connect(Transfer.BINARY)) {
            c.setAutoCommit(false);
            try (Statement s = c.createStatement()) {
                s.executeUpdate("INSERT INTO t (id, v) VALUES (500, 'committed')");
                s.executeQuery("SELECT COUNT(*) FROM t").close();
                c.commit();
                s.executeUpdate("INSERT INTO t (id) VALUES (501)");
                SQLException second = assertThrows(SQLException.class, () -> s.executeUpdate("INSERT INTO t (id) VALUES (502)"));
                assertEquals("0A000", second.getSQLState());
                assertTrue(second.getMessage().contains("one statement"), second.getMessage());
                SQLException after = assertThrows(SQLException.class, () -> s.executeQuery("SELECT 1 FROM t"));
                assertEquals("25P02", after.getSQLState());
                c.rollback();
            }
            c.setAutoCommit(true);
            try (Statement s = c.createStatement();
                    ResultSet rs = s.executeQuery("SELECT id FROM t WHERE id >= 500 AND id < 600 ORDER BY id")) {
                List<Integer> ids = new ArrayList<>();
                while (rs.next()) {
                    ids.add(rs.getInt(1));
                }
                // 501 committed when it ran (BEGIN's NOTICE says so); 502 never ran.
                assertEquals(List.of(500, 501), ids);
            }
        }
    }
}
