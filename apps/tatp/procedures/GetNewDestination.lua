-- GetNewDestination(s_id, sf_type, start_time, end_time): the forwarding numbers of an
-- active facility whose window covers the times. The kit's FROM CLASS binding of the SQL
-- procedure in ddl.sql. Single-partition on s_id.
local select_dest = sql [[SELECT cf.numberx FROM special_facility sf, call_forwarding cf
  WHERE sf.s_id = ? AND sf.sf_type = ? AND sf.is_active = 1
    AND cf.s_id = sf.s_id AND cf.sf_type = sf.sf_type
    AND cf.start_time <= ? AND ? < cf.end_time]]

return function(s_id, sf_type, start_time, end_time)
  return select_dest:query(s_id, sf_type, start_time, end_time)
end
