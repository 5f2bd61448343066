-- DeleteCallForwarding(s_id, sf_type, start_time): deletes one call_forwarding row and
-- returns the statement's count table (0 or 1), as the VoltDB TATP kit's class does.
-- Single-partition on s_id.
local delete = sql [[DELETE FROM call_forwarding WHERE s_id = ? AND sf_type = ? AND start_time = ?]]

return function(s_id, sf_type, start_time)
  return delete:query(s_id, sf_type, start_time)
end
