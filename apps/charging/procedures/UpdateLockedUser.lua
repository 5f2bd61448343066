-- UpdateLockedUser(userid, session_id, json): stores a user's JSON and clears its soft lock,
-- as the charging demo's Java class does.
--  * Unknown user: aborts ("User N does not exist").
--  * No lock set, or the lock is session_id's: the update's count table, no app status.
--  * A lock set by another session, even one past its expiry (the Java checks only that an
--    expiry is set): nothing changes, app status 54, "User N currently locked by session S.
--    Expires at <expiry>", no table.
-- Single-partition on userid.
local get_user = sql [[SELECT userid, user_softlock_sessionid, user_softlock_expiry, CAST(user_softlock_expiry AS VARCHAR) AS expiry_text
  FROM user_table WHERE userid = ?]]
local unlock_and_update = sql [[UPDATE user_table SET user_softlock_sessionid = NULL, user_softlock_expiry = NULL, user_json_object = ?
 WHERE userid = ?]]

local RECORD_HAS_BEEN_SOFTLOCKED = 54
-- What Java reads from a NULL BIGINT (VoltDB's NULL), compared and printed as the Java does.
local NULL_BIGINT = math.mininteger

return function(userid, session_id, json)
  local user = get_user:first(userid)
  if not user then abort("User " .. userid .. " does not exist") end
  local holder = user.user_softlock_sessionid or NULL_BIGINT
  if user.user_softlock_expiry == nil or holder == session_id then
    return batch(unlock_and_update:bind(json, userid))
  end
  set_app_status(RECORD_HAS_BEEN_SOFTLOCKED,
    "User " .. userid .. " currently locked by session " .. holder .. ". Expires at " .. user.expiry_text)
end
