-- DeleteCallForwarding(s_id, sf_type, start_time): deletes one call_forwarding row; returns
-- rows deleted (0 or 1). The kit's FROM CLASS binding of the SQL procedure in ddl.sql.
-- Single-partition on s_id.
local delete = sql [[DELETE FROM call_forwarding WHERE s_id = ? AND sf_type = ? AND start_time = ?]]

return function(s_id, sf_type, start_time)
  return delete:exec(s_id, sf_type, start_time)
end
