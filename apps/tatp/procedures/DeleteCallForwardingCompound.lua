-- DeleteCallForwardingCompound(sub_nbr, sf_type, start_time): the kit's compound procedure
-- (subscriber_nbr_map lookup, then DeleteCallForwarding) as one multi-partition
-- transaction. Returns 0 when done, -1 when the number is unknown.
local find = sql [[SELECT s_id FROM subscriber_nbr_map WHERE sub_nbr = ?]]
local delete = sql [[DELETE FROM call_forwarding WHERE s_id = ? AND sf_type = ? AND start_time = ?]]

return function(sub_nbr, sf_type, start_time)
  local row = find:first(sub_nbr)
  if not row then return -1 end
  delete:exec(row.s_id, sf_type, start_time)
  return 0
end
