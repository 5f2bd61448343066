// VoltDB's charging demo (srmadscience/voltdb-chargingdemo) replayed with our own code against
// apps/charging: its schema script's path (@UpdateClasses with the procedure jar, the DDL
// through @AdHoc, CREATE PROCEDURE … FROM CLASS chargingdemoprocs.X), then the calls its
// ChargingDemo client makes (product_table.UPSERT, DelUser, UpsertUser, AddCredit,
// ReportQuotaUsage, GetUser, showCurrentAllocations, getTotalBalance) with the Java types it
// passes, and the soft-lock pair GetAndLockUser / UpdateLockedUser. Every answer is checked
// exactly: app status and its text, table count, and the cells the client reads.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Date;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.voltdb.VoltTable;
import org.voltdb.client.Client;
import org.voltdb.client.ClientResponse;
import org.voltdb.client.ProcCallException;

class KitChargingTest {
    /** The demo's ReferenceData app status codes. */
    private static final byte STATUS_OK = 42;
    private static final byte STATUS_NO_MONEY = 43;
    private static final byte STATUS_SOME_UNITS_ALLOCATED = 44;
    private static final byte STATUS_ALL_UNITS_ALLOCATED = 45;
    private static final byte TXN_ALREADY_HAPPENED = 46;
    private static final byte RECORD_ALREADY_SOFTLOCKED = 53;
    private static final byte RECORD_HAS_BEEN_SOFTLOCKED = 54;
    private static final byte CREDIT_ADDED = 55;
    /** VoltDB's "no app status set". */
    private static final byte APP_STATUS_UNSET = Byte.MIN_VALUE;
    /** The single-partition classes the demo's script declares PARTITION ON user_table.userid. */
    private static final String[] SP_CLASSES = {"GetUser", "GetAndLockUser", "UpdateLockedUser", "UpsertUser", "DelUser",
        "ReportQuotaUsage", "AddCredit"};
    private static final int USERS = 4;
    private static final int OPENING_CREDIT = 1000;
    /** VoltDB prints a TIMESTAMP in status strings this way (the server's zone is UTC). */
    private static final DateTimeFormatter VOLT_TIME = DateTimeFormatter.ofPattern("yyyy-MM-dd HH:mm:ss.SSSSSS").withZone(ZoneOffset.UTC);

    private static LockstepServer server;
    private static Client client;

    @BeforeAll
    static void start() throws Exception {
        server = LockstepServer.start("kit-charging", Apps.procedures("charging"));
        client = Clients.connect(server.port());
        loadLikeTheDemosScript();
        setUpLikeTheClient();
    }

    @AfterAll
    static void stop() {
        Clients.closeQuietly(client);
        server.close();
    }

    /**
     * What sqlcmd does with the demo's create_db.sql: `load classes` sends the jar through
     * @UpdateClasses, the rest goes through @AdHoc. apps/charging/ddl.sql holds the same
     * schema; its FROM FILE procedures are sent here in the demo's own FROM CLASS form.
     */
    private static void loadLikeTheDemosScript() throws Exception {
        List<String> paths = new ArrayList<>();
        for (String c : SP_CLASSES) {
            paths.add("chargingdemoprocs/" + c + ".class");
        }
        paths.add("chargingdemoprocs/DeleteStaleAllocations.class");
        paths.add("chargingdemoprocs/ReferenceData.class"); // constants only: taken for a helper
        ClientResponse classes = client.callProcedure("@UpdateClasses", Apps.jar(paths.toArray(new String[0])), null);
        assertEquals(ClientResponse.SUCCESS, classes.getStatus(), classes.getStatusString());

        StringBuilder text = new StringBuilder();
        for (String line : Files.readAllLines(Apps.dir("charging").resolve("ddl.sql"))) {
            if (!line.trim().startsWith("--")) {
                text.append(line).append('\n');
            }
        }
        for (String stmt : text.toString().split(";")) {
            String sql = stmt.trim();
            if (!sql.isEmpty() && !sql.contains("FROM FILE")) {
                Clients.adHoc(client, sql);
            }
        }
        for (String c : SP_CLASSES) {
            Clients.adHoc(client, "CREATE PROCEDURE \n   PARTITION ON TABLE user_table COLUMN userid\n   FROM CLASS chargingdemoprocs." + c + ";");
        }
        Clients.adHoc(client, "CREATE PROCEDURE FROM CLASS chargingdemoprocs.DeleteStaleAllocations;");
    }

