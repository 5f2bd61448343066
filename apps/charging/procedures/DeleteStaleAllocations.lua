-- DeleteStaleAllocations(): housekeeping, as the charging demo's Java class does: finds up
-- to 1000 reservations last touched more than 5 minutes ago, oldest first, and deletes
-- each; answers one count table per reservation deleted (none when there is nothing to
-- do). The demo declares it DIRECTED (run on each partition by its task); apps/charging
-- declares it multi-partition, which does the same over the whole database at once.
local find_stale = sql [[SELECT * FROM user_usage_table WHERE lastdate < DATEADD(MILLISECOND, ?, NOW)
 ORDER BY lastdate, userid, productid, sessionid LIMIT 1000]]
local del_alloc = sql [[DELETE FROM user_usage_table WHERE userid = ? AND productid = ? AND sessionid = ?]]

-- Reservations untouched for longer than this are stale (milliseconds, negative: the past).
local STALE_AFTER_MS = -300000

return function()
  local deletes = {}
  for row in find_stale:query(STALE_AFTER_MS):rows() do
    deletes[#deletes + 1] = del_alloc:bind(row.userid, row.productid, row.sessionid)
  end
  if #deletes == 0 then return end
  return batch(table.unpack(deletes))
end
