-- UpsertUser(userid, add_balance, is_new, json, purpose, last_seen, txn_id): creates or
-- updates a user, answering as the charging demo's Java class does (purpose is unused
-- there too).
--  * A txn_id already recorded for the user: app status 46, "Event already happened at
--    <its time>", no table, nothing changed.
--  * is_new "Y" (any case): aborts if the user exists ("User N exists but shouldn't");
--    else records the transaction, writes the user row, puts the opening credit on the
--    financial stream and refreshes user_balances from the stream's view. App status 42,
--    "Created user N with opening credit of C"; four count tables.
--  * Otherwise: aborts if the user does not exist or has no balance row; the same writes,
--    then deletes the user's other recorded transactions older than 120 minutes. App status
--    42, "Updated user N - added credit of C; balance now B"; five count tables.
-- Single-partition on userid.
local get_user = sql [[SELECT userid FROM user_table WHERE userid = ?]]
local get_balance = sql [[SELECT balance FROM user_balances WHERE userid = ?]]
-- The time as text, for the status string (VoltDB prints a TIMESTAMP this way).
local get_txn = sql [[SELECT CAST(txn_time AS VARCHAR) FROM user_recent_transactions WHERE userid = ? AND user_txn_id = ?]]
local add_txn = sql [[INSERT INTO user_recent_transactions (userid, user_txn_id, txn_time, amount) VALUES (?, ?, NOW, ?)]]
local purge_txns = sql [[DELETE FROM user_recent_transactions
 WHERE userid = ? AND user_txn_id <> ? AND txn_time < DATEADD(MINUTE, ?, NOW)]]
local upsert_user = sql [[UPSERT INTO user_table (userid, user_json_object, user_last_seen) VALUES (?, ?, ?)]]
local add_credit = sql [[INSERT INTO user_financial_events (userid, amount, purpose) VALUES (?, ?, ?)]]
local refresh_balance = sql [[UPSERT INTO user_balances SELECT userid, tran_count, balance FROM user_balance_total_view WHERE userid = ?]]

local STATUS_OK, TXN_ALREADY_HAPPENED = 42, 46
-- Other recorded transactions older than this go on an update (minutes, negative: the past).
local PURGE_MINUTES = -120

return function(userid, add_balance, is_new, json, purpose, last_seen, txn_id)
  local user = get_user:values(userid)
  local balance = get_balance:values(userid)
  local happened_at = get_txn:values(userid, txn_id)
  if happened_at then
    set_app_status(TXN_ALREADY_HAPPENED, "Event already happened at " .. happened_at)
    return
  end
  if string.upper(is_new) == "Y" then
    if user then abort("User " .. userid .. " exists but shouldn't") end
    local status = "Created user " .. userid .. " with opening credit of " .. add_balance
    set_app_status(STATUS_OK, status)
    return batch(add_txn:bind(userid, txn_id, add_balance), upsert_user:bind(userid, json, last_seen),
      add_credit:bind(userid, add_balance, status), refresh_balance:bind(userid))
  end
  if not user then abort("User " .. userid .. " does not exist") end
  if not balance then abort("User " .. userid .. " exists but has no financial history...") end
  local status = "Updated user " .. userid .. " - added credit of " .. add_balance .. "; balance now " .. (balance + add_balance)
  set_app_status(STATUS_OK, status)
  return batch(add_txn:bind(userid, txn_id, add_balance), upsert_user:bind(userid, json, last_seen),
    add_credit:bind(userid, add_balance, status), refresh_balance:bind(userid), purge_txns:bind(userid, txn_id, PURGE_MINUTES))
end