    /** The client's start: five products through the default UPSERT, then DELETE and USERS. */
    private static void setUpLikeTheClient() throws Exception {
        Object[][] products = {{0, "web site", 0}, {1, "SMS", 1}, {2, "domestic data/GB", 20}, {3, "roaming data/GB", 342},
            {4, "domestic calls/min", 3}};
        for (Object[] p : products) {
            assertEquals(1, Clients.scalar(ok("product_table.UPSERT", p)));
        }
        for (int i = 0; i < USERS; i++) {
            ClientResponse del = ok("DelUser", i);
            assertEquals(5, del.getResults().length);
            for (VoltTable t : del.getResults()) {
                assertEquals(0, t.asScalarLong(), "nothing to delete yet");
            }
        }
        for (int i = 0; i < USERS; i++) {
            ClientResponse r = ok("UpsertUser", i, OPENING_CREDIT, "Y", "{\"payload\":\"xxxxxxxxxx\"}", "Created", new Date(), "Create_" + i);
            assertStatus(r, STATUS_OK, "Created user " + i + " with opening credit of " + OPENING_CREDIT);
            assertEquals(4, r.getResults().length, "txn record, user upsert, event, balance refresh");
            for (VoltTable t : r.getResults()) {
                assertEquals(1, t.asScalarLong());
            }
        }
    }

    private static ClientResponse ok(String proc, Object... args) throws Exception {
        ClientResponse r = client.callProcedure(proc, args);
        assertEquals(ClientResponse.SUCCESS, r.getStatus(), proc + ": " + r.getStatusString());
        return r;
    }

    private static void assertStatus(ClientResponse r, byte code, String text) {
        assertEquals(code, r.getAppStatus(), r.getAppStatusString());
        assertEquals(text, r.getAppStatusString());
    }

    private static void assertAborts(String message, String proc, Object... args) {
        ProcCallException e = assertThrows(ProcCallException.class, () -> client.callProcedure(proc, args));
        assertEquals(ClientResponse.USER_ABORT, e.getClientResponse().getStatus());
        assertTrue(e.getClientResponse().getStatusString().contains(message), e.getClientResponse().getStatusString());
    }

    private static long balance(long user) throws Exception {
        VoltTable t = ok("@AdHoc", "SELECT balance FROM user_balances WHERE userid = ?", user).getResults()[0];
        return t.asScalarLong();
    }

    private static String voltTime(long micros) {
        return VOLT_TIME.format(Instant.ofEpochSecond(Math.floorDiv(micros, 1_000_000L), Math.floorMod(micros, 1_000_000L) * 1000L));
    }

    /** A recorded transaction's time as VoltDB prints it. */
    private static String txnTime(long user, String txnId) throws Exception {
        VoltTable t = ok("@AdHoc", "SELECT txn_time FROM user_recent_transactions WHERE userid = ? AND user_txn_id = ?", user, txnId)
                .getResults()[0];
        assertTrue(t.advanceRow(), txnId);
        return voltTime(t.getTimestampAsLong(0));
    }

