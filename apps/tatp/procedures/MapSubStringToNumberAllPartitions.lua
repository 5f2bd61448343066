-- MapSubStringToNumberAllPartitions(partition_key, sub_nbr): the s_id of sub_nbr if this
-- partition holds it (0 or 1 row, column S_ID). Run on every partition; partition_key is
-- ignored.
local find = sql [[SELECT s_id FROM subscriber WHERE sub_nbr = ? ORDER BY s_id]]

return function(partition_key, sub_nbr)
  return find:query(sub_nbr)
end
