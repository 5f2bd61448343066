-- InsertCallForwardingCompound(sub_nbr, bit1, data_a, sf_type): the kit's compound procedure
-- (subscriber_nbr_map lookup, then InsertCallForwarding's work) as one multi-partition
-- transaction. Returns 0 when done (inserted or an acceptable FK/PK miss), -1 when the
-- number is unknown.
local find = sql [[SELECT s_id FROM subscriber_nbr_map WHERE sub_nbr = ?]]
local facility = sql [[SELECT sf_type FROM special_facility WHERE s_id = ? AND sf_type = ?]]
local existing = sql [[SELECT start_time FROM call_forwarding WHERE s_id = ? AND sf_type = ? AND start_time = ?]]
local insert = sql [[INSERT INTO call_forwarding VALUES (?, ?, ?, ?, ?)]]
local START_TIMES = { 0, 8, 16 }

return function(sub_nbr, bit1, data_a, sf_type)
  local row = find:first(sub_nbr)
  if not row then return -1 end
  local start_time = START_TIMES[ctx.random(3)]
  local end_time = ctx.random(24)
  local t = {}
  for i = 1, 15 do t[i] = string.char(47 + ctx.random(10)) end
  if facility:first(row.s_id, sf_type) and not existing:first(row.s_id, sf_type, start_time) then
    insert:exec(row.s_id, sf_type, start_time, end_time, table.concat(t))
  end
  return 0
end
