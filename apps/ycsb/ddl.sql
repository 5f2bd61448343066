-- YCSB: the key-value table of the VoltDB YCSB binding, in VoltDB's DDL dialect.
-- Load it with: lockstep sql -f apps/ycsb/ddl.sql

-- One row per (key, keyspace); value is the packed field map (~1 KB for YCSB's defaults).
CREATE TABLE Store (
  keyspace VARBINARY(128)  NOT NULL,
  key      VARCHAR(128)    NOT NULL,
  value    VARBINARY(2056) NOT NULL,
  PRIMARY KEY (key, keyspace)
);
PARTITION TABLE Store ON COLUMN key;

-- Get(keyspace, key): the packed value, 0 or 1 row.
CREATE PROCEDURE Get PARTITION ON TABLE Store COLUMN key PARAMETER 1 AS
  SELECT value FROM Store WHERE keyspace = ? AND key = ?;

-- Put(keyspace, key, data): insert, or merge the fields of data into the stored record.
CREATE PROCEDURE Put PARTITION ON TABLE Store COLUMN key PARAMETER 1
  FROM FILE 'procedures/Put.lua';

-- Scan(partition_key, keyspace, range_min, count): one partition's keys >= range_min, in
-- key order; called on every partition (callAllPartitionProcedure) and merged by the client.
CREATE PROCEDURE Scan PARTITION ON TABLE Store COLUMN key PARAMETER 0
  FROM FILE 'procedures/Scan.lua';

-- ScanAll(keyspace, range_min, count): the same scan as one read-consistent
-- multi-partition transaction.
CREATE PROCEDURE ScanAll FROM FILE 'procedures/ScanAll.lua';
