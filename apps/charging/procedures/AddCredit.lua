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

return function(userid, extra_credit, txn_id)
  local user, prev = batch(find_user:bind(userid), find_txn:bind(userid, txn_id))
  if #user == 0 then abort("AddCredit: user " .. userid .. " does not exist") end
  if #prev > 0 then
    set_app_status(TXN_ALREADY_HAPPENED, "Event already happened")
    return prev
  end
  add_balance:exec(extra_credit, userid)
  event:exec(userid, extra_credit, extra_credit .. " added")
  record:exec(userid, txn_id, extra_credit, CREDIT_ADDED)
  local b, r = batch(balance:bind(userid), reserved:bind(userid))
  local credit = b[1].balance - ((#r > 0 and r[1].reserved) or 0)
  set_app_status(CREDIT_ADDED, extra_credit .. " added")
  return b, result_table({ "userid", "credit" }, { { userid, credit } })
end
