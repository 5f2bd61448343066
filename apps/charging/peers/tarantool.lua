-- Telco charging for Tarantool (the side-by-side benchmark's peer): spaces for the tables of
-- apps/charging and its procedures as global Lua functions ls_<procedure> called over IPROTO.
-- Multi-table answers come back as one row that the benchmark splits into tables, with the
-- app status first (see crates/bench/src/peers/shape.rs). The export stream becomes an
-- append-only space (the same write per event). Evaluated on every connect: idempotent.
-- Fields: product_table {productid, productname, unit_cost}; user_table {userid, json,
-- last_seen}; user_recent_transactions {userid, txn_id, time, productid, amount, status};
-- user_usage_table {userid, productid, sessionid, allocated_units, lastdate};
-- user_balances {userid, tran_count, balance}; user_financial_events {id, userid, amount, purpose}.
local clock = require('clock')
local function space(name, parts)
  local s = box.schema.space.create(name, { if_not_exists = true })
  s:create_index('pk', { parts = parts, if_not_exists = true })
  return s
end
space('product_table', { { 1, 'integer' } })
space('user_table', { { 1, 'integer' } })
space('user_recent_transactions', { { 1, 'integer' }, { 2, 'string' } })
space('user_usage_table', { { 1, 'integer' }, { 2, 'integer' }, { 3, 'integer' } })
space('user_balances', { { 1, 'integer' } })
box.schema.sequence.create('event_ids', { if_not_exists = true })
local ev = box.schema.space.create('user_financial_events', { if_not_exists = true })
ev:create_index('pk', { parts = { { 1, 'unsigned' } }, sequence = 'event_ids', if_not_exists = true })
-- Lockstep starts a session with the transaction's id; here a sequence gives unique ids.
box.schema.sequence.create('session_ids', { if_not_exists = true, start = 1000000, min = 1000000 })

local function now_us() return clock.realtime64() / 1000 end

-- The demo's remaining credit: the balance less the value reserved, nil (no row in the
-- demo's answer) when the user holds no reservation.
local function remaining(userid, balance)
  local r, any = 0, false
  for _, u in box.space.user_usage_table:pairs({ userid }) do
    local p = box.space.product_table:get(u[2])
    if p ~= nil then
      r = r + u[4] * p[3]
      any = true
    end
  end
  if not any then return nil end
  return balance - r
end

local function event(userid, amount, purpose)
  box.space.user_financial_events:insert({ box.NULL, userid, amount, purpose })
end

local function null(v)
  if v == nil then return box.NULL end
  return v
end

local PURGE_AFTER_US = 120 * 60 * 1000000

-- Answers (46, 0, NULL) for a repeat, else (42, tables, purged): 4 tables for a new user,
-- 5 for an update, whose last counts the other records older than 120 minutes it purged.
function ls_upsertuser(userid, amount, is_new, json, purpose, last_seen, txn_id)
  local user = box.space.user_table:get(userid)
  if box.space.user_recent_transactions:get({ userid, txn_id }) ~= nil then return { { 46, 0, box.NULL } } end
  if string.upper(is_new) == 'Y' then
    if user ~= nil then error('abort: User ' .. userid .. " exists but shouldn't") end
    box.begin()
    box.space.user_recent_transactions:insert({ userid, txn_id, now_us(), box.NULL, amount, 42 })
    box.space.user_table:replace({ userid, json, last_seen })
    box.space.user_balances:insert({ userid, 1, amount })
    event(userid, amount, 'Created user ' .. userid .. ' with opening credit of ' .. amount)
    box.commit()
    return { { 42, 4, box.NULL } }
  end
  if user == nil then error('abort: User ' .. userid .. ' does not exist') end
  if box.space.user_balances:get(userid) == nil then
    error('abort: User ' .. userid .. ' exists but has no financial history...')
  end
  box.begin()
  local now = now_us()
  box.space.user_recent_transactions:insert({ userid, txn_id, now, box.NULL, amount, 42 })
  box.space.user_table:replace({ userid, json, last_seen })
  box.space.user_balances:update(userid, { { '+', 3, amount }, { '+', 2, 1 } })
  event(userid, amount, 'Updated user ' .. userid .. ' - added credit of ' .. amount)
  local old = {}
  for _, t in box.space.user_recent_transactions:pairs({ userid }) do
    if t[2] ~= txn_id and t[3] < now - PURGE_AFTER_US then old[#old + 1] = t[2] end
  end
  for _, id in ipairs(old) do box.space.user_recent_transactions:delete({ userid, id }) end
  box.commit()
  return { { 42, 5, #old } }
end

-- Answers (46, NULL, NULL, NULL) for a repeat, else (55, userid, balance, remaining credit).
function ls_addcredit(userid, extra, txn_id)
  if box.space.user_table:get(userid) == nil then error('abort: User ' .. userid .. ' does not exist') end
  if box.space.user_recent_transactions:get({ userid, txn_id }) ~= nil then
    return { { 46, box.NULL, box.NULL, box.NULL } }
  end
  box.begin()
  local b = box.space.user_balances:update(userid, { { '+', 3, extra }, { '+', 2, 1 } })
  event(userid, extra, extra .. ' added')
  box.space.user_recent_transactions:insert({ userid, txn_id, now_us(), box.NULL, extra, 55 })
  box.commit()
  return { { 55, userid, b[3], null(remaining(userid, b[3])) } }
end

-- Answers (46, NULL…) for a repeat, else (status, reservation deleted 0/1, units reserved or
-- NULL, session, userid, remaining credit or NULL, balance, productid, units wanted > 0 as
-- 0/1). As the demo: usage is charged in full (whatever was reserved), and units are
-- reserved out of the remaining credit (the balance when nothing else is reserved).
function ls_reportquotausage(userid, productid, units_used, units_wanted, session_id, txn_id)
  if box.space.user_table:get(userid) == nil then error('abort: User ' .. userid .. ' does not exist') end
  local product = box.space.product_table:get(productid)
  if product == nil then error('abort: Product ' .. productid .. ' does not exist') end
  if box.space.user_recent_transactions:get({ userid, txn_id }) ~= nil then
    return { { 46, box.NULL, box.NULL, box.NULL, box.NULL, box.NULL, box.NULL, box.NULL, box.NULL } }
  end
  local cost = product[3]
  if session_id <= 0 then session_id = box.sequence.session_ids:next() end
  box.begin()
  local spent = units_used * cost
  if units_used > 0 then
    box.space.user_balances:update(userid, { { '-', 3, spent }, { '+', 2, 1 } })
    event(userid, -spent, units_used .. ' units of product ' .. productid)
  end
  local deleted = box.space.user_usage_table:delete({ userid, productid, session_id }) ~= nil and 1 or 0
  local bal = box.space.user_balances:get(userid)[3]
  local status, granted = 42, box.NULL
  if units_wanted > 0 then
    local credit = remaining(userid, bal) or bal
    local grant = units_wanted
    if cost > 0 and credit > 0 then grant = math.min(units_wanted, math.floor(credit / cost)) end
    if credit <= 0 or grant <= 0 then
      status = 43
    else
      box.space.user_usage_table:insert({ userid, productid, session_id, grant, now_us() })
      granted = grant
      status = grant < units_wanted and 44 or 45
    end
  end
  box.space.user_recent_transactions:insert({ userid, txn_id, now_us(), productid, -spent, status })
  box.commit()
  return { { status, deleted, granted, session_id, userid, null(remaining(userid, bal)), bal, productid, units_wanted > 0 and 1 or 0 } }
end

function ls_gettotalbalance()
  local sum, n = 0, 0
  for _, b in box.space.user_balances:pairs() do
    sum = sum + b[3]
    n = n + 1
  end
  if n == 0 then return { { box.NULL } } end
  return { { sum } }
end

function ls_showcurrentallocations()
  local units = {}
  for _, u in box.space.user_usage_table:pairs() do units[u[2]] = (units[u[2]] or 0) + u[4] end
  local rows = {}
  for _, p in box.space.product_table:pairs() do
    if units[p[1]] ~= nil then rows[#rows + 1] = { p[1], p[2], units[p[1]], units[p[1]] * p[3] } end
  end
  return rows
end

function ls_upsert_product(id, name, cost)
  box.space.product_table:replace({ id, name, cost })
  return { { 1 } }
end

-- Checks: the sum of balances, how many are negative, and (userid, balance, reserved) per
-- user holding reservations.
function ls_charging_sum_balance()
  return { { ls_gettotalbalance()[1][1] } }
end

function ls_charging_negative_balances()
  local n = 0
  for _, b in box.space.user_balances:pairs() do
    if b[3] < 0 then n = n + 1 end
  end
  return { { n } }
end

function ls_charging_reservations()
  local per_user = {}
  for _, u in box.space.user_usage_table:pairs() do
    local p = box.space.product_table:get(u[2])
    per_user[u[1]] = (per_user[u[1]] or 0) + u[4] * (p and p[3] or 0)
  end
  local rows = {}
  for userid, r in pairs(per_user) do
    local b = box.space.user_balances:get(userid)
    if b ~= nil then rows[#rows + 1] = { userid, b[3], r } end
  end
  return rows
end
