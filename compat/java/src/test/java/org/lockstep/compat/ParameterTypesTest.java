// Every VoltDB column type round-trips exactly through the default T.insert / T.select.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigDecimal;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.voltdb.VoltTable;
import org.voltdb.VoltType;
import org.voltdb.client.Client;
import org.voltdb.client.ClientResponse;
import org.voltdb.types.TimestampType;

class ParameterTypesTest {
    private static LockstepServer server;
    private static Client client;

    @BeforeAll
    static void start() throws Exception {
        server = LockstepServer.start("types");
        client = Clients.connect(server.port());
        Clients.adHoc(client, "CREATE TABLE all_types (id INTEGER NOT NULL, t TINYINT, s SMALLINT, i INTEGER,"
                + " b BIGINT, f FLOAT, d DECIMAL, v VARCHAR(64), vb VARBINARY(64), ts TIMESTAMP, PRIMARY KEY (id))");
        Clients.adHoc(client, "PARTITION TABLE all_types ON COLUMN id");
    }

    @AfterAll
    static void stop() {
        Clients.closeQuietly(client);
        server.close();
    }

    private static VoltTable select(int id) throws Exception {
        ClientResponse r = client.callProcedure("ALL_TYPES.select", id);
        assertEquals(ClientResponse.SUCCESS, r.getStatus());
        VoltTable t = r.getResults()[0];
        assertEquals(1, t.getRowCount(), "one row for id " + id);
        assertTrue(t.advanceRow());
        return t;
    }

    @Test
    void everyTypeRoundTripsExactly() throws Exception {
        BigDecimal dec = new BigDecimal("-12345678901234.567890123456");
        byte[] bytes = {0, 1, (byte) 0xff, 0x7f, (byte) 0x80};
        TimestampType ts = new TimestampType(1_700_000_000_123_456L);
        assertEquals(1, Clients.scalar(client.callProcedure("ALL_TYPES.insert", 1, (byte) -7, (short) -300,
                100_000, 9_000_000_000L, 3.25, dec, "héllo wörld ✓", bytes, ts)));

        VoltTable t = select(1);
        assertEquals(VoltType.TINYINT, t.getColumnType(1));
        assertEquals(VoltType.SMALLINT, t.getColumnType(2));
        assertEquals(VoltType.INTEGER, t.getColumnType(3));
        assertEquals(VoltType.BIGINT, t.getColumnType(4));
        assertEquals(VoltType.FLOAT, t.getColumnType(5));
        assertEquals(VoltType.DECIMAL, t.getColumnType(6));
        assertEquals(VoltType.STRING, t.getColumnType(7));
        assertEquals(VoltType.VARBINARY, t.getColumnType(8));
        assertEquals(VoltType.TIMESTAMP, t.getColumnType(9));
        assertEquals(1L, t.getLong("ID"));
        assertEquals(-7L, t.getLong("T"));
        assertEquals(-300L, t.getLong("S"));
        assertEquals(100_000L, t.getLong("I"));
        assertEquals(9_000_000_000L, t.getLong("B"));
        assertEquals(3.25, t.getDouble("F"));
        // DECIMAL is fixed scale 12 on the wire: exact digits, scale 12.
        assertEquals(dec.setScale(12), t.getDecimalAsBigDecimal("D"));
        assertEquals("héllo wörld ✓", t.getString("V"));
        assertArrayEquals(bytes, t.getVarbinary("VB"));
        assertEquals(ts, t.getTimestampAsTimestamp("TS"));
        assertEquals(1_700_000_000_123_456L, t.getTimestampAsLong("TS"));
    }

    @Test
    void extremeValuesRoundTrip() throws Exception {
        BigDecimal dec = new BigDecimal("99999999999999999999999999.999999999999");
        assertEquals(1, Clients.scalar(client.callProcedure("ALL_TYPES.insert", 5, (byte) 127, (short) 32767,
                Integer.MAX_VALUE, Long.MAX_VALUE, -1.5e300, dec, "", new byte[0], new TimestampType(-1L))));
        VoltTable t = select(5);
        assertEquals(127L, t.getLong("T"));
        assertEquals(32767L, t.getLong("S"));
        assertEquals((long) Integer.MAX_VALUE, t.getLong("I"));
        assertEquals(Long.MAX_VALUE, t.getLong("B"));
        assertEquals(-1.5e300, t.getDouble("F"));
        assertEquals(dec, t.getDecimalAsBigDecimal("D"));
        assertEquals("", t.getString("V"));
        assertArrayEquals(new byte[0], t.getVarbinary("VB"));
        assertEquals(-1L, t.getTimestampAsLong("TS"));
    }

