-- DeleteCallForwardingMultiPartition(partition_key, sub_nbr, sf_type, start_time): the
-- VoltDB TATP kit's "tasked" delete, run on every partition (callAllPartitionProcedure).
-- Looks the subscriber up (HOW_MANY = 1, S_ID) and, on the partition that holds it,
-- deletes its call_forwarding row (sf_type, start_time). Returns the lookup, not the rows
-- deleted, as the kit does: the kit's client adds up the first column of every
-- partition's last table and expects exactly 1. More than one subscriber with the number
-- on a partition aborts the call (the kit's EXPECT_ZERO_OR_ONE_ROW).
local find = sql [[SELECT 1 AS how_many, s_id FROM subscriber WHERE sub_nbr = ? ORDER BY s_id]]
local delete = sql [[DELETE FROM call_forwarding WHERE s_id = ? AND sf_type = ? AND start_time = ?]]

return function(partition_key, sub_nbr, sf_type, start_time)
  local found = find:query(sub_nbr)
  if #found > 1 then
    abort("DeleteCallForwardingMultiPartition: " .. #found .. " subscribers have number " .. sub_nbr .. ", expected zero or one")
  end
  if #found == 1 then
    delete:exec(found[1].s_id, sf_type, start_time)
  end
  return found
end
