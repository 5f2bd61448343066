#!lua name=voter
-- Voter for Redis 7 (the side-by-side benchmark's peer) as a library of Redis Functions
-- named ls_<procedure>; each answers an array of rows. Keys: voter:contestants (hash
-- number -> name), voter:area (hash code -> state), voter:phone (hash phone -> votes, the
-- per-phone view), voter:cs:<contestant> (hash state -> votes, the per-contestant view) and
-- voter:votes (a list holding every vote, the votes table). A function runs atomically.

-- 289 North American area codes and their states (the same list as Initialize.lua).
local AREA_CODES = { --@AREA_CODES@
}

local function initialize(keys, args)
  local max_contestants = tonumber(args[1])
  local existing = redis.call('HLEN', 'voter:contestants')
  if existing > 0 then return { { existing } } end
  local names = {}
  for name in string.gmatch(args[2], '[^,]+') do names[#names + 1] = name end
  if max_contestants > #names then
    return redis.error_reply('abort: Initialize: only ' .. #names .. ' contestant names were given for ' .. max_contestants .. ' contestants')
  end
  for i = 1, max_contestants do redis.call('HSET', 'voter:contestants', i, names[i]) end
  for i = 1, #AREA_CODES, 2 do redis.call('HSET', 'voter:area', AREA_CODES[i], AREA_CODES[i + 1]) end
  return { { max_contestants } }
end

local function vote(keys, args)
  local phone, contestant, max_votes = args[1], args[2], tonumber(args[3])
  if redis.call('HEXISTS', 'voter:contestants', contestant) == 0 then return { { 1 } } end
  local n = tonumber(redis.call('HGET', 'voter:phone', phone) or '0')
  if n >= max_votes then return { { 2 } } end
  local st = redis.call('HGET', 'voter:area', tostring(math.floor(tonumber(phone) / 10000000))) or 'XX'
  redis.call('HINCRBY', 'voter:phone', phone, 1)
  redis.call('HINCRBY', 'voter:cs:' .. contestant, st, 1)
  redis.call('RPUSH', 'voter:votes', phone .. ',' .. st .. ',' .. contestant)
  return { { 0 } }
end

local function results(keys, args)
  local c = redis.call('HGETALL', 'voter:contestants')
  local rows = {}
  for i = 1, #c, 2 do
    local total = 0
    local per_state = redis.call('HVALS', 'voter:cs:' .. c[i])
    for _, v in ipairs(per_state) do total = total + tonumber(v) end
    if total > 0 then rows[#rows + 1] = { c[i + 1], tonumber(c[i]), total } end
  end
  table.sort(rows, function(a, b)
    if a[3] ~= b[3] then return a[3] > b[3] end
    if a[2] ~= b[2] then return a[2] < b[2] end
    return a[1] < b[1]
  end)
  return rows
end

local function count_votes(keys, args)
  return { { redis.call('LLEN', 'voter:votes') } }
end

-- Check: phone numbers with more than max votes.
local function over_limit(keys, args)
  local max_votes, n, cursor = tonumber(args[1]), 0, '0'
  repeat
    local r = redis.call('HSCAN', 'voter:phone', cursor, 'COUNT', 1000)
    cursor = r[1]
    for i = 2, #r[2], 2 do
      if tonumber(r[2][i]) > max_votes then n = n + 1 end
    end
  until cursor == '0'
  return { { n } }
end

redis.register_function('ls_initialize', initialize)
redis.register_function('ls_vote', vote)
redis.register_function{ function_name = 'ls_results', callback = results, flags = { 'no-writes' } }
redis.register_function{ function_name = 'ls_voter_count', callback = count_votes, flags = { 'no-writes' } }
redis.register_function{ function_name = 'ls_voter_over_limit', callback = over_limit, flags = { 'no-writes' } }
