-- GetUser(userid): five tables: the user row, its balance row, its reservations, its
-- recent transactions, and its spendable credit (balance minus the value reserved).
-- Single-partition on userid.
local user    = sql [[SELECT * FROM user_table WHERE userid = ?]]
local balance = sql [[SELECT * FROM user_balances WHERE userid = ?]]
local usage   = sql [[SELECT * FROM user_usage_table WHERE userid = ? ORDER BY productid, sessionid]]
local txns    = sql [[SELECT * FROM user_recent_transactions WHERE userid = ? ORDER BY txn_time, user_txn_id]]
local reserved = sql [[SELECT SUM(u.allocated_units * p.unit_cost) AS reserved
  FROM user_usage_table u, product_table p WHERE u.userid = ? AND p.productid = u.productid]]

return function(userid)
  local u, b, us, t, r = batch(user:bind(userid), balance:bind(userid), usage:bind(userid),
    txns:bind(userid), reserved:bind(userid))
  local credit = nil
  if #b > 0 then credit = b[1].balance - ((#r > 0 and r[1].reserved) or 0) end
  return u, b, us, t, result_table({ "userid", "credit" }, { { userid, credit } })
end
