-- ReportQuotaUsage(userid, productid, units_used, units_wanted, session_id, txn_id): the
-- charging demo's main call, answering as its Java class does. It charges the units a
-- session used, ends the session's reservation and reserves units_wanted more out of the
-- user's spendable credit (balance less the other reservations).
--  * session_id <= 0 starts a session whose id is this transaction's unique id.
--  * Unknown user or product: aborts ("User N does not exist", "Product N does not exist").
--  * Each call first deletes the user's oldest recorded transaction if it is more than 5
--    minutes old (one per call, the demo's housekeeping).
--  * A txn_id already recorded for the user: app status 46, "Event already happened at
--    <its time>", no table, nothing else changed.
--  * units_used > 0 charges units_used x unit cost in full (a financial event on the stream,
--    then user_balances refreshed from the stream's view), whatever was reserved.
--  * units_wanted <= 0: no app status; five tables: the reservation delete's count, the
--    transaction record's count, the reservation (none now), the remaining credit
--    (USERID, BALANCE; no row without reservations) and (BALANCE, PRODUCT_ID, SESSION_ID,
--    USERID).
--  * Otherwise 43 "Not enough money", 44 "Allocated N units" (what the credit pays for) or
--    45 "Allocated N units" (all), and three tables (four with the reservation's insert
--    count first): reservation, remaining credit, balance. The demo's client reads the
--    reservation at len-3 and the balance at len-1.
-- Single-partition on userid.
local get_user = sql [[SELECT userid FROM user_table WHERE userid = ?]]
local get_product = sql [[SELECT unit_cost FROM product_table WHERE productid = ?]]
-- The time as text, for the status string (VoltDB prints a TIMESTAMP this way).
local get_txn = sql [[SELECT CAST(txn_time AS VARCHAR) FROM user_recent_transactions WHERE userid = ? AND user_txn_id = ?]]
-- The user's oldest record, if over 5 minutes old (the order includes the primary key, so
-- it is one row, the same on every replica).
local del_oldest_txn = sql [[DELETE FROM user_recent_transactions
 WHERE userid = ? AND SINCE_EPOCH(SECOND, txn_time) < SINCE_EPOCH(SECOND, DATEADD(MILLISECOND, ?, NOW))
 ORDER BY txn_time, userid, user_txn_id LIMIT 1]]
local add_txn = sql [[INSERT INTO user_recent_transactions (userid, user_txn_id, txn_time, productid, amount) VALUES (?, ?, NOW, ?, ?)]]
local get_balance = sql [[SELECT balance, CAST(? AS BIGINT) AS product_id, CAST(? AS BIGINT) AS session_id, userid
  FROM user_balances WHERE userid = ?]]
local remaining_credit = sql [[SELECT v.userid AS userid, v.balance - SUM(uut.allocated_units * p.unit_cost) AS balance
  FROM user_balances v, user_usage_table uut, product_table p
 WHERE v.userid = ? AND v.userid = uut.userid AND p.productid = uut.productid
 GROUP BY v.userid, v.balance ORDER BY v.userid, v.balance]]
local add_alloc = sql [[INSERT INTO user_usage_table (userid, productid, allocated_units, sessionid, lastdate) VALUES (?, ?, ?, ?, NOW)]]
local get_alloc = sql [[SELECT allocated_units, sessionid, lastdate, userid, productid
  FROM user_usage_table WHERE userid = ? AND productid = ? AND sessionid = ?]]
local del_alloc = sql [[DELETE FROM user_usage_table WHERE userid = ? AND productid = ? AND sessionid = ?]]
local spend = sql [[INSERT INTO user_financial_events (userid, amount, purpose) VALUES (?, ?, ?)]]
local refresh_balance = sql [[UPSERT INTO user_balances SELECT userid, tran_count, balance FROM user_balance_total_view WHERE userid = ?]]

local STATUS_NO_MONEY, STATUS_SOME_UNITS_ALLOCATED, STATUS_ALL_UNITS_ALLOCATED, TXN_ALREADY_HAPPENED = 43, 44, 45, 46
-- Recorded transactions older than this go, one per call (milliseconds, negative: the past).
local FIVE_MINUTES_AGO_MS = -5 * 60 * 1000

return function(userid, productid, units_used, units_wanted, input_session, txn_id)
  local session = input_session
  if session <= 0 then session = ctx.txn_id end
  local user = get_user:values(userid)
  local cost = get_product:values(productid)
  local happened_at = get_txn:values(userid, txn_id)
  del_oldest_txn:exec(userid, FIVE_MINUTES_AGO_MS)
  if not user then abort("User " .. userid .. " does not exist") end
  if not cost then abort("Product " .. productid .. " does not exist") end
  if happened_at then
    set_app_status(TXN_ALREADY_HAPPENED, "Event already happened at " .. happened_at)
    return
  end

  local amount_spent = units_used * cost * -1
  if units_used > 0 then
    spend:exec(userid, amount_spent, units_used .. " units of product " .. productid)
    refresh_balance:exec(userid)
  end
  local interim = { batch(del_alloc:bind(userid, productid, session), add_txn:bind(userid, txn_id, productid, amount_spent),
    get_alloc:bind(userid, productid, session), remaining_credit:bind(userid),
    get_balance:bind(productid, session, userid)) }
  local balance_row = interim[5][1]
  if not balance_row then abort("User " .. userid .. " has no balance") end
  -- Spendable credit: the balance less the reservations, when there are any.
  local balance = balance_row.balance
  if #interim[4] > 0 then balance = interim[4][1].balance end
  if units_wanted <= 0 then return table.unpack(interim, 1, 5) end

  local want_to_spend = cost * units_wanted
  local affordable = math.maxinteger
  if cost > 0 then affordable = balance // cost end
  local grant = nil
  if balance <= 0 or affordable == 0 then
    set_app_status(STATUS_NO_MONEY, "Not enough money")
  elseif want_to_spend > balance then
    set_app_status(STATUS_SOME_UNITS_ALLOCATED, "Allocated " .. affordable .. " units")
    grant = affordable
  else
    set_app_status(STATUS_ALL_UNITS_ALLOCATED, "Allocated " .. units_wanted .. " units")
    grant = units_wanted
  end
  local reads = { get_alloc:bind(userid, productid, session), remaining_credit:bind(userid), get_balance:bind(productid, session, userid) }
  if grant then return batch(add_alloc:bind(userid, productid, grant, session), table.unpack(reads)) end
  return batch(table.unpack(reads))
end
