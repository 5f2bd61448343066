-- UpdateSubNbr(s_id, new_sub_nbr): gives a subscriber a new number and moves its
-- subscriber_nbr_map entry, in one transaction. Returns the three statements' count
-- tables. As in the VoltDB TATP kit, an unknown s_id is not an error (its EXPECT_ONE_ROW
-- checks the one-row count table of each statement, which always has one row): the
-- counts are then 0, 0, 1. A new number that is already mapped fails the call with a
-- constraint violation, and nothing changes. Multi-partition: subscriber_nbr_map is
-- partitioned on sub_nbr, not s_id.
local set_nbr = sql [[UPDATE subscriber SET sub_nbr = ? WHERE s_id = ?]]
local del_map = sql [[DELETE FROM subscriber_nbr_map WHERE s_id = ?]]
local add_map = sql [[INSERT INTO subscriber_nbr_map (sub_nbr, s_id) VALUES (?, ?)]]

return function(s_id, new_sub_nbr)
  return batch(set_nbr:bind(new_sub_nbr, s_id), del_map:bind(s_id), add_map:bind(new_sub_nbr, s_id))
end
