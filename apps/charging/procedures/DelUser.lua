-- DelUser(userid): deletes everything about a user, as the charging demo's Java class does:
-- five count tables, for user_table, user_usage_table, user_balances,
-- user_recent_transactions and the user's row of user_balance_total_view (the view of the
-- financial stream).
-- The Java deletes that view row directly (VoltDB allows DELETE on a view of a stream);
-- Lockstep's views are read-only, so here the row's balance is brought to zero with one
-- more financial event of minus the balance ("DelUser: balance cleared"), and the count
-- answered is 1 when there was a balance to clear, else 0 (so a second DelUser answers 0,
-- as the Java's does). A user created again with the same
-- id so starts from its opening credit, as in the demo; the view row's TRAN_COUNT keeps
-- counting instead of restarting.
-- Single-partition on userid.
local dels = {
  sql [[DELETE FROM user_table WHERE userid = ?]],
  sql [[DELETE FROM user_usage_table WHERE userid = ?]],
  sql [[DELETE FROM user_balances WHERE userid = ?]],
  sql [[DELETE FROM user_recent_transactions WHERE userid = ?]],
}
local total = sql [[SELECT balance FROM user_balance_total_view WHERE userid = ?]]
local clear = sql [[INSERT INTO user_financial_events (userid, amount, purpose) VALUES (?, ?, 'DelUser: balance cleared')]]

return function(userid)
  local out = {}
  for i, d in ipairs(dels) do out[i] = result_table({ "modified_tuples" }, { { d:exec(userid) } }) end
  local balance = total:values(userid)
  local view_rows = 0
  if balance ~= nil and balance ~= 0 then
    view_rows = 1
    clear:exec(userid, -balance)
  end
  out[#out + 1] = result_table({ "modified_tuples" }, { { view_rows } })
  return table.unpack(out)
end
