-- TATP (Telecom Application Transaction Processing): an HLR subscriber registry, with the
-- tables and procedures of VoltDB's TATP kit (voltdb-tatpbenchmark). Each procedures/X.lua
-- answers as the kit's Java class X does (apps/README.md). lockstep bench adds spec.sql,
-- which swaps in the TATP specification's own loader and call-forwarding rules.
-- Load it with: lockstep sql -f apps/tatp/ddl.sql

CREATE TABLE subscriber (
  s_id BIGINT NOT NULL,
  sub_nbr VARCHAR(15) NOT NULL,
  bit_1 TINYINT, bit_2 TINYINT, bit_3 TINYINT, bit_4 TINYINT, bit_5 TINYINT,
  bit_6 TINYINT, bit_7 TINYINT, bit_8 TINYINT, bit_9 TINYINT, bit_10 TINYINT,
  hex_1 TINYINT, hex_2 TINYINT, hex_3 TINYINT, hex_4 TINYINT, hex_5 TINYINT,
  hex_6 TINYINT, hex_7 TINYINT, hex_8 TINYINT, hex_9 TINYINT, hex_10 TINYINT,
  byte2_1 SMALLINT, byte2_2 SMALLINT, byte2_3 SMALLINT, byte2_4 SMALLINT, byte2_5 SMALLINT,
  byte2_6 SMALLINT, byte2_7 SMALLINT, byte2_8 SMALLINT, byte2_9 SMALLINT, byte2_10 SMALLINT,
  msc_location BIGINT,
  vlr_location BIGINT,
  PRIMARY KEY (s_id)
);
PARTITION TABLE subscriber ON COLUMN s_id;
-- sub_nbr is unique, but the data is partitioned on s_id: uniqueness holds per partition
-- (VoltDB's ASSUMEUNIQUE), which the loader guarantees globally.
CREATE ASSUMEUNIQUE INDEX sub_idx ON subscriber (sub_nbr);

-- sub_nbr → s_id as a table partitioned on sub_nbr: VoltDB's kit fills it while loading
-- (SUBSCRIBER_NBR_MAP.insert) and reads it in its cached-answer and compound modes.
CREATE TABLE subscriber_nbr_map (
  sub_nbr VARCHAR(15) NOT NULL,
  s_id BIGINT NOT NULL,
  PRIMARY KEY (sub_nbr)
);
PARTITION TABLE subscriber_nbr_map ON COLUMN sub_nbr;
CREATE ASSUMEUNIQUE INDEX subscriber_nbr_map_ix1 ON subscriber_nbr_map (s_id);

CREATE TABLE access_info (
  s_id BIGINT NOT NULL,
  ai_type TINYINT NOT NULL,
  data1 SMALLINT,
  data2 SMALLINT,
  data3 VARCHAR(3),
  data4 VARCHAR(5),
  PRIMARY KEY (s_id, ai_type)
);
PARTITION TABLE access_info ON COLUMN s_id;

CREATE TABLE special_facility (
  s_id BIGINT NOT NULL,
  sf_type TINYINT NOT NULL,
  is_active TINYINT NOT NULL,
  error_cntrl SMALLINT,
  data_a SMALLINT,
  data_b VARCHAR(5),
  PRIMARY KEY (s_id, sf_type)
);
PARTITION TABLE special_facility ON COLUMN s_id;

CREATE TABLE call_forwarding (
  s_id BIGINT NOT NULL,
  sf_type TINYINT NOT NULL,
  start_time TINYINT NOT NULL,
  end_time TINYINT,
  numberx VARCHAR(15),
  PRIMARY KEY (s_id, sf_type, start_time)
);
PARTITION TABLE call_forwarding ON COLUMN s_id;

-- Population: one subscriber and its children per call.
CREATE PROCEDURE LoadSubscriber PARTITION ON TABLE subscriber COLUMN s_id PARAMETER 0
  FROM FILE 'procedures/LoadSubscriber.lua';
CREATE PROCEDURE Reset FROM FILE 'procedures/Reset.lua';

-- The seven transactions (single-partition on s_id).
CREATE PROCEDURE GetSubscriberData PARTITION ON TABLE subscriber COLUMN s_id PARAMETER 0 AS
  SELECT * FROM subscriber WHERE s_id = ?;
CREATE PROCEDURE GetNewDestination PARTITION ON TABLE subscriber COLUMN s_id PARAMETER 0 AS
  SELECT cf.numberx FROM special_facility sf, call_forwarding cf
   WHERE sf.s_id = ? AND sf.sf_type = ? AND sf.is_active = 1
     AND cf.s_id = sf.s_id AND cf.sf_type = sf.sf_type
     AND cf.start_time <= ? AND ? < cf.end_time;
CREATE PROCEDURE GetAccessData PARTITION ON TABLE subscriber COLUMN s_id PARAMETER 0 AS
  SELECT data1, data2, data3, data4 FROM access_info WHERE s_id = ? AND ai_type = ?;
CREATE PROCEDURE UpdateSubscriberData PARTITION ON TABLE subscriber COLUMN s_id PARAMETER 0
  FROM FILE 'procedures/UpdateSubscriberData.lua';
CREATE PROCEDURE UpdateLocation PARTITION ON TABLE subscriber COLUMN s_id PARAMETER 0
  FROM FILE 'procedures/UpdateLocation.lua';
CREATE PROCEDURE InsertCallForwarding PARTITION ON TABLE subscriber COLUMN s_id PARAMETER 0
  FROM FILE 'procedures/InsertCallForwarding.lua';
CREATE PROCEDURE DeleteCallForwarding PARTITION ON TABLE subscriber COLUMN s_id PARAMETER 0 AS
  DELETE FROM call_forwarding WHERE s_id = ? AND sf_type = ? AND start_time = ?;
-- UPDATE_SUBSCRIBER_NBR: a new number, moved in subscriber_nbr_map too (multi-partition).
CREATE PROCEDURE UpdateSubNbr FROM FILE 'procedures/UpdateSubNbr.lua';

-- sub_nbr → s_id, three ways (--fk-mode):
-- multi-query-first: one read-consistent multi-partition lookup, then the SP write.
CREATE PROCEDURE MapSubStringToNumberNoView AS
  SELECT s_id FROM subscriber WHERE sub_nbr = ? ORDER BY s_id;
-- all-partitions-first: the lookup run on every partition, then the SP write.
CREATE PROCEDURE MapSubStringToNumberAllPartitions PARTITION ON TABLE subscriber COLUMN s_id PARAMETER 0
  FROM FILE 'procedures/MapSubStringToNumberAllPartitions.lua';
-- all-partitions-tasked: every partition does the write itself if it holds the subscriber.
CREATE PROCEDURE UpdateLocationMultiPartition PARTITION ON TABLE subscriber COLUMN s_id PARAMETER 0
  FROM FILE 'procedures/UpdateLocationMultiPartition.lua';
CREATE PROCEDURE InsertCallForwardingMultiPartition PARTITION ON TABLE subscriber COLUMN s_id PARAMETER 0
  FROM FILE 'procedures/InsertCallForwardingMultiPartition.lua';
CREATE PROCEDURE DeleteCallForwardingMultiPartition PARTITION ON TABLE subscriber COLUMN s_id PARAMETER 0
  FROM FILE 'procedures/DeleteCallForwardingMultiPartition.lua';

-- The kit's compound procedures (its fk mode 4): each file declares itself compound, so
-- it runs as a chain of single-partition calls (the subscriber_nbr_map lookup, then the
-- write), not as a transaction (answers 0, or -1 for an unknown number).
CREATE PROCEDURE UpdateLocationCompound FROM FILE 'procedures/UpdateLocationCompound.lua';
CREATE PROCEDURE InsertCallForwardingCompound FROM FILE 'procedures/InsertCallForwardingCompound.lua';
CREATE PROCEDURE DeleteCallForwardingCompound FROM FILE 'procedures/DeleteCallForwardingCompound.lua';
