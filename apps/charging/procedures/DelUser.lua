-- DelUser(userid): removes a user and everything about it. Returns rows deleted.
-- Single-partition on userid.
local dels = {
  sql [[DELETE FROM user_table WHERE userid = ?]],
  sql [[DELETE FROM user_usage_table WHERE userid = ?]],
  sql [[DELETE FROM user_balances WHERE userid = ?]],
  sql [[DELETE FROM user_recent_transactions WHERE userid = ?]],
}

return function(userid)
  local n = 0
  for _, d in ipairs(dels) do n = n + d:exec(userid) end
  return n
end
