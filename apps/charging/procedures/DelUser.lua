-- DelUser(userid): deletes everything about a user, as the charging demo's Java class does:
-- five count tables, for user_table, user_usage_table, user_balances,
-- user_recent_transactions and the user's row of user_balance_total_view (the view of the
-- financial stream: the stream keeps no rows, so its view's rows may be deleted, and a user
-- created again with the same id starts a new row from its opening credit).
-- Single-partition on userid.
local dels = {
  sql [[DELETE FROM user_table WHERE userid = ?]],
  sql [[DELETE FROM user_usage_table WHERE userid = ?]],
  sql [[DELETE FROM user_balances WHERE userid = ?]],
  sql [[DELETE FROM user_recent_transactions WHERE userid = ?]],
  sql [[DELETE FROM user_balance_total_view WHERE userid = ?]],
}

return function(userid)
  local out = {}
  for i, d in ipairs(dels) do out[i] = result_table({ "modified_tuples" }, { { d:exec(userid) } }) end
  return table.unpack(out)
end
