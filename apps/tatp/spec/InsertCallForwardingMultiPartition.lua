-- The TATP specification's version, which lockstep bench binds under the kit's name
-- (apps/tatp/spec.sql); the kit's own is procedures/InsertCallForwardingMultiPartition.lua.
-- InsertCallForwardingMultiPartition(partition_key, sub_nbr, bit1, data_a, sf_type): finds
-- the subscriber with sub_nbr in this partition and, if found, does what
-- InsertCallForwarding does. Returns rows inserted (0 or 1). Run on every partition.
local find = sql [[SELECT s_id FROM subscriber WHERE sub_nbr = ?]]
local facility = sql [[SELECT sf_type FROM special_facility WHERE s_id = ? AND sf_type = ?]]
local existing = sql [[SELECT start_time FROM call_forwarding WHERE s_id = ? AND sf_type = ? AND start_time = ?]]
local insert = sql [[INSERT INTO call_forwarding VALUES (?, ?, ?, ?, ?)]]
local START_TIMES = { 0, 8, 16 }

return function(partition_key, sub_nbr, bit1, data_a, sf_type)
  local sub = find:first(sub_nbr)
  if not sub then return 0 end
  local start_time = START_TIMES[ctx.random(3)]
  local end_time = ctx.random(24)
  local t = {}
  for i = 1, 15 do t[i] = string.char(47 + ctx.random(10)) end
  if not facility:first(sub.s_id, sf_type) then return 0 end
  if existing:first(sub.s_id, sf_type, start_time) then return 0 end
  return insert:exec(sub.s_id, sf_type, start_time, end_time, table.concat(t))
end
