-- GetAndLockUser(userid): reads a user and takes its soft lock, as the charging demo's Java
-- class does (a lock lasts 50 ms; its id is this transaction's unique id, which the caller
-- hands to UpdateLockedUser).
--  * Unknown user: aborts ("User N does not exist").
--  * Lock held (its expiry is later than now): app status 53, "User N has already been
--    locked by session S"; the lock is left as it is; four tables: the user row (with
--    THE_CURRENT_TIMESTAMP), its balance row, its reservations (by product) and its
--    recorded transactions (USER_TXN_ID, TXN_TIME).
--  * Otherwise: app status 54, "User N newly locked by session S"; the lock's update count,
--    then the same four tables (the user row showing the new lock).
-- Single-partition on userid.
local get_user = sql [[SELECT userid, user_json_object, user_last_seen, user_softlock_sessionid, user_softlock_expiry,
       NOW AS the_current_timestamp
  FROM user_table WHERE userid = ?]]
local get_balance = sql [[SELECT * FROM user_balances WHERE userid = ?]]
local get_usage = sql [[SELECT * FROM user_usage_table WHERE userid = ? ORDER BY productid]]
local get_txns = sql [[SELECT user_txn_id, txn_time FROM user_recent_transactions WHERE userid = ? ORDER BY txn_time, user_txn_id]]
-- NOW is the transaction's time, the same value as the_current_timestamp read above.
local lock = sql [[UPDATE user_table SET user_softlock_sessionid = ?, user_softlock_expiry = DATEADD(MILLISECOND, ?, NOW)
 WHERE userid = ?]]

local RECORD_ALREADY_SOFTLOCKED, RECORD_HAS_BEEN_SOFTLOCKED = 53, 54
-- How long a soft lock lasts (milliseconds).
local LOCK_TIMEOUT_MS = 50
-- What Java reads from a NULL BIGINT (VoltDB's NULL), printed in a status string.
local NULL_BIGINT = math.mininteger

return function(userid)
  local user = get_user:first(userid)
  if not user then abort("User " .. userid .. " does not exist") end
  local reads = { get_user:bind(userid), get_balance:bind(userid), get_usage:bind(userid), get_txns:bind(userid) }
  local expiry = user.user_softlock_expiry
  if expiry ~= nil and expiry > user.the_current_timestamp then
    local holder = user.user_softlock_sessionid or NULL_BIGINT
    set_app_status(RECORD_ALREADY_SOFTLOCKED, "User " .. userid .. " has already been locked by session " .. holder)
    return batch(table.unpack(reads))
  end
  set_app_status(RECORD_HAS_BEEN_SOFTLOCKED, "User " .. userid .. " newly locked by session " .. ctx.txn_id)
  return batch(lock:bind(ctx.txn_id, LOCK_TIMEOUT_MS, userid), table.unpack(reads))
end
