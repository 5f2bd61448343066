-- LoadSubscriber(s_id, sub_nbr, bit_1..bit_10, hex_1..hex_10, byte2_1..byte2_10,
-- msc_location, vlr_location, random_seed): the VoltDB TATP kit's loader, row for row.
-- Inserts the subscriber, then draws its children from java.util.Random seeded with
-- random_seed, exactly as the kit does, so the same call makes the same rows:
--   for each type 0..3, one time in four, an access_info row (data1, data2 in 0..255,
--   data3 3 letters, data4 5 letters);
--   for each type 0..3, one time in four, a special_facility row (is_active 1 with odds
--   85/100, error_cntrl and data_a in 0..255, data_b 5 letters) and 0..2 call_forwarding
--   rows (start_time 0 then 8, end_time start + 1..8, numberx 15 digits).
-- Like the kit, the byte2_* parameters are not stored: the columns get 21, 22, … 29, 210
-- (the kit's statement passes the Java literals 2_1 … 2_10). Returns one count table per
-- row inserted, subscriber first. Single-partition on s_id.
local insert_sub = sql [[INSERT INTO subscriber (s_id, sub_nbr,
  bit_1, bit_2, bit_3, bit_4, bit_5, bit_6, bit_7, bit_8, bit_9, bit_10,
  hex_1, hex_2, hex_3, hex_4, hex_5, hex_6, hex_7, hex_8, hex_9, hex_10,
  byte2_1, byte2_2, byte2_3, byte2_4, byte2_5, byte2_6, byte2_7, byte2_8, byte2_9, byte2_10,
  msc_location, vlr_location)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
          ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)]]
local insert_ai = sql [[INSERT INTO access_info (s_id, ai_type, data1, data2, data3, data4) VALUES (?, ?, ?, ?, ?, ?)]]
local insert_sf = sql [[INSERT INTO special_facility (s_id, sf_type, is_active, error_cntrl, data_a, data_b) VALUES (?, ?, ?, ?, ?, ?)]]
local insert_cf = sql [[INSERT INTO call_forwarding (s_id, sf_type, start_time, end_time, numberx) VALUES (?, ?, ?, ?, ?)]]

local LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
local DIGITS = "0123456789"
-- What the kit's statement stores in byte2_1..byte2_10.
local BYTE2 = { 21, 22, 23, 24, 25, 26, 27, 28, 29, 210 }
local PARAMS = 35

-- java.util.Random: a 48-bit linear congruential generator (the constants are Java's
-- documented ones). Lua integers wrap at 64 bits, which keeps the low 48 bits exact.
local MULTIPLIER, ADDEND, MASK = 0x5DEECE66D, 0xB, (1 << 48) - 1
local INT31 = 1 << 31

local function java_random(seed)
  return { seed = (seed ~ MULTIPLIER) & MASK }
end

-- The next `bits` random bits (bits <= 31, so never negative).
local function next_bits(r, bits)
  r.seed = (r.seed * MULTIPLIER + ADDEND) & MASK
  return r.seed >> (48 - bits)
end

-- Random.nextInt(bound): uniform in 0..bound-1, with Java's rejection of the biased tail.
local function next_int(r, bound)
  local bits = next_bits(r, 31)
  if bound & (bound - 1) == 0 then
    return (bound * bits) >> 31
  end
  local value = bits % bound
  -- Java rejects a draw when bits - value + bound - 1 overflows a 32-bit int.
  while bits - value + bound - 1 >= INT31 do
    bits = next_bits(r, 31)
    value = bits % bound
  end
  return value
end

local function rand_string(r, alphabet, n)
  local t = {}
  for i = 1, n do
    local k = next_int(r, #alphabet) + 1
    t[i] = alphabet:sub(k, k)
  end
  return table.concat(t)
end

return function(...)
  local a = { ... }
  if select("#", ...) ~= PARAMS then
    abort("LoadSubscriber takes " .. PARAMS .. " parameters, got " .. select("#", ...))
  end
  local s_id = a[1]
  local row = { table.unpack(a, 1, 22) }
  for i = 1, 10 do row[22 + i] = BYTE2[i] end
  row[33], row[34] = a[33], a[34]
  local queued = { insert_sub:bind(table.unpack(row, 1, 34)) }
  local r = java_random(a[35])
  for ai_type = 0, 3 do
    if next_int(r, 4) == 0 then
      local d1 = next_int(r, 256)
      local d2 = next_int(r, 256)
      local d3 = rand_string(r, LETTERS, 3)
      queued[#queued + 1] = insert_ai:bind(s_id, ai_type, d1, d2, d3, rand_string(r, LETTERS, 5))
    end
  end
  for sf_type = 0, 3 do
    if next_int(r, 4) == 0 then
      local active = next_int(r, 100) < 85 and 1 or 0
      local error_cntrl = next_int(r, 256)
      local data_a = next_int(r, 256)
      queued[#queued + 1] = insert_sf:bind(s_id, sf_type, active, error_cntrl, data_a, rand_string(r, LETTERS, 5))
      for j = 0, next_int(r, 3) - 1 do
        local start_time = (j == 1 and 8) or (j == 2 and 16) or 0
        local end_time = start_time + 1 + next_int(r, 8)
        queued[#queued + 1] = insert_cf:bind(s_id, sf_type, start_time, end_time, rand_string(r, DIGITS, 15))
      end
    end
  end
  return batch(queued)
end
