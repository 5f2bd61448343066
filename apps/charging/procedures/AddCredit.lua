-- AddCredit(userid, extra_credit, txn_id): adds credit, answering as the charging demo's
-- Java class does. Unknown user: aborts ("User N does not exist"). A txn_id already
-- recorded for the user: app status 46, "Event already happened at <its time>", no table.
-- Otherwise app status 55 (CREDIT_ADDED), "<extra> added by Txn <txn_id>", and five
-- tables: the financial event's count, the balance refresh's count, (USERID, BALANCE), the
-- remaining credit (USERID, BALANCE; no row without reservations) and the transaction
-- record's count. Single-partition on userid.
local get_user = sql [[SELECT userid FROM user_table WHERE userid = ?]]
-- The time as text, for the status string (VoltDB prints a TIMESTAMP this way).
local get_txn = sql [[SELECT CAST(txn_time AS VARCHAR) FROM user_recent_transactions WHERE userid = ? AND user_txn_id = ?]]
local add_txn = sql [[INSERT INTO user_recent_transactions (userid, user_txn_id, txn_time, amount) VALUES (?, ?, NOW, ?)]]
local get_balance = sql [[SELECT userid, balance FROM user_balances WHERE userid = ?]]
local remaining_credit = sql [[SELECT v.userid AS userid, v.balance - SUM(uut.allocated_units * p.unit_cost) AS balance
  FROM user_balances v, user_usage_table uut, product_table p
 WHERE v.userid = ? AND v.userid = uut.userid AND p.productid = uut.productid
 GROUP BY v.userid, v.balance ORDER BY v.userid, v.balance]]
local add_credit = sql [[INSERT INTO user_financial_events (userid, amount, purpose) VALUES (?, ?, ?)]]
local refresh_balance = sql [[UPSERT INTO user_balances SELECT userid, tran_count, balance FROM user_balance_total_view WHERE userid = ?]]

local TXN_ALREADY_HAPPENED, CREDIT_ADDED = 46, 55

return function(userid, extra_credit, txn_id)
  local user = get_user:values(userid)
  local happened_at = get_txn:values(userid, txn_id)
  if not user then abort("User " .. userid .. " does not exist") end
  if happened_at then
    set_app_status(TXN_ALREADY_HAPPENED, "Event already happened at " .. happened_at)
    return
  end
  set_app_status(CREDIT_ADDED, extra_credit .. " added by Txn " .. txn_id)
  return batch(add_credit:bind(userid, extra_credit, extra_credit .. " added"), refresh_balance:bind(userid),
    get_balance:bind(userid), remaining_credit:bind(userid), add_txn:bind(userid, txn_id, extra_credit))
end
