-- The TATP specification's version, which lockstep bench binds under the kit's name
-- (apps/tatp/spec.sql); the kit's own is procedures/InsertCallForwarding.lua.
-- InsertCallForwarding(s_id, bit1, data_a, sf_type): the TATP spec's INSERT_CALL_FORWARDING
-- under the VoltDB kit's name and parameter list. It reads the subscriber's facility types,
-- then inserts call_forwarding (s_id, sf_type, start_time, end_time, numberx) with
-- start_time from {0, 8, 16}, end_time 1..24 and numberx 15 digits, drawn from ctx.random.
-- The spec's acceptable failures are answered, not raised: no facility sf_type (the foreign
-- key) or an existing row with that key (the primary key) returns 0. Returns the rows
-- inserted (0 or 1). bit1 and data_a are unused, as in the kit. Single-partition on s_id.
local facility_types = sql [[SELECT sf_type FROM special_facility WHERE s_id = ? ORDER BY sf_type]]
local existing = sql [[SELECT start_time FROM call_forwarding WHERE s_id = ? AND sf_type = ? AND start_time = ?]]
local insert = sql [[INSERT INTO call_forwarding VALUES (?, ?, ?, ?, ?)]]
local START_TIMES = { 0, 8, 16 }

return function(s_id, bit1, data_a, sf_type)
  local start_time = START_TIMES[ctx.random(3)]
  local end_time = ctx.random(24)
  local t = {}
  for i = 1, 15 do t[i] = string.char(47 + ctx.random(10)) end
  local numberx = table.concat(t)
  local has_type = false
  for row in facility_types:query(s_id):rows() do
    if row.sf_type == sf_type then has_type = true end
  end
  if not has_type then return 0 end
  if existing:first(s_id, sf_type, start_time) then return 0 end
  return insert:exec(s_id, sf_type, start_time, end_time, numberx)
end
