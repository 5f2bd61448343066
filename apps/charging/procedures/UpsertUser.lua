-- UpsertUser(userid, add_balance, is_new, json, purpose, last_seen, txn_id): creates a user
-- (is_new = "Y", with add_balance as opening credit) or updates one (adding add_balance).
-- A txn_id seen before for this user changes nothing and answers status 46. Aborts when a
-- new user exists or an updated one does not. Status 42 on success. Single-partition.
local find_user   = sql [[SELECT userid FROM user_table WHERE userid = ?]]
local find_txn    = sql [[SELECT status, amount FROM user_recent_transactions WHERE userid = ? AND user_txn_id = ?]]
local upsert_user = sql [[UPSERT INTO user_table (userid, user_json_object, user_last_seen) VALUES (?, ?, ?)]]
local new_balance = sql [[INSERT INTO user_balances (userid, tran_count, balance) VALUES (?, 1, ?)]]
local add_balance = sql [[UPDATE user_balances SET balance = balance + ?, tran_count = tran_count + 1 WHERE userid = ?]]
local event       = sql [[INSERT INTO user_financial_events (userid, amount, purpose) VALUES (?, ?, ?)]]
local record      = sql [[INSERT INTO user_recent_transactions (userid, user_txn_id, txn_time, productid, amount, status) VALUES (?, ?, NOW, NULL, ?, ?)]]

local STATUS_OK, TXN_ALREADY_HAPPENED = 42, 46

return function(userid, amount, is_new, json, purpose, last_seen, txn_id)
  local user, prev = batch(find_user:bind(userid), find_txn:bind(userid, txn_id))
  if #prev > 0 then
    set_app_status(TXN_ALREADY_HAPPENED, "Event already happened: status " .. tostring(prev[1].status))
    return prev
  end
  if is_new == "Y" then
    if #user > 0 then abort("UpsertUser: user " .. userid .. " exists but shouldn't") end
    upsert_user:exec(userid, json, last_seen)
    new_balance:exec(userid, amount)
  else
    if #user == 0 then abort("UpsertUser: user " .. userid .. " does not exist") end
    upsert_user:exec(userid, json, last_seen)
    if add_balance:exec(amount, userid) == 0 then abort("UpsertUser: user " .. userid .. " has no balance") end
  end
  event:exec(userid, amount, "Created/updated with " .. amount)
  record:exec(userid, txn_id, amount, STATUS_OK)
  set_app_status(STATUS_OK, "user " .. userid .. " upserted")
  return STATUS_OK
end
