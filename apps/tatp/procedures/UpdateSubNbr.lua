-- UpdateSubNbr(s_id, new_sub_nbr): gives a subscriber a new number and moves its
-- subscriber_nbr_map entry, in one transaction; aborts (rolling all back) unless each step
-- changes exactly one row, as the kit's EXPECT_ONE_ROW does. Returns rows changed per step.
-- Multi-partition: subscriber_nbr_map is partitioned on sub_nbr, not s_id.
local set_nbr = sql [[UPDATE subscriber SET sub_nbr = ? WHERE s_id = ?]]
local del_map = sql [[DELETE FROM subscriber_nbr_map WHERE s_id = ?]]
local add_map = sql [[INSERT INTO subscriber_nbr_map (sub_nbr, s_id) VALUES (?, ?)]]

return function(s_id, new_sub_nbr)
  local a = set_nbr:exec(new_sub_nbr, s_id)
  if a ~= 1 then abort("UpdateSubNbr: subscriber " .. tostring(s_id) .. " not found") end
  local b = del_map:exec(s_id)
  if b ~= 1 then abort("UpdateSubNbr: no subscriber_nbr_map entry for " .. tostring(s_id)) end
  local c = add_map:exec(new_sub_nbr, s_id)
  return a, b, c
end
