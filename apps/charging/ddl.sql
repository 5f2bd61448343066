-- Telco prepaid charging (after VoltDB's voltdb-chargingdemo): users hold money, reserve
-- some of it for a session before using a product, and report usage, which is charged
-- against the reservation. Every movement of money goes to an export stream.
-- Load it with: lockstep sql -f apps/charging/ddl.sql

-- Products and their price per unit; small and read by every call: replicated.
CREATE TABLE product_table (
  productid   BIGINT      NOT NULL,
  productname VARCHAR(50) NOT NULL,
  unit_cost   BIGINT      NOT NULL,
  PRIMARY KEY (productid)
);

-- Users, with an opaque JSON payload stored as text (procedures never parse it).
CREATE TABLE user_table (
  userid                  BIGINT NOT NULL,
  user_json_object        VARCHAR(8000),
  user_last_seen          TIMESTAMP DEFAULT NOW,
  user_softlock_sessionid BIGINT,
  user_softlock_expiry    TIMESTAMP,
  PRIMARY KEY (userid)
);
PARTITION TABLE user_table ON COLUMN userid;

-- Every transaction id applied, with its outcome, so a repeat is answered the same way.
CREATE TABLE user_recent_transactions (
  userid      BIGINT       NOT NULL,
  user_txn_id VARCHAR(128) NOT NULL,
  txn_time    TIMESTAMP    DEFAULT NOW NOT NULL,
  productid   BIGINT,
  amount      BIGINT,
  status      TINYINT,
  PRIMARY KEY (userid, user_txn_id)
);
PARTITION TABLE user_recent_transactions ON COLUMN userid;

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
PARTITION TABLE user_usage_table ON COLUMN userid;

-- Each user's balance: the sum of the user's financial events, kept by the procedures in
-- the same transaction as the event.
CREATE TABLE user_balances (
  userid     BIGINT NOT NULL,
  tran_count BIGINT NOT NULL,
  balance    BIGINT NOT NULL,
  PRIMARY KEY (userid)
);
PARTITION TABLE user_balances ON COLUMN userid;

-- Units reserved per product (one row per product and partition).
CREATE VIEW allocated_by_product (productid, how_many, allocated_units) AS
  SELECT productid, COUNT(*), SUM(allocated_units) FROM user_usage_table GROUP BY productid;

-- Money held by all users (one row per partition).
CREATE VIEW total_balances (how_many, balance) AS
  SELECT COUNT(*), SUM(balance) FROM user_balances;

CREATE PROCEDURE UpsertUser PARTITION ON TABLE user_table COLUMN userid PARAMETER 0
  FROM FILE 'procedures/UpsertUser.lua';
CREATE PROCEDURE DelUser PARTITION ON TABLE user_table COLUMN userid PARAMETER 0
  FROM FILE 'procedures/DelUser.lua';
CREATE PROCEDURE GetUser PARTITION ON TABLE user_table COLUMN userid PARAMETER 0
  FROM FILE 'procedures/GetUser.lua';
CREATE PROCEDURE AddCredit PARTITION ON TABLE user_table COLUMN userid PARAMETER 0
  FROM FILE 'procedures/AddCredit.lua';
CREATE PROCEDURE ReportQuotaUsage PARTITION ON TABLE user_table COLUMN userid PARAMETER 0
  FROM FILE 'procedures/ReportQuotaUsage.lua';

-- Value at risk: units reserved per product and what they are worth.
CREATE PROCEDURE showCurrentAllocations AS
  SELECT p.productid AS productid, p.productname AS productname,
         SUM(a.allocated_units) AS allocated_units,
         SUM(a.allocated_units * p.unit_cost) AS value_at_risk
    FROM product_table p, allocated_by_product a
   WHERE p.productid = a.productid
   GROUP BY p.productid, p.productname
   ORDER BY productid;

-- All the money users hold.
CREATE PROCEDURE getTotalBalance AS
  SELECT SUM(balance) AS balance, SUM(how_many) AS users FROM total_balances;

-- A user's recent transactions.
CREATE PROCEDURE showTransactions PARTITION ON TABLE user_recent_transactions COLUMN userid PARAMETER 0 AS
  SELECT * FROM user_recent_transactions WHERE userid = ? ORDER BY txn_time, user_txn_id;
