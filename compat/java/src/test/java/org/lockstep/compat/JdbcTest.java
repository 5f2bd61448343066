// The JDBC driver inside voltdbclient 10.1.1 against Lockstep: statements, prepared and callable
// statements, result set metadata and database metadata.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigDecimal;
import java.sql.CallableStatement;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.Statement;
import java.sql.Timestamp;
import java.sql.Types;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;

@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class JdbcTest {
    private static LockstepServer server;
    private static Connection conn;

    @BeforeAll
    static void start() throws Exception {
        server = LockstepServer.start("jdbc");
        Class.forName("org.voltdb.jdbc.Driver");
        conn = DriverManager.getConnection("jdbc:voltdb://127.0.0.1:" + server.port());
        // The schema comes from the native client so that the JDBC tests below do not depend on
        // JDBC DDL (tested on its own, last).
        org.voltdb.client.Client c = Clients.connect(server.port());
        try {
            Clients.adHoc(c, "CREATE TABLE products (id INTEGER NOT NULL, name VARCHAR(40) NOT NULL,"
                    + " price DECIMAL, added TIMESTAMP, PRIMARY KEY (id))");
            Clients.adHoc(c, "PARTITION TABLE products ON COLUMN id");
            Clients.adHoc(c, "CREATE PROCEDURE ProductsAbove AS SELECT id, name FROM products WHERE price > ? ORDER BY id");
        } finally {
            Clients.closeQuietly(c);
        }
    }

    @AfterAll
    static void stop() throws Exception {
        if (conn != null) {
            conn.close();
        }
        server.close();
    }

    @Test
    @Order(1)
    void statementExecutesUpdates() throws Exception {
        try (Statement st = conn.createStatement()) {
            assertEquals(1, st.executeUpdate("INSERT INTO products VALUES (1, 'lamp', 19.99, '2024-01-02 03:04:05.000006')"));
            assertEquals(1, st.executeUpdate("INSERT INTO products VALUES (2, 'desk', 250.00, NULL)"));
            assertEquals(2, st.executeUpdate("UPDATE products SET name = name || '!' WHERE id IN (1, 2)"));
        }
    }

    @Test
    @Order(2)
    void statementQueryAndResultSetMetadata() throws Exception {
        try (Statement st = conn.createStatement();
                ResultSet rs = st.executeQuery("SELECT id, name, price, added FROM products ORDER BY id")) {
            ResultSetMetaData md = rs.getMetaData();
            assertEquals(4, md.getColumnCount());
            assertEquals("ID", md.getColumnName(1));
            assertEquals("NAME", md.getColumnLabel(2));
            assertEquals(Types.INTEGER, md.getColumnType(1));
            assertEquals(Types.VARCHAR, md.getColumnType(2));
            assertEquals(Types.DECIMAL, md.getColumnType(3));
            assertEquals(Types.TIMESTAMP, md.getColumnType(4));

            assertTrue(rs.next());
            assertEquals(1, rs.getInt("ID"));
            assertEquals("lamp!", rs.getString(2));
            assertEquals(0, new BigDecimal("19.99").compareTo(rs.getBigDecimal("PRICE")));
            Timestamp added = rs.getTimestamp("ADDED");
            assertEquals(6000, added.getNanos());
            assertTrue(rs.next());
            assertEquals(2, rs.getInt(1));
            assertEquals("desk!", rs.getString("NAME"));
            assertNull(rs.getTimestamp("ADDED"));
            assertTrue(rs.wasNull());
            assertFalse(rs.next());
        }
    }

    @Test
    @Order(3)
    void preparedStatementsBindParameters() throws Exception {
        try (PreparedStatement ins = conn.prepareStatement("INSERT INTO products VALUES (?, ?, ?, ?)")) {
            ins.setInt(1, 3);
            ins.setString(2, "chair");
            ins.setBigDecimal(3, new BigDecimal("75.500000000001"));
            ins.setTimestamp(4, new Timestamp(1_700_000_000_000L));
            assertEquals(1, ins.executeUpdate());
            ins.setInt(1, 4);
            ins.setString(2, "rug");
            ins.setNull(3, Types.DECIMAL);
            ins.setNull(4, Types.TIMESTAMP);
            assertEquals(1, ins.executeUpdate());
        }
        try (PreparedStatement q = conn.prepareStatement("SELECT name, price, added FROM products WHERE id = ?")) {
            q.setInt(1, 3);
            try (ResultSet rs = q.executeQuery()) {
                assertTrue(rs.next());
                assertEquals("chair", rs.getString(1));
                assertEquals(new BigDecimal("75.500000000001"), rs.getBigDecimal(2));
                assertEquals(1_700_000_000_000L, rs.getTimestamp(3).getTime());
                assertFalse(rs.next());
            }
            q.setInt(1, 4);
            try (ResultSet rs = q.executeQuery()) {
                assertTrue(rs.next());
                assertEquals("rug", rs.getString(1));
                assertNull(rs.getBigDecimal(2));
                assertTrue(rs.wasNull());
            }
        }
    }

    @Test
    @Order(4)
    void callableStatementCallsAProcedure() throws Exception {
        try (CallableStatement call = conn.prepareCall("{call ProductsAbove(?)}")) {
            call.setBigDecimal(1, new BigDecimal("50"));
            try (ResultSet rs = call.executeQuery()) {
                List<String> names = new ArrayList<>();
                while (rs.next()) {
                    names.add(rs.getInt("ID") + ":" + rs.getString("NAME"));
                }
                assertEquals(List.of("2:desk!", "3:chair"), names);
            }
        }
        try (CallableStatement call = conn.prepareCall("{call PRODUCTS.select(?)}")) {
            call.setInt(1, 1);
            try (ResultSet rs = call.executeQuery()) {
                assertTrue(rs.next());
                assertEquals("lamp!", rs.getString("NAME"));
            }
        }
    }

    @Test
    @Order(5)
    void databaseMetadataListsTablesAndColumns() throws Exception {
        DatabaseMetaData md = conn.getMetaData();
        List<String> tables = new ArrayList<>();
        try (ResultSet rs = md.getTables(null, null, "%", null)) {
            while (rs.next()) {
                tables.add(rs.getString("TABLE_NAME") + "/" + rs.getString("TABLE_TYPE"));
            }
        }
        assertEquals(List.of("PRODUCTS/TABLE"), tables);

        List<String> columns = new ArrayList<>();
        try (ResultSet rs = md.getColumns(null, null, "PRODUCTS", "%")) {
            while (rs.next()) {
                columns.add(rs.getInt("ORDINAL_POSITION") + ":" + rs.getString("COLUMN_NAME") + ":"
                        + rs.getInt("DATA_TYPE") + ":" + rs.getString("TYPE_NAME") + ":"
                        + rs.getString("IS_NULLABLE"));
            }
        }
        assertEquals(List.of(
                "1:ID:" + Types.INTEGER + ":INTEGER:NO",
                "2:NAME:" + Types.VARCHAR + ":VARCHAR:NO",
                "3:PRICE:" + Types.DECIMAL + ":DECIMAL:YES",
                "4:ADDED:" + Types.TIMESTAMP + ":TIMESTAMP:YES"), columns);

        List<String> pk = new ArrayList<>();
        try (ResultSet rs = md.getPrimaryKeys(null, null, "PRODUCTS")) {
            while (rs.next()) {
                pk.add(rs.getString("COLUMN_NAME") + ":" + rs.getInt("KEY_SEQ"));
            }
        }
        assertEquals(List.of("ID:1"), pk);

        // The 10.1.1 driver accepts only "%" (or null) as the procedure name pattern.
        List<String> procs = new ArrayList<>();
        try (ResultSet rs = md.getProcedures(null, null, "%")) {
            while (rs.next()) {
                String name = rs.getString("PROCEDURE_NAME");
                if (name.equalsIgnoreCase("ProductsAbove") || name.toUpperCase().startsWith("PRODUCTS.")) {
                    procs.add(name.toUpperCase());
                }
            }
        }
        assertEquals(List.of("PRODUCTS.delete", "PRODUCTS.insert", "PRODUCTS.select", "PRODUCTS.update",
                "PRODUCTS.upsert", "ProductsAbove").stream().map(String::toUpperCase).sorted().toList(),
                procs.stream().sorted().toList());

        // getTypeInfo (@SystemCatalog TYPEINFO): the DDL types, ordered by java.sql.Types code.
        List<String> types = new ArrayList<>();
        try (ResultSet rs = md.getTypeInfo()) {
            while (rs.next()) {
                types.add(rs.getString("TYPE_NAME") + ":" + rs.getInt("DATA_TYPE") + ":" + rs.getInt("PRECISION")
                        + ":" + rs.getString("LITERAL_PREFIX") + ":" + rs.getInt("MAXIMUM_SCALE"));
            }
        }
        assertEquals(List.of(
                "TINYINT:" + Types.TINYINT + ":7:null:0",
                "BIGINT:" + Types.BIGINT + ":63:null:0",
                "VARBINARY:" + Types.VARBINARY + ":1048576:X':0",
                "DECIMAL:" + Types.DECIMAL + ":38:null:12",
                "INTEGER:" + Types.INTEGER + ":31:null:0",
                "SMALLINT:" + Types.SMALLINT + ":15:null:0",
                "FLOAT:" + Types.DOUBLE + ":53:null:0",
                "VARCHAR:" + Types.VARCHAR + ":1048576:':0",
                "TIMESTAMP:" + Types.TIMESTAMP + ":63:':0"), types);
    }

    @Test
    @Order(6)
    void statementExecutesDdl() throws Exception {
        try (Statement st = conn.createStatement()) {
            // Not a query: the driver reads the first column of the first row as the update count.
            assertFalse(st.execute("CREATE TABLE jdbc_ddl (k BIGINT NOT NULL, PRIMARY KEY (k))"));
            assertFalse(st.execute("PARTITION TABLE jdbc_ddl ON COLUMN k"));
            assertEquals(1, st.executeUpdate("INSERT INTO jdbc_ddl VALUES (7)"));
            try (ResultSet rs = st.executeQuery("SELECT k FROM jdbc_ddl")) {
                assertTrue(rs.next());
                assertEquals(7L, rs.getLong(1));
            }
        }
    }

    /** One metadata row as "COLUMN=value" pairs, in the result's column order. */
    private static String describe(ResultSet rs, String... columns) throws Exception {
        StringBuilder b = new StringBuilder();
        for (String c : columns) {
            Object v = rs.getObject(c);
            // The driver hands out VoltDB's null sentinels from getObject; wasNull tells.
            if (rs.wasNull()) {
                v = null;
            }
            b.append(b.length() == 0 ? "" : " ").append(c).append('=').append(v);
        }
        return b.toString();
    }

    @Test
    @Order(7)
    void databaseMetadataHasTheFullJdbcLayouts() throws Exception {
        DatabaseMetaData md = conn.getMetaData();
        try (ResultSet rs = md.getColumns(null, null, "PRODUCTS", "%")) {
            ResultSetMetaData layout = rs.getMetaData();
            List<String> names = new ArrayList<>();
            for (int i = 1; i <= layout.getColumnCount(); i++) {
                names.add(layout.getColumnName(i));
            }
            assertEquals(List.of("TABLE_CAT", "TABLE_SCHEM", "TABLE_NAME", "COLUMN_NAME", "DATA_TYPE", "TYPE_NAME",
                    "COLUMN_SIZE", "BUFFER_LENGTH", "DECIMAL_DIGITS", "NUM_PREC_RADIX", "NULLABLE", "REMARKS", "COLUMN_DEF",
                    "SQL_DATA_TYPE", "SQL_DATETIME_SUB", "CHAR_OCTET_LENGTH", "ORDINAL_POSITION", "IS_NULLABLE",
                    "SCOPE_CATALOG", "SCOPE_SCHEMA", "SCOPE_TABLE", "SOURCE_DATA_TYPE", "IS_AUTOINCREMENT"), names);
            assertEquals(Types.INTEGER, layout.getColumnType(5));
            List<String> rows = new ArrayList<>();
            while (rs.next()) {
                rows.add(describe(rs, "COLUMN_NAME", "COLUMN_SIZE", "DECIMAL_DIGITS", "NUM_PREC_RADIX", "NULLABLE",
                        "REMARKS", "CHAR_OCTET_LENGTH", "IS_AUTOINCREMENT"));
            }
            assertEquals(List.of(
                    "COLUMN_NAME=ID COLUMN_SIZE=31 DECIMAL_DIGITS=null NUM_PREC_RADIX=2 NULLABLE=0 REMARKS=PARTITION_COLUMN CHAR_OCTET_LENGTH=null IS_AUTOINCREMENT=NO",
                    "COLUMN_NAME=NAME COLUMN_SIZE=40 DECIMAL_DIGITS=null NUM_PREC_RADIX=null NULLABLE=0 REMARKS=null CHAR_OCTET_LENGTH=40 IS_AUTOINCREMENT=NO",
                    "COLUMN_NAME=PRICE COLUMN_SIZE=38 DECIMAL_DIGITS=12 NUM_PREC_RADIX=10 NULLABLE=1 REMARKS=null CHAR_OCTET_LENGTH=null IS_AUTOINCREMENT=NO",
                    "COLUMN_NAME=ADDED COLUMN_SIZE=63 DECIMAL_DIGITS=null NUM_PREC_RADIX=2 NULLABLE=1 REMARKS=null CHAR_OCTET_LENGTH=null IS_AUTOINCREMENT=NO"),
                    rows);
        }

        List<String> pkName = new ArrayList<>();
        try (ResultSet rs = md.getPrimaryKeys(null, null, "PRODUCTS")) {
            while (rs.next()) {
                pkName.add(rs.getString("PK_NAME"));
            }
        }
        assertEquals(1, pkName.size());
        List<String> index = new ArrayList<>();
        try (ResultSet rs = md.getIndexInfo(null, null, "PRODUCTS", false, false)) {
            while (rs.next()) {
                index.add(describe(rs, "TABLE_NAME", "NON_UNIQUE", "INDEX_NAME", "TYPE", "ORDINAL_POSITION", "COLUMN_NAME",
                        "ASC_OR_DESC"));
            }
        }
        assertEquals(List.of("TABLE_NAME=PRODUCTS NON_UNIQUE=0 INDEX_NAME=" + pkName.get(0)
                + " TYPE=3 ORDINAL_POSITION=1 COLUMN_NAME=ID ASC_OR_DESC=A"), index);

        // The driver matches procedure names exactly: ask with the name the catalog lists.
        String above = null;
        String insert = null;
        try (ResultSet rs = md.getProcedures(null, null, "%")) {
            while (rs.next()) {
                String name = rs.getString("PROCEDURE_NAME");
                above = name.equalsIgnoreCase("ProductsAbove") ? name : above;
                insert = name.equalsIgnoreCase("PRODUCTS.insert") ? name : insert;
            }
        }
        List<String> params = new ArrayList<>();
        try (ResultSet rs = md.getProcedureColumns(null, null, above, "%")) {
            while (rs.next()) {
                params.add(describe(rs, "COLUMN_NAME", "COLUMN_TYPE", "DATA_TYPE", "TYPE_NAME",
                        "PRECISION", "SCALE", "ORDINAL_POSITION"));
            }
        }
        assertEquals(List.of("COLUMN_NAME=param0 COLUMN_TYPE=1 DATA_TYPE=" + Types.DECIMAL
                + " TYPE_NAME=DECIMAL PRECISION=38 SCALE=12 ORDINAL_POSITION=1"), params);
        List<String> insertParams = new ArrayList<>();
        try (ResultSet rs = md.getProcedureColumns(null, null, insert, "%")) {
            while (rs.next()) {
                insertParams.add(rs.getString("TYPE_NAME"));
            }
        }
        assertEquals(List.of("INTEGER", "VARCHAR", "DECIMAL", "TIMESTAMP"), insertParams);

        List<String> tables = new ArrayList<>();
        try (ResultSet rs = md.getTables(null, null, "%", new String[] {"TABLE"})) {
            assertEquals(10, rs.getMetaData().getColumnCount());
            while (rs.next()) {
                tables.add(rs.getString("TABLE_NAME") + ":" + rs.getString("REMARKS"));
            }
        }
        assertEquals(List.of("JDBC_DDL:{\"partitionColumn\":\"K\"}", "PRODUCTS:{\"partitionColumn\":\"ID\"}"), tables);
    }
}
