-- TATP for Tarantool (the side-by-side benchmark's peer): spaces for the tables of apps/tatp
-- and its procedures as global Lua functions ls_<procedure> called over IPROTO, each
-- answering an array of rows. Random choices use math.random (Lockstep's use ctx.random):
-- the same distributions, not the same draws. Evaluated on every connect: idempotent.
-- Fields: subscriber {s_id, sub_nbr, bit_1..10 (3-12), hex_1..10 (13-22), byte2_1..10
-- (23-32), msc_location (33), vlr_location (34)}; access_info {s_id, ai_type, data1..4};
-- special_facility {s_id, sf_type, is_active, error_cntrl, data_a, data_b};
-- call_forwarding {s_id, sf_type, start_time, end_time, numberx}.
local function space(name, parts)
  local s = box.schema.space.create(name, { if_not_exists = true })
  s:create_index('pk', { parts = parts, if_not_exists = true })
  return s
end
local sub = space('subscriber', { { 1, 'integer' } })
sub:create_index('sub_nbr', { parts = { { 2, 'string' } }, unique = true, if_not_exists = true })
space('access_info', { { 1, 'integer' }, { 2, 'integer' } })
space('special_facility', { { 1, 'integer' }, { 2, 'integer' } })
space('call_forwarding', { { 1, 'integer' }, { 2, 'integer' }, { 3, 'integer' } })

local function rand(lo, hi) return math.random(lo, hi) end
local function chars(n, base, span)
  local t = {}
  for i = 1, n do t[i] = string.char(base + rand(1, span)) end
  return table.concat(t)
end
-- The first k of a random permutation of values.
local function pick_distinct(values, k)
  local v = {}
  for i, x in ipairs(values) do v[i] = x end
  for i = #v, 2, -1 do
    local j = rand(1, i)
    v[i], v[j] = v[j], v[i]
  end
  local out = {}
  for i = 1, k do out[i] = v[i] end
  return out
end

function ls_loadsubscriber(...)
  local a = { ... }
  if #a < 34 then error('abort: LoadSubscriber takes 35 parameters, got ' .. #a) end
  local s_id = a[1]
  local row = {}
  for i = 1, 34 do row[i] = a[i] end
  box.begin()
  box.space.subscriber:insert(row)
  local n = 1
  for _, t in ipairs(pick_distinct({ 1, 2, 3, 4 }, rand(1, 4))) do
    box.space.access_info:insert({ s_id, t, rand(0, 255), rand(0, 255), chars(3, 64, 26), chars(5, 64, 26) })
    n = n + 1
  end
  for _, t in ipairs(pick_distinct({ 1, 2, 3, 4 }, rand(1, 4))) do
    local active = math.random() < 0.85 and 1 or 0
    box.space.special_facility:insert({ s_id, t, active, rand(0, 255), rand(0, 255), chars(5, 64, 26) })
    n = n + 1
    for _, start in ipairs(pick_distinct({ 0, 8, 16 }, rand(0, 3))) do
      box.space.call_forwarding:insert({ s_id, t, start, start + rand(1, 8), chars(15, 47, 10) })
      n = n + 1
    end
  end
  box.commit()
  return { { n } }
end

function ls_reset()
  local out = {}
  for i, name in ipairs({ 'special_facility', 'access_info', 'subscriber', 'call_forwarding' }) do
    out[i] = box.space[name]:len()
    box.space[name]:truncate()
  end
  out[5] = 0
  return { out }
end

function ls_getsubscriberdata(s_id)
  local t = box.space.subscriber:get(s_id)
  if t == nil then return {} end
  return { t }
end

function ls_getnewdestination(s_id, sf_type, start_time, end_time)
  local sf = box.space.special_facility:get({ s_id, sf_type })
  if sf == nil or sf[3] ~= 1 then return {} end
  local rows = {}
  for _, cf in box.space.call_forwarding:pairs({ s_id, sf_type }) do
    if cf[3] <= start_time and end_time < cf[4] then rows[#rows + 1] = { cf[5] } end
  end
  return rows
end

function ls_getaccessdata(s_id, ai_type)
  local t = box.space.access_info:get({ s_id, ai_type })
  if t == nil then return {} end
  return { { t[3], t[4], t[5], t[6] } }
end

function ls_updatesubscriberdata(s_id, bit_1, data_a, sf_type)
  box.begin()
  local a = box.space.subscriber:update(s_id, { { '=', 3, bit_1 } })
  local b = box.space.special_facility:update({ s_id, sf_type }, { { '=', 5, data_a } })
  box.commit()
  return { { a and 1 or 0, b and 1 or 0 } }
end

function ls_updatelocation(s_id, vlr)
  local t = box.space.subscriber:update(s_id, { { '=', 34, vlr } })
  return { { t and 1 or 0 } }
end

local function insert_cf(s_id, sf_type)
  local start_time = ({ 0, 8, 16 })[rand(1, 3)]
  local end_time = rand(1, 24)
  local numberx = chars(15, 47, 10)
  if box.space.special_facility:get({ s_id, sf_type }) == nil then return 0 end
  if box.space.call_forwarding:get({ s_id, sf_type, start_time }) ~= nil then return 0 end
  box.space.call_forwarding:insert({ s_id, sf_type, start_time, end_time, numberx })
  return 1
end

function ls_insertcallforwarding(s_id, bit1, data_a, sf_type)
  return { { insert_cf(s_id, sf_type) } }
end

function ls_deletecallforwarding(s_id, sf_type, start_time)
  local t = box.space.call_forwarding:delete({ s_id, sf_type, start_time })
  return { { t and 1 or 0 } }
end

local function find(sub_nbr)
  local t = box.space.subscriber.index.sub_nbr:get(sub_nbr)
  return t and t[1]
end

function ls_mapsubstringtonumbernoview(sub_nbr)
  local s = find(sub_nbr)
  if s == nil then return {} end
  return { { s } }
end

function ls_mapsubstringtonumberallpartitions(key, sub_nbr)
  return ls_mapsubstringtonumbernoview(sub_nbr)
end

function ls_updatelocationmultipartition(key, sub_nbr, vlr)
  local s = find(sub_nbr)
  if s == nil then return { { 0 } } end
  return ls_updatelocation(s, vlr)
end

function ls_insertcallforwardingmultipartition(key, sub_nbr, bit1, data_a, sf_type)
  local s = find(sub_nbr)
  if s == nil then return { { 0 } } end
  return { { insert_cf(s, sf_type) } }
end

function ls_deletecallforwardingmultipartition(key, sub_nbr, sf_type, start_time)
  local s = find(sub_nbr)
  if s == nil then return { { 0 } } end
  return ls_deletecallforwarding(s, sf_type, start_time)
end
