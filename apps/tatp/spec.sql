-- TATP by the specification (IBM/Solid TATP v1.0), for lockstep bench: run after ddl.sql,
-- it replaces four of the kit's procedures with the spec's rules under the same names.
--   LoadSubscriber: s_id 1..P population, 1-4 access_info and special_facility rows of
--     types 1..4, 0-3 call_forwarding rows each (the kit's loader draws types 0..3).
--   InsertCallForwarding (and its every-partition form): uses the sf_type it is given and
--     answers 0 for a missing facility or an existing row (the kit replaces a row of the
--     subscriber's lowest facility type).
--   DeleteCallForwardingMultiPartition: returns rows deleted (the kit returns the lookup).
-- Load it after ddl.sql with: lockstep sql -f apps/tatp/spec.sql
CREATE OR REPLACE PROCEDURE LoadSubscriber PARTITION ON TABLE subscriber COLUMN s_id PARAMETER 0
  FROM FILE 'spec/LoadSubscriber.lua';
CREATE OR REPLACE PROCEDURE InsertCallForwarding PARTITION ON TABLE subscriber COLUMN s_id PARAMETER 0
  FROM FILE 'spec/InsertCallForwarding.lua';
CREATE OR REPLACE PROCEDURE InsertCallForwardingMultiPartition PARTITION ON TABLE subscriber COLUMN s_id PARAMETER 0
  FROM FILE 'spec/InsertCallForwardingMultiPartition.lua';
CREATE OR REPLACE PROCEDURE DeleteCallForwardingMultiPartition PARTITION ON TABLE subscriber COLUMN s_id PARAMETER 0
  FROM FILE 'spec/DeleteCallForwardingMultiPartition.lua';
