-- The TATP specification's version, which lockstep bench binds under the kit's name
-- (apps/tatp/spec.sql); the kit's own is procedures/DeleteCallForwardingMultiPartition.lua.
-- DeleteCallForwardingMultiPartition(partition_key, sub_nbr, sf_type, start_time): finds the
-- subscriber with sub_nbr in this partition and, if found, deletes its call_forwarding row
-- (sf_type, start_time). Returns rows deleted (0 or 1; VoltDB's kit returns the lookup).
-- Run on every partition.
local find = sql [[SELECT s_id FROM subscriber WHERE sub_nbr = ?]]
local delete = sql [[DELETE FROM call_forwarding WHERE s_id = ? AND sf_type = ? AND start_time = ?]]

return function(partition_key, sub_nbr, sf_type, start_time)
  local sub = find:first(sub_nbr)
  if not sub then return 0 end
  return delete:exec(sub.s_id, sf_type, start_time)
end
