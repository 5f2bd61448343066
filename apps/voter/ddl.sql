-- Voter: a TV talent-show vote (VoltDB's classic example), in VoltDB's DDL dialect.
-- Load it with: lockstep sql -f apps/voter/ddl.sql

-- Contestants and area codes are small and read everywhere: replicated.
CREATE TABLE contestants (
  contestant_number INTEGER     NOT NULL,
  contestant_name   VARCHAR(50) NOT NULL,
  CONSTRAINT PK_contestants PRIMARY KEY (contestant_number)
);

CREATE TABLE area_code_state (
  area_code SMALLINT   NOT NULL,
  state     VARCHAR(2) NOT NULL,
  CONSTRAINT PK_area_code_state PRIMARY KEY (area_code)
);

-- Votes are partitioned by phone number, so one phone's votes live on one partition.
CREATE TABLE votes (
  phone_number      BIGINT     NOT NULL,
  state             VARCHAR(2) NOT NULL,
  contestant_number INTEGER    NOT NULL
);
PARTITION TABLE votes ON COLUMN phone_number;

-- Votes per phone number, kept up to date inside each Vote transaction.
CREATE VIEW v_votes_by_phone_number (phone_number, num_votes) AS
  SELECT phone_number, COUNT(*) FROM votes GROUP BY phone_number;

-- Votes per contestant and state, for the results.
CREATE VIEW v_votes_by_contestant_number_state (contestant_number, state, num_votes) AS
  SELECT contestant_number, state, COUNT(*) FROM votes GROUP BY contestant_number, state;

CREATE PROCEDURE Vote PARTITION ON TABLE votes COLUMN phone_number PARAMETER 0
  FROM FILE 'procedures/Vote.lua';
CREATE PROCEDURE Initialize FROM FILE 'procedures/Initialize.lua';
-- The example's reports: totals, a contestant's winning states, the live map's data.
CREATE PROCEDURE Results FROM FILE 'procedures/Results.lua';
CREATE PROCEDURE ContestantWinningStates FROM FILE 'procedures/ContestantWinningStates.lua';
CREATE PROCEDURE GetStateHeatmap FROM FILE 'procedures/GetStateHeatmap.lua';
