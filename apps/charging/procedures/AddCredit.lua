-- AddCredit(userid, extra_credit, txn_id): adds money to a user. A txn_id already applied for
-- this user changes nothing: status 46 and the original (status, amount) row. Otherwise
-- status 55 (CREDIT_ADDED) and two tables: (userid, balance) and (userid, credit), credit
-- being the balance less the value reserved. Aborts for an unknown user.
-- Single-partition on userid.
local find_user   = sql [[SELECT userid FROM user_table WHERE userid = ?]]
local find_txn    = sql [[SELECT status, amount FROM user_recent_transactions WHERE userid = ? AND user_txn_id = ?]]
local add_balance = sql [[UPDATE user_balances SET balance = balance + ?, tran_count = tran_count + 1 WHERE userid = ?]]
local event       = sql [[INSERT INTO user_financial_events (userid, amount, purpose) VALUES (?, ?, ?)]]
local record      = sql [[INSERT INTO user_recent_transactions (userid, user_txn_id, txn_time, productid, amount, status) VALUES (?, ?, NOW, NULL, ?, ?)]]
local balance     = sql [[SELECT userid, balance FROM user_balances WHERE userid = ?]]
local reserved    = sql [[SELECT SUM(u.allocated_units * p.unit_cost) AS reserved
  FROM user_usage_table u, product_table p WHERE u.userid = ? AND p.productid = u.productid]]

local CREDIT_ADDED, TXN_ALREADY_HAPPENED = 55, 46

-- Single-row reads use :values() (the row's columns, nothing when there is no row) or
-- :first() (a row table, or nil): cheaper than bind() and batch() (crates/procs/README.md).
return function(userid, extra_credit, txn_id)
  if not find_user:values(userid) then abort("AddCredit: user " .. userid .. " does not exist") end
  if find_txn:first(userid, txn_id) then
    set_app_status(TXN_ALREADY_HAPPENED, "Event already happened")
    return find_txn:query(userid, txn_id)
  end
  add_balance:exec(extra_credit, userid)
  event:exec(userid, extra_credit, extra_credit .. " added")
  record:exec(userid, txn_id, extra_credit, CREDIT_ADDED)
  local b = balance:query(userid)
  local credit = b[1].balance - (reserved:values(userid) or 0)
  set_app_status(CREDIT_ADDED, extra_credit .. " added")
  return b, result_table({ "userid", "credit" }, { { userid, credit } })
end
