-- ReportQuotaUsage(userid, productid, units_used, units_wanted, session_id, txn_id): reports
-- the units a session used and reserves more, in one transaction, in money.
--  * Usage is charged against the session's reservation and never beyond it: a user cannot
--    spend money that is not reserved for the session (so balances never go negative).
--  * The session's reservation is then released, and units_wanted reserved out of the
--    spendable credit (balance minus the other reservations): status 45 all granted, 44 some
--    (as many as the credit pays for), 43 none (no money); 42 when nothing was wanted.
--  * A txn_id already applied for this user changes nothing: status 46 and the original
--    (status, amount) row.
--  * session_id <= 0 starts a new session whose id is this transaction's id.
-- Returns four tables: (amount_spent), the session's reservation (0 or 1 row), (userid,
-- credit), and (balance, product_id, session_id, userid) - VoltDB's client reads the
-- reservation at len-3 and the balance at len-1. Aborts for an unknown user or product.
-- Single-partition on userid.
local find_user = sql [[SELECT userid FROM user_table WHERE userid = ?]]
local find_product = sql [[SELECT unit_cost FROM product_table WHERE productid = ?]]
local find_txn = sql [[SELECT status, amount FROM user_recent_transactions WHERE userid = ? AND user_txn_id = ?]]
local find_alloc = sql [[SELECT allocated_units FROM user_usage_table WHERE userid = ? AND productid = ? AND sessionid = ?]]
local del_alloc = sql [[DELETE FROM user_usage_table WHERE userid = ? AND productid = ? AND sessionid = ?]]
local add_alloc = sql [[INSERT INTO user_usage_table (userid, productid, allocated_units, sessionid, lastdate) VALUES (?, ?, ?, ?, NOW)]]
local show_alloc = sql [[SELECT * FROM user_usage_table WHERE userid = ? AND productid = ? AND sessionid = ?]]
local charge = sql [[UPDATE user_balances SET balance = balance + ?, tran_count = tran_count + 1 WHERE userid = ?]]
local event = sql [[INSERT INTO user_financial_events (userid, amount, purpose) VALUES (?, ?, ?)]]
local record = sql [[INSERT INTO user_recent_transactions (userid, user_txn_id, txn_time, productid, amount, status) VALUES (?, ?, NOW, ?, ?, ?)]]
local balance = sql [[SELECT balance FROM user_balances WHERE userid = ?]]
local reserved = sql [[SELECT SUM(u.allocated_units * p.unit_cost) AS reserved
  FROM user_usage_table u, product_table p WHERE u.userid = ? AND p.productid = u.productid]]

local STATUS_OK, NO_MONEY, SOME_UNITS, ALL_UNITS, TXN_ALREADY_HAPPENED = 42, 43, 44, 45, 46

-- Single-row reads use :values() (the row's columns, nothing when there is no row) or
-- :first() (a row table, or nil): cheaper than bind() and batch() (crates/procs/README.md).
return function(userid, productid, units_used, units_wanted, session_id, txn_id)
  if not find_user:values(userid) then abort("ReportQuotaUsage: user " .. userid .. " does not exist") end
  local cost = find_product:values(productid)
  if not cost then abort("ReportQuotaUsage: product " .. productid .. " does not exist") end
  if find_txn:first(userid, txn_id) then
    set_app_status(TXN_ALREADY_HAPPENED, "Event already happened")
    return find_txn:query(userid, txn_id)
  end
  if session_id <= 0 then session_id = ctx.txn_id end
  local held = find_alloc:values(userid, productid, session_id)
  local used = math.max(0, math.min(units_used, held or 0))
  local spent = used * cost
  if held then del_alloc:exec(userid, productid, session_id) end
  if spent > 0 then
    charge:exec(-spent, userid)
    event:exec(userid, -spent, used .. " units of product " .. productid)
  end
  -- The balance and the value reserved, read once: nothing below changes the balance, and
  -- a grant adds exactly its units' cost to the reservations.
  local bal = balance:values(userid)
  local held_value = reserved:values(userid) or 0
  local status = STATUS_OK
  if units_wanted > 0 then
    local credit = bal - held_value
    local grant = units_wanted
    if cost > 0 then grant = math.min(units_wanted, credit // cost) end
    if grant <= 0 then
      status = NO_MONEY
    else
      add_alloc:exec(userid, productid, grant, session_id)
      held_value = held_value + grant * cost
      if grant < units_wanted then status = SOME_UNITS else status = ALL_UNITS end
    end
  end
  record:exec(userid, txn_id, productid, -spent, status)
  set_app_status(status, "")
  return result_table({ "amount_spent" }, { { spent } }), show_alloc:query(userid, productid, session_id),
    result_table({ "userid", "credit" }, { { userid, bal - held_value } }),
    result_table({ "balance", "product_id", "session_id", "userid" }, { { bal, productid, session_id, userid } })
end
