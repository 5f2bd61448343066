-- GetAccessData(s_id, ai_type): the access_info row (0 or 1 row). The kit's FROM CLASS
-- binding of the SQL procedure in ddl.sql. Single-partition on s_id.
local select_ai = sql [[SELECT data1, data2, data3, data4 FROM access_info WHERE s_id = ? AND ai_type = ?]]

return function(s_id, ai_type)
  return select_ai:query(s_id, ai_type)
end
