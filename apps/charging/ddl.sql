-- Telco prepaid charging: the schema of VoltDB's charging demo (srmadscience/
-- voltdb-chargingdemo, ddl/create_db.sql): the same tables, columns, views, indexes and
-- procedures, so that the demo's own client runs unchanged. Users hold money, reserve some
-- of it per session before using a product, and report usage, which is charged. Every
-- movement of money goes to an export stream, whose view keeps each user's balance.
-- Load it with: lockstep sql -f apps/charging/ddl.sql
-- (The demo's own create_db.sql loads too, against a server started with
-- --procedures apps/charging/procedures: it binds FROM CLASS chargingdemoprocs.X to X.lua.)

-- Products and their price per unit; small and read by every call: replicated.
CREATE TABLE product_table (
  productid   BIGINT      NOT NULL PRIMARY KEY,
  productname VARCHAR(50) NOT NULL,
  unit_cost   BIGINT      NOT NULL
);

-- Users, with an opaque JSON payload (procedures never parse it) and a soft lock
-- (GetAndLockUser, UpdateLockedUser).
CREATE TABLE user_table (
  userid                  BIGINT NOT NULL PRIMARY KEY,
  user_json_object        VARCHAR(8000),
  user_last_seen          TIMESTAMP DEFAULT NOW,
  user_softlock_sessionid BIGINT,
  user_softlock_expiry    TIMESTAMP
);
CREATE INDEX ut_del ON user_table (user_last_seen);
PARTITION TABLE user_table ON COLUMN userid;

-- Transaction ids applied per user, so that a repeat is answered and not applied again.
CREATE TABLE user_recent_transactions (
  userid      BIGINT NOT NULL,
  user_txn_id VARCHAR(128),
  txn_time    TIMESTAMP DEFAULT NOW NOT NULL,
  productid   BIGINT,
  amount      BIGINT,
  PRIMARY KEY (userid, user_txn_id)
)
-- The demo keeps an hour of them: older rows are deleted in the background.
USING TTL 1 HOURS ON COLUMN txn_time;
PARTITION TABLE user_recent_transactions ON COLUMN userid;
CREATE INDEX urt_del_idx ON user_recent_transactions (userid, txn_time);
CREATE INDEX urt_del_idx2 ON user_recent_transactions (txn_time);

-- Financial events (credits and charges), exported in commit order per partition.
CREATE STREAM user_financial_events PARTITION ON COLUMN userid EXPORT TO TARGET finevent (
  userid  BIGINT      NOT NULL,
  amount  BIGINT      NOT NULL,
  purpose VARCHAR(80) NOT NULL
);

-- Units reserved per (user, product, session).
CREATE TABLE user_usage_table (
  userid          BIGINT    NOT NULL,
  productid       BIGINT    NOT NULL,
  allocated_units BIGINT    NOT NULL,
  sessionid       BIGINT    NOT NULL,
  lastdate        TIMESTAMP NOT NULL,
  PRIMARY KEY (userid, productid, sessionid)
);
CREATE INDEX uut_del_idx ON user_usage_table (lastdate, userid, productid, sessionid);
CREATE INDEX uut_del_idx2 ON user_usage_table (userid, lastdate, productid, sessionid);
PARTITION TABLE user_usage_table ON COLUMN userid;

-- Units reserved per product.
CREATE VIEW allocated_by_product AS
  SELECT productid, COUNT(*) AS how_many, SUM(allocated_units) AS allocated_units
    FROM user_usage_table GROUP BY productid;

-- Each user's event count and balance: the sum of the user's financial events.
CREATE VIEW user_balance_total_view AS
  SELECT userid, COUNT(*) AS tran_count, SUM(amount) AS balance
    FROM user_financial_events GROUP BY userid;

-- Each user's balance, copied from user_balance_total_view by the procedures
-- (UPSERT … SELECT) in the transaction that adds the event.
CREATE TABLE user_balances (
  userid     BIGINT NOT NULL PRIMARY KEY,
  tran_count BIGINT NOT NULL,
  balance    BIGINT NOT NULL
);
PARTITION TABLE user_balances ON COLUMN userid;

-- All the money users hold.
CREATE VIEW total_balances AS
  SELECT SUM(balance) AS balance FROM user_balances;

CREATE PROCEDURE getTotalBalance AS
  SELECT * FROM total_balances;

-- A user's balance less the value of its reservations (no row without reservations).
CREATE PROCEDURE checkBalance PARTITION ON TABLE user_table COLUMN userid AS
  SELECT v.userid, v.balance - SUM(uut.allocated_units * p.unit_cost) AS credit
    FROM user_balances v, user_usage_table uut, product_table p
   WHERE v.userid = ? AND v.userid = uut.userid AND p.productid = uut.productid
   GROUP BY v.userid, v.balance;

CREATE PROCEDURE showTransactions PARTITION ON TABLE user_table COLUMN userid AS
  SELECT * FROM user_recent_transactions WHERE userid = ? ORDER BY txn_time, user_txn_id;

-- Value at risk: units reserved per product and what they are worth.
CREATE PROCEDURE showCurrentAllocations AS
  SELECT p.productid, p.productname, a.allocated_units, a.allocated_units * p.unit_cost AS value_at_risk
    FROM product_table p, allocated_by_product a
   WHERE p.productid = a.productid
   ORDER BY p.productid;

-- The demo's Java procedures, one Lua file each (apps/README.md says how each was checked).
CREATE PROCEDURE GetUser PARTITION ON TABLE user_table COLUMN userid
  FROM FILE 'procedures/GetUser.lua';
CREATE PROCEDURE GetAndLockUser PARTITION ON TABLE user_table COLUMN userid
  FROM FILE 'procedures/GetAndLockUser.lua';
CREATE PROCEDURE UpdateLockedUser PARTITION ON TABLE user_table COLUMN userid
  FROM FILE 'procedures/UpdateLockedUser.lua';
CREATE PROCEDURE UpsertUser PARTITION ON TABLE user_table COLUMN userid
  FROM FILE 'procedures/UpsertUser.lua';
CREATE PROCEDURE DelUser PARTITION ON TABLE user_table COLUMN userid
  FROM FILE 'procedures/DelUser.lua';
CREATE PROCEDURE ReportQuotaUsage PARTITION ON TABLE user_table COLUMN userid
  FROM FILE 'procedures/ReportQuotaUsage.lua';
CREATE PROCEDURE AddCredit PARTITION ON TABLE user_table COLUMN userid
  FROM FILE 'procedures/AddCredit.lua';

-- Housekeeping. The demo declares it DIRECTED and runs it every second on each partition
-- from a task (CREATE TASK … RUN ON PARTITIONS), which its script then drops again; it also
-- creates a disabled task of a Java scheduler class (PurgeWrangler), which Lockstep keeps
-- disabled. Here it is a multi-partition procedure, called on demand.
CREATE PROCEDURE DeleteStaleAllocations FROM FILE 'procedures/DeleteStaleAllocations.lua';