    /** The client's reads of a ReportQuotaUsage answer: the reservation at len-3, the balance at len-1. */
    private static long[] reservationAndBalance(ClientResponse r) {
        VoltTable[] t = r.getResults();
        VoltTable alloc = t[t.length - 3];
        VoltTable bal = t[t.length - 1];
        assertTrue(bal.advanceRow());
        long units = alloc.advanceRow() ? alloc.getLong("ALLOCATED_UNITS") : -1;
        return new long[] {units, bal.getLong("BALANCE"), bal.getLong("PRODUCT_ID"), bal.getLong("SESSION_ID"), bal.getLong("USERID")};
    }

    @Test
    void creditReservationUsageAndDuplicatesAnswerAsTheDemo() throws Exception {
        // AddCredit(int, long, String): 55 and five tables, (USERID, BALANCE) third.
        ClientResponse credit = ok("AddCredit", 1, 500L, "c1");
        assertStatus(credit, CREDIT_ADDED, "500 added by Txn c1");
        VoltTable[] ct = credit.getResults();
        assertEquals(5, ct.length);
        assertTrue(ct[2].advanceRow());
        assertEquals(1, ct[2].getLong("USERID"));
        assertEquals(1500, ct[2].getLong("BALANCE"));
        assertEquals(0, ct[3].getRowCount(), "no reservations, no remaining-credit row");
        ClientResponse again = ok("AddCredit", 1, 500L, "c1");
        assertStatus(again, TXN_ALREADY_HAPPENED, "Event already happened at " + txnTime(1, "c1"));
        assertEquals(0, again.getResults().length);
        assertEquals(1500, balance(1));

        // ReportQuotaUsage(int, int, long, int, long, String), a new session: all 50 units (1000).
        ClientResponse r1 = ok("ReportQuotaUsage", 1, 2, 0L, 50, -1L, "r1");
        assertStatus(r1, STATUS_ALL_UNITS_ALLOCATED, "Allocated 50 units");
        assertEquals(4, r1.getResults().length, "insert count, reservation, remaining credit, balance");
        long[] got = reservationAndBalance(r1);
        long session = got[3];
        assertTrue(session > 0, "a new session takes the transaction's unique id");
        assertEquals(50, got[0]);
        assertEquals(1500, got[1]);
        assertEquals(2, got[2]);
        assertEquals(1, got[4]);
        VoltTable credit1 = r1.getResults()[2];
        assertTrue(credit1.advanceRow());
        assertEquals(500, credit1.getLong("BALANCE"), "remaining credit = balance - reserved value");

        // Another session wants 50 (1000) of the 500 left: the 25 it pays for.
        ClientResponse r2 = ok("ReportQuotaUsage", 1, 2, 0L, 50, -1L, "r2");
        assertStatus(r2, STATUS_SOME_UNITS_ALLOCATED, "Allocated 25 units");
        assertEquals(25, reservationAndBalance(r2)[0]);

        // The first session reports 60 units used and wants none: charged in full (1200), its
        // reservation ends, no app status, and the five interim tables come back.
        ClientResponse r3 = ok("ReportQuotaUsage", 1, 2, 60L, 0, session, "r3");
        assertEquals(APP_STATUS_UNSET, r3.getAppStatus());
        VoltTable[] t3 = r3.getResults();
        assertEquals(5, t3.length);
        assertEquals(1, t3[0].asScalarLong(), "the session's reservation deleted");
        assertEquals(1, t3[1].asScalarLong(), "the transaction recorded");
        assertEquals(0, t3[2].getRowCount());
        assertTrue(t3[3].advanceRow());
        assertEquals(300 - 25 * 20, t3[3].getLong("BALANCE"));
        assertEquals(300, reservationAndBalance(r3)[1]);
        ClientResponse dup = ok("ReportQuotaUsage", 1, 2, 60L, 0, session, "r3");
        assertStatus(dup, TXN_ALREADY_HAPPENED, "Event already happened at " + txnTime(1, "r3"));
        assertEquals(0, dup.getResults().length);
        assertEquals(300, balance(1));

        // The other session's 500 leaves -200 to spend: nothing reserved, three tables.
        ClientResponse r4 = ok("ReportQuotaUsage", 1, 2, 0L, 10, -1L, "r4");
        assertStatus(r4, STATUS_NO_MONEY, "Not enough money");
        assertEquals(3, r4.getResults().length);
        assertEquals(-1, reservationAndBalance(r4)[0]);

        // The periodic queries and the demo's SQL procedures.
        VoltTable total = ok("getTotalBalance").getResults()[0];
        assertEquals((USERS - 1) * OPENING_CREDIT + 300, total.asScalarLong());
        VoltTable alloc = ok("showCurrentAllocations").getResults()[0];
        assertEquals(1, alloc.getRowCount());
        alloc.advanceRow();
        assertEquals(2, alloc.getLong("PRODUCTID"));
        assertEquals("domestic data/GB", alloc.getString("PRODUCTNAME"));
        assertEquals(25, alloc.getLong("ALLOCATED_UNITS"));
        assertEquals(500, alloc.getLong("VALUE_AT_RISK"));
        VoltTable check = ok("checkBalance", 1L).getResults()[0];
        check.advanceRow();
        assertEquals(-200, check.getLong("CREDIT"));

        // GetUser(int): five tables; the transactions in time order with their amounts.
        VoltTable[] user = ok("GetUser", 1).getResults();
        assertEquals(5, user.length);
        assertEquals(1, user[0].getRowCount());
        assertEquals(1, user[2].getRowCount(), "the 25-unit reservation");
        List<String> ids = new ArrayList<>();
        long spent = 0;
        while (user[3].advanceRow()) {
            ids.add(user[3].getString("USER_TXN_ID"));
            spent += user[3].getLong("AMOUNT");
        }
        assertEquals(List.of("Create_1", "c1", "r1", "r2", "r3", "r4"), ids.stream().sorted().toList());
        assertEquals(OPENING_CREDIT + 500 - 1200, spent, "amounts: opening credit, credit, usage (negative)");
        user[4].advanceRow();
        assertEquals(-200, user[4].getLong("BALANCE"));

        // Unknown users and products abort with the Java's messages.
        assertAborts("User 99 does not exist", "AddCredit", 99, 1L, "x");
        assertAborts("Product 9 does not exist", "ReportQuotaUsage", 1, 9, 0L, 5, -1L, "x");
        assertAborts("User 1 exists but shouldn't", "UpsertUser", 1, 5, "y", "{}", "Created", new Date(), "Create_again");
        assertAborts("User 77 does not exist", "UpsertUser", 77, 5, "N", "{}", "Updated", new Date(), "u77");
        // An update adds credit and says the new balance; five tables (the last the purge).
        ClientResponse upd = ok("UpsertUser", 1, 100, "N", "{}", "Updated", new Date(), "u1");
        assertStatus(upd, STATUS_OK, "Updated user 1 - added credit of 100; balance now 400");
        assertEquals(5, upd.getResults().length);
        assertEquals(400, balance(1));
    }

