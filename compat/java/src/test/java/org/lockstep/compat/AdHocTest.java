// @AdHoc with the real client: DDL, DML counts, queries by name and index, NULLs, constraint errors.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.voltdb.VoltTable;
import org.voltdb.VoltType;
import org.voltdb.client.Client;
import org.voltdb.client.ClientResponse;
import org.voltdb.client.ProcCallException;

@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class AdHocTest {
    private static LockstepServer server;
    private static Client client;

    @BeforeAll
    static void start() throws Exception {
        server = LockstepServer.start("adhoc");
        client = Clients.connect(server.port());
    }

    @AfterAll
    static void stop() {
        Clients.closeQuietly(client);
        server.close();
    }

    @Test
    @Order(1)
    void ddlCreatesTablesIndexesAndProcedures() throws Exception {
        Clients.adHoc(client, "CREATE TABLE items (id INTEGER NOT NULL, name VARCHAR(32), qty BIGINT,"
                + " CONSTRAINT items_pk PRIMARY KEY (id))");
        Clients.adHoc(client, "PARTITION TABLE items ON COLUMN id");
        Clients.adHoc(client, "CREATE INDEX items_by_name ON items (name)");
        Clients.adHoc(client, "CREATE PROCEDURE ItemsByName AS SELECT id, qty FROM items WHERE name = ? ORDER BY id");
        Clients.adHoc(client, "CREATE TABLE tags (tag VARCHAR(16) NOT NULL, CONSTRAINT tags_uq UNIQUE (tag))");
        VoltTable empty = Clients.adHoc(client, "SELECT COUNT(*) FROM items").getResults()[0];
        assertEquals(0L, empty.asScalarLong());
    }

    @Test
    @Order(2)
    void dmlReturnsModifiedTupleCounts() throws Exception {
        assertEquals(1, Clients.scalar(Clients.adHoc(client, "INSERT INTO items VALUES (1, 'apple', 10)")));
        assertEquals(1, Clients.scalar(Clients.adHoc(client, "INSERT INTO items VALUES (2, 'pear', 20)")));
        assertEquals(1, Clients.scalar(Clients.adHoc(client, "INSERT INTO items (id, name, qty) VALUES (?, ?, ?)",
                3, "apple", 30L)));
        assertEquals(1, Clients.scalar(Clients.adHoc(client, "INSERT INTO items (id) VALUES (4)")));
        ClientResponse upd = Clients.adHoc(client, "UPDATE items SET qty = qty + 1 WHERE name = 'apple'");
        VoltTable counts = upd.getResults()[0];
        assertEquals(1, counts.getColumnCount());
        assertEquals("modified_tuples", counts.getColumnName(0).toLowerCase());
        assertEquals(VoltType.BIGINT, counts.getColumnType(0));
        assertEquals(2L, counts.asScalarLong());
        assertEquals(0, Clients.scalar(Clients.adHoc(client, "DELETE FROM items WHERE id = 99")));
    }

    @Test
    @Order(3)
    void queriesReadByNameIndexAndNull() throws Exception {
        VoltTable t = Clients.adHoc(client, "SELECT id, name, qty FROM items ORDER BY id").getResults()[0];
        assertEquals(3, t.getColumnCount());
        assertEquals("ID", t.getColumnName(0));
        assertEquals("NAME", t.getColumnName(1));
        assertEquals("QTY", t.getColumnName(2));
        assertEquals(VoltType.INTEGER, t.getColumnType(0));
        assertEquals(VoltType.STRING, t.getColumnType(1));
        assertEquals(VoltType.BIGINT, t.getColumnType(2));
        assertEquals(4, t.getRowCount());

        long[] ids = {1, 2, 3, 4};
        String[] names = {"apple", "pear", "apple", null};
        long[] qtys = {11, 20, 31, 0};
        for (int i = 0; i < 4; i++) {
            assertTrue(t.advanceRow());
            assertEquals(ids[i], t.getLong(0));
            assertEquals(ids[i], t.getLong("ID"));
            if (names[i] == null) {
                assertNull(t.getString("NAME"));
                assertTrue(t.wasNull());
                t.getLong("QTY");
                assertTrue(t.wasNull(), "qty of row 4 is NULL");
            } else {
                assertEquals(names[i], t.getString(1));
                assertFalse(t.wasNull());
                assertEquals(qtys[i], t.getLong("qty"));
                assertFalse(t.wasNull());
            }
        }
        assertFalse(t.advanceRow());

        VoltTable p = Clients.adHoc(client, "SELECT qty FROM items WHERE id = ?", 2).getResults()[0];
        assertEquals(20L, p.asScalarLong());

        VoltTable agg = Clients.adHoc(client,
                "SELECT name, COUNT(*) AS n, SUM(qty) AS total FROM items WHERE name IS NOT NULL"
                        + " GROUP BY name ORDER BY name").getResults()[0];
        assertEquals(2, agg.getRowCount());
        agg.advanceRow();
        assertEquals("apple", agg.getString("NAME"));
        assertEquals(2L, agg.getLong("N"));
        assertEquals(42L, agg.getLong("TOTAL"));
        agg.advanceRow();
        assertEquals("pear", agg.getString("NAME"));
        assertEquals(1L, agg.getLong("N"));
        assertEquals(20L, agg.getLong("TOTAL"));
    }

    @Test
    @Order(4)
    void sqlProcedureDeclaredByDdlRuns() throws Exception {
        ClientResponse r = client.callProcedure("ItemsByName", "apple");
        assertEquals(ClientResponse.SUCCESS, r.getStatus());
        VoltTable t = r.getResults()[0];
        assertEquals(2, t.getRowCount());
        t.advanceRow();
        assertEquals(1L, t.getLong("ID"));
        assertEquals(11L, t.getLong("QTY"));
        t.advanceRow();
        assertEquals(3L, t.getLong("ID"));
        assertEquals(31L, t.getLong("QTY"));
    }

    @Test
    @Order(5)
    void primaryKeyViolationIsGracefulFailureNamingTheConstraint() throws Exception {
        ProcCallException e = assertThrows(ProcCallException.class,
                () -> client.callProcedure("@AdHoc", "INSERT INTO items VALUES (1, 'again', 1)"));
        ClientResponse r = e.getClientResponse();
        assertEquals(ClientResponse.GRACEFUL_FAILURE, r.getStatus());
        assertTrue(r.getStatusString().toUpperCase().contains("ITEMS_PK"), r.getStatusString());
        // The failed insert left nothing behind.
        VoltTable t = Clients.adHoc(client, "SELECT name FROM items WHERE id = 1").getResults()[0];
        t.advanceRow();
        assertEquals("apple", t.getString(0));
    }

    @Test
    @Order(6)
    void uniqueViolationIsGracefulFailureNamingTheConstraint() throws Exception {
        assertEquals(1, Clients.scalar(Clients.adHoc(client, "INSERT INTO tags VALUES ('red')")));
        ProcCallException e = assertThrows(ProcCallException.class,
                () -> client.callProcedure("@AdHoc", "INSERT INTO tags VALUES ('red')"));
        ClientResponse r = e.getClientResponse();
        assertEquals(ClientResponse.GRACEFUL_FAILURE, r.getStatus());
        assertTrue(r.getStatusString().toUpperCase().contains("TAGS_UQ"), r.getStatusString());
    }

    @Test
    @Order(7)
    void badSqlIsGracefulFailure() throws Exception {
        ProcCallException e = assertThrows(ProcCallException.class,
                () -> client.callProcedure("@AdHoc", "SELECT nope FROM items"));
        assertEquals(ClientResponse.GRACEFUL_FAILURE, e.getClientResponse().getStatus());
        assertTrue(e.getClientResponse().getStatusString().toUpperCase().contains("NOPE"),
                e.getClientResponse().getStatusString());
    }
}
