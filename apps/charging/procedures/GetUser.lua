-- GetUser(userid): everything about a user, as the charging demo's Java class answers: five
-- tables: the user row, its balance row, its reservations (by product, session), its
-- recorded transactions (USER_TXN_ID, TXN_TIME, PRODUCTID, AMOUNT, oldest first) and its
-- remaining credit (USERID, BALANCE: the balance less the reservations' value; no row
-- without reservations). An unknown user gives five empty tables. Single-partition.
local get_user = sql [[SELECT * FROM user_table WHERE userid = ?]]
local get_balance = sql [[SELECT * FROM user_balances WHERE userid = ?]]
local get_usage = sql [[SELECT * FROM user_usage_table WHERE userid = ? ORDER BY productid, sessionid]]
local get_txns = sql [[SELECT user_txn_id, txn_time, productid, amount FROM user_recent_transactions
 WHERE userid = ? ORDER BY txn_time, user_txn_id, productid, amount]]
local remaining_credit = sql [[SELECT v.userid AS userid, v.balance - SUM(uut.allocated_units * p.unit_cost) AS balance
  FROM user_balances v, user_usage_table uut, product_table p
 WHERE v.userid = ? AND v.userid = uut.userid AND p.productid = uut.productid
 GROUP BY v.userid, v.balance ORDER BY v.userid, v.balance]]

return function(userid)
  return batch(get_user:bind(userid), get_balance:bind(userid), get_usage:bind(userid), get_txns:bind(userid),
    remaining_credit:bind(userid))
end