    @Test
    void softLockIsTakenHeldAndReleasedAsTheDemo() throws Exception {
        // A free user: 54, the lock's update count, then user, balance, usage, transactions.
        ClientResponse got = ok("GetAndLockUser", 2);
        VoltTable[] t = got.getResults();
        assertEquals(5, t.length);
        assertEquals(1, t[0].asScalarLong());
        assertTrue(t[1].advanceRow());
        long lockId = t[1].getLong("USER_SOFTLOCK_SESSIONID");
        long expiry = t[1].getTimestampAsLong("USER_SOFTLOCK_EXPIRY");
        assertEquals(t[1].getTimestampAsLong("THE_CURRENT_TIMESTAMP") + 50_000, expiry, "held for 50 ms");
        assertStatus(got, RECORD_HAS_BEEN_SOFTLOCKED, "User 2 newly locked by session " + lockId);
        assertEquals(1, t[4].getRowCount(), "Create_2");
        assertEquals(List.of("USER_TXN_ID", "TXN_TIME"), List.of(t[4].getColumnName(0), t[4].getColumnName(1)));

        // Another session's update is refused while a lock is set, with the lock's expiry.
        ClientResponse refused = ok("UpdateLockedUser", 2, lockId + 1, "{\"other\":1}");
        assertStatus(refused, RECORD_HAS_BEEN_SOFTLOCKED,
                "User 2 currently locked by session " + lockId + ". Expires at " + voltTime(expiry));
        assertEquals(0, refused.getResults().length);
        // The holder's update stores the JSON and clears the lock.
        ClientResponse stored = ok("UpdateLockedUser", 2, lockId, "{\"mine\":1}");
        assertEquals(APP_STATUS_UNSET, stored.getAppStatus());
        assertEquals(1, Clients.scalar(stored));
        VoltTable row = ok("GetUser", 2).getResults()[0];
        row.advanceRow();
        assertEquals("{\"mine\":1}", row.getString("USER_JSON_OBJECT"));
        row.getLong("USER_SOFTLOCK_SESSIONID");
        assertTrue(row.wasNull());
        assertNull(row.getTimestampAsTimestamp("USER_SOFTLOCK_EXPIRY"));
        // No lock: anyone's update goes through.
        assertEquals(1, Clients.scalar(ok("UpdateLockedUser", 2, 12345L, "{}")));

        // A lock that has not expired (set an hour ahead here, so no clock decides the test): 53,
        // the holder named, the lock untouched, four tables.
        Clients.adHoc(client, "UPDATE user_table SET user_softlock_sessionid = 7, user_softlock_expiry = DATEADD(HOUR, 1, NOW) WHERE userid = 3");
        ClientResponse held = ok("GetAndLockUser", 3);
        assertStatus(held, RECORD_ALREADY_SOFTLOCKED, "User 3 has already been locked by session 7");
        assertEquals(4, held.getResults().length);
        held.getResults()[0].advanceRow();
        assertEquals(7, held.getResults()[0].getLong("USER_SOFTLOCK_SESSIONID"));
        assertAborts("User 98 does not exist", "GetAndLockUser", 98);
        assertAborts("User 98 does not exist", "UpdateLockedUser", 98, 1L, "{}");
    }

