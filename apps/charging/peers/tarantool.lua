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

-- Value reserved by a user's sessions.
local function reserved(userid)
  local r = 0
  for _, u in box.space.user_usage_table:pairs({ userid }) do
    local p = box.space.product_table:get(u[2])
    if p ~= nil then r = r + u[4] * p[3] end
  end
  return r
end

local function event(userid, amount, purpose)
  box.space.user_financial_events:insert({ box.NULL, userid, amount, purpose })
end

function ls_upsertuser(userid, amount, is_new, json, purpose, last_seen, txn_id)
  local user = box.space.user_table:get(userid)
  local prev = box.space.user_recent_transactions:get({ userid, txn_id })
  if prev ~= nil then return { { 46, prev[6], prev[5] } } end
  box.begin()
  if is_new == 'Y' then
    if user ~= nil then box.rollback(); error('abort: UpsertUser: user ' .. userid .. " exists but shouldn't") end
    box.space.user_table:replace({ userid, json, last_seen })
    box.space.user_balances:insert({ userid, 1, amount })
  else
    if user == nil then box.rollback(); error('abort: UpsertUser: user ' .. userid .. ' does not exist') end
    box.space.user_table:replace({ userid, json, last_seen })
    if box.space.user_balances:update(userid, { { '+', 3, amount }, { '+', 2, 1 } }) == nil then
      box.rollback(); error('abort: UpsertUser: user ' .. userid .. ' has no balance')
    end
  end
  event(userid, amount, 'Created/updated with ' .. amount)
  box.space.user_recent_transactions:insert({ userid, txn_id, now_us(), box.NULL, amount, 42 })
  box.commit()
  return { { 42, box.NULL, box.NULL } }
end

function ls_addcredit(userid, extra, txn_id)
  if box.space.user_table:get(userid) == nil then error('abort: AddCredit: user ' .. userid .. ' does not exist') end
  local prev = box.space.user_recent_transactions:get({ userid, txn_id })
  if prev ~= nil then return { { 46, prev[6], prev[5], box.NULL } } end
  box.begin()
  local b = box.space.user_balances:update(userid, { { '+', 3, extra }, { '+', 2, 1 } })
  event(userid, extra, extra .. ' added')
  box.space.user_recent_transactions:insert({ userid, txn_id, now_us(), box.NULL, extra, 55 })
  box.commit()
  return { { 55, userid, b[3], b[3] - reserved(userid) } }
end

function ls_reportquotausage(userid, productid, units_used, units_wanted, session_id, txn_id)
  if box.space.user_table:get(userid) == nil then error('abort: ReportQuotaUsage: user ' .. userid .. ' does not exist') end
  local product = box.space.product_table:get(productid)
  if product == nil then error('abort: ReportQuotaUsage: product ' .. productid .. ' does not exist') end
  local prev = box.space.user_recent_transactions:get({ userid, txn_id })
  if prev ~= nil then
    return { { 46, prev[6], prev[5], box.NULL, box.NULL, box.NULL, box.NULL, box.NULL } }
  end
  local cost = product[3]
  if session_id <= 0 then session_id = box.sequence.session_ids:next() end
  box.begin()
  box.space.user_usage_table:delete({ userid, productid, session_id })
  -- Usage is charged in full, whatever was reserved (as the demo's ReportQuotaUsage).
  local used = math.max(0, units_used)
  local spent = used * cost
  if spent > 0 then
    box.space.user_balances:update(userid, { { '-', 3, spent }, { '+', 2, 1 } })
    event(userid, -spent, used .. ' units of product ' .. productid)
  end
  local status, granted = 42, box.NULL
  if units_wanted > 0 then
    local credit = box.space.user_balances:get(userid)[3] - reserved(userid)
    local grant = units_wanted
    if cost > 0 then grant = math.min(units_wanted, math.floor(credit / cost)) end
    if grant <= 0 then
      status = 43
    else
      box.space.user_usage_table:insert({ userid, productid, session_id, grant, now_us() })
      granted = grant
      status = grant < units_wanted and 44 or 45
    end
  end
  box.space.user_recent_transactions:insert({ userid, txn_id, now_us(), productid, -spent, status })
  box.commit()
  local bal = box.space.user_balances:get(userid)[3]
  return { { status, spent, granted, session_id, userid, bal - reserved(userid), bal, productid } }
end

function ls_gettotalbalance()
  local sum, n = 0, 0
  for _, b in box.space.user_balances:pairs() do
    sum = sum + b[3]
    n = n + 1
  end
  if n == 0 then return { { box.NULL, 0 } } end
  return { { sum, n } }
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
