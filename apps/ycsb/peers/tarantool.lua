-- YCSB for Tarantool (the side-by-side benchmark's peer): the Store table of apps/ycsb as a
-- space {key, keyspace, value} with a tree index on (key, keyspace) (keys compare bytewise,
-- as in Lockstep), and its procedures as global Lua functions ls_<procedure> called over
-- IPROTO, each answering an array of rows. Evaluated on every connect: idempotent.
local store = box.schema.space.create('store', { if_not_exists = true })
store:create_index('pk', { parts = { { 1, 'string' }, { 2, 'string' } }, if_not_exists = true })

-- Fields in a packed map; a bounded count keeps a corrupt header from looping for long.
local FIELDS_MAX = 1024

local function be32(s, pos)
  local a, b, c, d = string.byte(s, pos, pos + 3)
  local v = ((a * 256 + b) * 256 + c) * 256 + d
  if v >= 2147483648 then v = v - 4294967296 end
  return v
end
local function pack32(n)
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256, math.floor(n / 256) % 256, n % 256)
end

-- Parses a packed map into an array of {name, value}; errors on malformed input.
local function unpack_fields(blob)
  if #blob < 4 then error('abort: Put: packed value shorter than its 4-byte header') end
  local count, pos = be32(blob, 1), 5
  if count < 0 or count > FIELDS_MAX then error('abort: Put: packed value has ' .. count .. ' fields') end
  local fields = {}
  for i = 1, count do
    if pos + 3 > #blob then error('abort: Put: packed value truncated in field ' .. i) end
    local l = be32(blob, pos)
    local name = string.sub(blob, pos + 4, pos + 3 + l)
    pos = pos + 4 + l
    if pos + 3 > #blob then error('abort: Put: packed value truncated in field ' .. i) end
    l = be32(blob, pos)
    local value = string.sub(blob, pos + 4, pos + 3 + l)
    pos = pos + 4 + l
    fields[i] = { name, value }
  end
  return fields
end

local function pack_fields(fields)
  local parts = { pack32(#fields) }
  for _, f in ipairs(fields) do
    parts[#parts + 1] = pack32(#f[1]) .. f[1] .. pack32(#f[2]) .. f[2]
  end
  return table.concat(parts)
end

function ls_get(keyspace, key)
  local t = box.space.store:get({ key, keyspace })
  if t == nil then return {} end
  return { { t[3] } }
end

function ls_put(keyspace, key, data)
  local old = box.space.store:get({ key, keyspace })
  if old == nil then
    box.space.store:insert({ key, keyspace, data })
    return { { 0 } }
  end
  local new_fields = unpack_fields(data)
  local replaced = {}
  for _, f in ipairs(new_fields) do replaced[f[1]] = true end
  local merged = {}
  for _, f in ipairs(unpack_fields(old[3])) do
    if not replaced[f[1]] then merged[#merged + 1] = f end
  end
  for _, f in ipairs(new_fields) do merged[#merged + 1] = f end
  box.space.store:replace({ key, keyspace, pack_fields(merged) })
  return { { 0 } }
end

function ls_scanall(keyspace, range_min, count)
  local rows = {}
  local from = range_min
  if from == nil then from = '' end
  for _, t in box.space.store.index.pk:pairs({ from }, { iterator = 'GE' }) do
    if #rows >= count then break end
    if t[2] == keyspace then rows[#rows + 1] = { t[3], t[1] } end
  end
  return rows
end

function ls_scan(partition_key, keyspace, range_min, count)
  return ls_scanall(keyspace, range_min, count)
end