    @Test
    void deletedUserStartsAgainFromItsOpeningCreditAndStaleReservationsGo() throws Exception {
        ok("ReportQuotaUsage", 0, 1, 0L, 60, -1L, "d1");
        ok("AddCredit", 0, 250L, "d2");
        ClientResponse del = ok("DelUser", 0);
        VoltTable[] t = del.getResults();
        assertEquals(5, t.length);
        assertEquals(List.of(1L, 1L, 1L, 3L, 1L),
                List.of(t[0].asScalarLong(), t[1].asScalarLong(), t[2].asScalarLong(), t[3].asScalarLong(), t[4].asScalarLong()));
        ClientResponse again = ok("UpsertUser", 0, OPENING_CREDIT, "Y", "{}", "Created", new Date(), "Create_0");
        assertStatus(again, STATUS_OK, "Created user 0 with opening credit of " + OPENING_CREDIT);
        assertEquals(OPENING_CREDIT, balance(0), "the deleted user's money does not come back");

        // DeleteStaleAllocations: reservations untouched for 5 minutes go, one count each.
        assertEquals(0, ok("DeleteStaleAllocations").getResults().length, "fresh reservations stay");
        Clients.adHoc(client, "INSERT INTO user_usage_table VALUES (3, 4, 10, 99, '2020-01-01 00:00:00')");
        ClientResponse stale = ok("DeleteStaleAllocations");
        assertEquals(1, stale.getResults().length);
        assertEquals(1, stale.getResults()[0].asScalarLong());
        assertEquals(0, ok("@AdHoc", "SELECT COUNT(*) FROM user_usage_table WHERE sessionid = 99").getResults()[0].asScalarLong());
    }
}
