-- InsertCallForwardingMultiPartition(partition_key, sub_nbr, bit1, data_a, sf_type): the
-- VoltDB TATP kit's "tasked" insert, run on every partition (callAllPartitionProcedure).
-- The partition that holds sub_nbr does what the kit's InsertCallForwarding does: take the
-- subscriber's lowest facility type (sf_type is ignored), delete the call_forwarding row of
-- that type at a start time from {0, 8, 16}, insert a new one (end_time start + 1..24,
-- numberx 15 letters), and return the two count tables (deleted, inserted). A partition
-- without the subscriber, or a subscriber without a facility, returns no table.
local find = sql [[SELECT s_id FROM subscriber WHERE sub_nbr = ? ORDER BY s_id]]
local facility_types = sql [[SELECT s_id, sf_type FROM special_facility WHERE s_id = ? ORDER BY sf_type]]
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

return function(partition_key, sub_nbr, bit1, data_a, sf_type)
  local s_id = find:values(sub_nbr)
  if s_id == nil then
    return
  end
  local _, lowest = facility_types:values(s_id)
  if lowest == nil then
    return
  end
  local start_time = START_BY_DRAW[ctx.random(0, 3)]
  local end_time = start_time + 1 + ctx.random(0, 23)
  return batch(delete:bind(s_id, lowest, start_time), insert:bind(s_id, lowest, start_time, end_time, letters(15)))
end
