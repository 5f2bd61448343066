-- MapSubStringToNumberNoView(sub_nbr): the s_id of sub_nbr, read across every partition in
-- one multi-partition transaction. The kit's FROM CLASS binding of the SQL procedure in
-- ddl.sql.
local find = sql [[SELECT s_id FROM subscriber WHERE sub_nbr = ? ORDER BY s_id]]

return function(sub_nbr)
  return find:query(sub_nbr)
end
