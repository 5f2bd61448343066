-- InsertCallForwarding(s_id, bit1, data_a, sf_type): the VoltDB TATP kit's version, which
-- differs from the TATP spec: it ignores bit1, data_a and sf_type, takes the subscriber's
-- lowest facility type, and replaces the call_forwarding row of that type at a start time
-- drawn from {0, 8, 16} (0 half the time), with end_time start + 1..24 and numberx 15
-- letters. Returns two count tables (deleted 0 or 1, inserted 1), or no table at all when
-- the subscriber has no facility. Single-partition on s_id.
local facility_types = sql [[SELECT sf_type FROM special_facility WHERE s_id = ? ORDER BY sf_type]]
local delete = sql [[DELETE FROM call_forwarding WHERE s_id = ? AND sf_type = ? AND start_time = ?]]
local insert = sql [[INSERT INTO call_forwarding (s_id, sf_type, start_time, end_time, numberx) VALUES (?, ?, ?, ?, ?)]]

local LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
-- The kit draws one of four: 1 → 8, 2 → 16, 0 and 3 → 0.
local START_BY_DRAW = { [0] = 0, 8, 16, 0 }

local function letters(n)
  local t = {}
  for i = 1, n do
    local k = ctx.random(#LETTERS)
    t[i] = LETTERS:sub(k, k)
  end
  return table.concat(t)
end

return function(s_id, bit1, data_a, sf_type)
  local lowest = facility_types:values(s_id)
  if lowest == nil then
    return
  end
  local start_time = START_BY_DRAW[ctx.random(0, 3)]
  local end_time = start_time + 1 + ctx.random(0, 23)
  return batch(delete:bind(s_id, lowest, start_time), insert:bind(s_id, lowest, start_time, end_time, letters(15)))
end
