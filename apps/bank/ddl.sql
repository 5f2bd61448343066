-- Bank: accounts partitioned by id, and money moved between any two of them. A transfer
-- between accounts on different partitions is a multi-partition transaction that writes
-- two partitions atomically; the benchmark's check is that no money was made or lost and
-- no balance went below zero (no double spend).

CREATE TABLE account (
  id      BIGINT NOT NULL,
  balance BIGINT NOT NULL,
  CONSTRAINT PK_account PRIMARY KEY (id)
);
PARTITION TABLE account ON COLUMN id;

CREATE PROCEDURE Transfer FROM FILE 'procedures/Transfer.lua';