    @Test
    void nullForEveryType() throws Exception {
        assertEquals(1, Clients.scalar(client.callProcedure("ALL_TYPES.insert", 2,
                null, null, null, null, null, null, null, null, null)));
        VoltTable t = select(2);
        for (String col : new String[] {"T", "S", "I", "B"}) {
            t.getLong(col);
            assertTrue(t.wasNull(), col + " is NULL");
        }
        t.getDouble("F");
        assertTrue(t.wasNull(), "F is NULL");
        assertNull(t.getDecimalAsBigDecimal("D"));
        assertNull(t.getString("V"));
        assertNull(t.getVarbinary("VB"));
        assertNull(t.getTimestampAsTimestamp("TS"));
    }

    @Test
    void typedNullSentinelsAreNull() throws Exception {
        // The client sends these sentinels with their own type codes; the server must read them as NULL.
        assertEquals(1, Clients.scalar(client.callProcedure("ALL_TYPES.insert", 6, VoltType.NULL_TINYINT,
                VoltType.NULL_SMALLINT, VoltType.NULL_INTEGER, VoltType.NULL_BIGINT, VoltType.NULL_FLOAT,
                VoltType.NULL_DECIMAL, VoltType.NULL_STRING_OR_VARBINARY, null, VoltType.NULL_TIMESTAMP)));
        VoltTable t = select(6);
        for (String col : new String[] {"T", "S", "I", "B"}) {
            t.getLong(col);
            assertTrue(t.wasNull(), col + " is NULL");
        }
        t.getDouble("F");
        assertTrue(t.wasNull(), "F is NULL");
        assertNull(t.getDecimalAsBigDecimal("D"));
        assertNull(t.getString("V"));
        assertNull(t.getTimestampAsTimestamp("TS"));
    }

    @Test
    void voltDbParameterCoercions() throws Exception {
        long micros = ChronoUnit.MICROS.between(Instant.EPOCH, Instant.parse("2024-02-29T12:34:56.789012Z"));
        // int → BIGINT, int → TINYINT/SMALLINT (in range), String → TIMESTAMP (JDBC text, UTC),
        // hex String → VARBINARY, long → VARCHAR (text form), String → DECIMAL and FLOAT.
        assertEquals(1, Clients.scalar(client.callProcedure("ALL_TYPES.insert", 3, 5, 6, 7, 42,
                "2.5", "0.000000000001", 77L, "0A0bFF", "2024-02-29 12:34:56.789012")));
        VoltTable t = select(3);
        assertEquals(5L, t.getLong("T"));
        assertEquals(6L, t.getLong("S"));
        assertEquals(7L, t.getLong("I"));
        assertEquals(42L, t.getLong("B"));
        assertEquals(2.5, t.getDouble("F"));
        assertEquals(new BigDecimal("0.000000000001"), t.getDecimalAsBigDecimal("D"));
        assertEquals("77", t.getString("V"));
        assertArrayEquals(new byte[] {0x0a, 0x0b, (byte) 0xff}, t.getVarbinary("VB"));
        assertEquals(micros, t.getTimestampAsLong("TS"));

        // Epoch microseconds as a String are a timestamp too; the key may come as a String.
        assertEquals(1, Clients.scalar(client.callProcedure("ALL_TYPES.insert", "4", null, null, null, 1,
                null, null, null, null, Long.toString(micros))));
        VoltTable u = select(4);
        assertEquals(micros, u.getTimestampAsLong("TS"));
        assertEquals(1L, u.getLong("B"));
    }

    @Test
    void wrongParameterCountIsGracefulFailure() throws Exception {
        org.voltdb.client.ProcCallException e = org.junit.jupiter.api.Assertions.assertThrows(
                org.voltdb.client.ProcCallException.class, () -> client.callProcedure("ALL_TYPES.select", 1, 2));
        assertEquals(ClientResponse.GRACEFUL_FAILURE, e.getClientResponse().getStatus());
    }
}
