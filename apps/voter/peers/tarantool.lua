-- Voter for Tarantool (the side-by-side benchmark's peer): spaces for the tables and views of
-- apps/voter, and its procedures as global Lua functions ls_<procedure> called over IPROTO.
-- Each answers an array of rows. The views Lockstep keeps inside Vote are kept here the same
-- way (upserts in the same transaction). Evaluated on every connect: idempotent.
local function space(name, parts)
  local s = box.schema.space.create(name, { if_not_exists = true })
  s:create_index('pk', { parts = parts, if_not_exists = true })
  return s
end
space('contestants', { { 1, 'integer' } })
space('area_code_state', { { 1, 'integer' } })
box.schema.sequence.create('votes_id', { if_not_exists = true })
local votes = box.schema.space.create('votes', { if_not_exists = true })
votes:create_index('pk', { parts = { { 1, 'unsigned' } }, sequence = 'votes_id', if_not_exists = true })
space('v_votes_by_phone_number', { { 1, 'integer' } })
space('v_votes_by_contestant_number_state', { { 1, 'integer' }, { 2, 'string' } })

-- 289 North American area codes and their states (the same list as Initialize.lua).
local AREA_CODES = { --@AREA_CODES@
}

function ls_initialize(max_contestants, names_csv)
  local existing = box.space.contestants:len()
  if existing > 0 then return { { existing } } end
  local names = {}
  for name in string.gmatch(names_csv, '[^,]+') do names[#names + 1] = name end
  if max_contestants > #names then
    error('abort: Initialize: only ' .. #names .. ' contestant names were given for ' .. max_contestants .. ' contestants')
  end
  box.begin()
  for i = 1, max_contestants do box.space.contestants:insert({ i, names[i] }) end
  for i = 1, #AREA_CODES, 2 do box.space.area_code_state:replace({ AREA_CODES[i], AREA_CODES[i + 1] }) end
  box.commit()
  return { { max_contestants } }
end

function ls_vote(phone, contestant, max_votes)
  if box.space.contestants:get(contestant) == nil then return { { 1 } } end
  local v = box.space.v_votes_by_phone_number:get(phone)
  if v ~= nil and v[2] >= max_votes then return { { 2 } } end
  local st = box.space.area_code_state:get(math.floor(phone / 10000000))
  st = st and st[2] or 'XX'
  box.begin()
  box.space.votes:insert({ box.NULL, phone, st, contestant })
  box.space.v_votes_by_phone_number:upsert({ phone, 1 }, { { '+', 2, 1 } })
  box.space.v_votes_by_contestant_number_state:upsert({ contestant, st, 1 }, { { '+', 3, 1 } })
  box.commit()
  return { { 0 } }
end

function ls_results()
  local totals = {}
  for _, t in box.space.v_votes_by_contestant_number_state:pairs() do
    totals[t[1]] = (totals[t[1]] or 0) + t[3]
  end
  local rows = {}
  for number, total in pairs(totals) do
    local c = box.space.contestants:get(number)
    if c ~= nil then rows[#rows + 1] = { c[2], number, total } end
  end
  table.sort(rows, function(a, b)
    if a[3] ~= b[3] then return a[3] > b[3] end
    if a[2] ~= b[2] then return a[2] < b[2] end
    return a[1] < b[1]
  end)
  return rows
end

-- Check: phone numbers with more than max votes.
function ls_voter_over_limit(max_votes)
  local n = 0
  for _, t in box.space.v_votes_by_phone_number:pairs() do
    if t[2] > max_votes then n = n + 1 end
  end
  return { { n } }
end
