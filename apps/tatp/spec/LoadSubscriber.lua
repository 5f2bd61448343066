-- The TATP specification's version, which lockstep bench binds under the kit's name
-- (apps/tatp/spec.sql); the kit's own is procedures/LoadSubscriber.lua.
-- LoadSubscriber(s_id, sub_nbr, bit_1..bit_10, hex_1..hex_10, byte2_1..byte2_10,
-- msc_location, vlr_location, random_seed): inserts one subscriber and, by the TATP
-- population rules, its children: 1-4 access_info rows and 1-4 special_facility rows (each
-- count 25%, distinct types from 1..4), and 0-3 call_forwarding rows per facility (distinct
-- start times from {0, 8, 16}, end_time = start + 1..8). Random choices come from ctx.random
-- (deterministic per transaction); random_seed is accepted for VoltDB compatibility and
-- unused. Returns the number of rows inserted. Single-partition on s_id.
local insert_sub = sql [[INSERT INTO subscriber VALUES (?, ?,
  ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,  ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,  ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,  ?, ?)]]
local insert_ai = sql [[INSERT INTO access_info VALUES (?, ?, ?, ?, ?, ?)]]
local insert_sf = sql [[INSERT INTO special_facility VALUES (?, ?, ?, ?, ?, ?)]]
local insert_cf = sql [[INSERT INTO call_forwarding VALUES (?, ?, ?, ?, ?)]]

local function letters(n)
  local t = {}
  for i = 1, n do t[i] = string.char(64 + ctx.random(26)) end
  return table.concat(t)
end

local function digits(n)
  local t = {}
  for i = 1, n do t[i] = string.char(47 + ctx.random(10)) end
  return table.concat(t)
end

-- The first k of a random permutation of values.
local function pick_distinct(values, k)
  local v = { table.unpack(values) }
  for i = #v, 2, -1 do
    local j = ctx.random(i)
    v[i], v[j] = v[j], v[i]
  end
  local out = {}
  for i = 1, k do out[i] = v[i] end
  return out
end

return function(...)
  local a = { ... }
  if #a < 34 then abort("LoadSubscriber takes 35 parameters, got " .. #a) end
  local s_id = a[1]
  local rows = insert_sub:exec(table.unpack(a, 1, 34))
  local types = { 1, 2, 3, 4 }
  for _, t in ipairs(pick_distinct(types, ctx.random(4))) do
    rows = rows + insert_ai:exec(s_id, t, ctx.random(0, 255), ctx.random(0, 255), letters(3), letters(5))
  end
  for _, t in ipairs(pick_distinct(types, ctx.random(4))) do
    local active = 0
    if ctx.random() < 0.85 then active = 1 end
    rows = rows + insert_sf:exec(s_id, t, active, ctx.random(0, 255), ctx.random(0, 255), letters(5))
    for _, start in ipairs(pick_distinct({ 0, 8, 16 }, ctx.random(0, 3))) do
      rows = rows + insert_cf:exec(s_id, t, start, start + ctx.random(8), digits(15))
    end
  end
  return rows
end
