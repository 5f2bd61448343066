#!lua name=ycsb
-- YCSB for Redis 7 (the side-by-side benchmark's peer) as a library of Redis Functions named
-- ls_<procedure>, each answering an array of rows. A record is the string key
-- ycsb:v:<keyspace>:<key> holding the packed field map; ycsb:idx:<keyspace> is a sorted set
-- of the keys (all score 0) so that scans walk them in byte order (ZRANGE BYLEX), as the
-- Redis YCSB binding does. A function runs atomically.

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

-- Parses a packed map into an array of {name, value}; nil and a message when malformed.
local function unpack_fields(blob)
  if #blob < 4 then return nil, 'Put: packed value shorter than its 4-byte header' end
  local count, pos = be32(blob, 1), 5
  if count < 0 or count > FIELDS_MAX then return nil, 'Put: packed value has ' .. count .. ' fields' end
  local fields = {}
  for i = 1, count do
    if pos + 3 > #blob then return nil, 'Put: packed value truncated in field ' .. i end
    local l = be32(blob, pos)
    local name = string.sub(blob, pos + 4, pos + 3 + l)
    pos = pos + 4 + l
    if pos + 3 > #blob then return nil, 'Put: packed value truncated in field ' .. i end
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

local function get(keys, args)
  local v = redis.call('GET', 'ycsb:v:' .. args[1] .. ':' .. args[2])
  if not v then return {} end
  return { { v } }
end

local function put(keys, args)
  local keyspace, key, data = args[1], args[2], args[3]
  local rkey = 'ycsb:v:' .. keyspace .. ':' .. key
  local old = redis.call('GET', rkey)
  if not old then
    redis.call('SET', rkey, data)
    redis.call('ZADD', 'ycsb:idx:' .. keyspace, 0, key)
    redis.call('SADD', 'ycsb:keyspaces', keyspace)
    return { { 0 } }
  end
  -- Parse both before writing: a Redis function cannot roll back.
  local new_fields, err = unpack_fields(data)
  if not new_fields then return redis.error_reply('abort: ' .. err) end
  local old_fields, err2 = unpack_fields(old)
  if not old_fields then return redis.error_reply('abort: ' .. err2) end
  local replaced = {}
  for _, f in ipairs(new_fields) do replaced[f[1]] = true end
  local merged = {}
  for _, f in ipairs(old_fields) do
    if not replaced[f[1]] then merged[#merged + 1] = f end
  end
  for _, f in ipairs(new_fields) do merged[#merged + 1] = f end
  redis.call('SET', rkey, pack_fields(merged))
  return { { 0 } }
end

local function scan_from(keyspace, range_min, count)
  local from = '-'
  if range_min ~= '' then from = '[' .. range_min end
  local ks = redis.call('ZRANGE', 'ycsb:idx:' .. keyspace, from, '+', 'BYLEX', 'LIMIT', 0, count)
  local rows = {}
  for i, k in ipairs(ks) do
    rows[i] = { redis.call('GET', 'ycsb:v:' .. keyspace .. ':' .. k), k }
  end
  return rows
end

local function scan_all(keys, args)
  return scan_from(args[1], args[2], tonumber(args[3]))
end

local function scan(keys, args)
  return scan_from(args[2], args[3], tonumber(args[4]))
end

-- Records in every keyspace (the workload's SELECT COUNT(*) FROM Store).
local function count(keys, args)
  local n = 0
  for _, ks in ipairs(redis.call('SMEMBERS', 'ycsb:keyspaces')) do n = n + redis.call('ZCARD', 'ycsb:idx:' .. ks) end
  return { { n } }
end

-- Deletes every record (the workload's DELETE FROM Store).
local function clear(keys, args)
  local n = 0
  for _, ks in ipairs(redis.call('SMEMBERS', 'ycsb:keyspaces')) do
    local idx = 'ycsb:idx:' .. ks
    while true do
      local batch = redis.call('ZRANGE', idx, 0, 999)
      if #batch == 0 then break end
      for _, k in ipairs(batch) do redis.call('DEL', 'ycsb:v:' .. ks .. ':' .. k) end
      redis.call('ZREM', idx, unpack(batch))
      n = n + #batch
    end
  end
  redis.call('DEL', 'ycsb:keyspaces')
  return { { n } }
end

redis.register_function{ function_name = 'ls_get', callback = get, flags = { 'no-writes' } }
redis.register_function('ls_put', put)
redis.register_function{ function_name = 'ls_scan', callback = scan, flags = { 'no-writes' } }
redis.register_function{ function_name = 'ls_scanall', callback = scan_all, flags = { 'no-writes' } }
redis.register_function{ function_name = 'ls_ycsb_count', callback = count, flags = { 'no-writes' } }
redis.register_function('ls_ycsb_clear', clear)
