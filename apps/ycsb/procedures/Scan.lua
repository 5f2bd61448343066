-- Scan(partition_key, keyspace, range_min, count): (value, key) rows of this partition with
-- key >= range_min (all keys when range_min is nil), ordered by key, at most count rows.
-- Run on every partition; the client merges the sorted runs. partition_key is ignored.
local from_min = sql [[SELECT value, key FROM Store WHERE keyspace = ? AND key >= ? ORDER BY key, keyspace LIMIT ?]]
local from_start = sql [[SELECT value, key FROM Store WHERE keyspace = ? ORDER BY key, keyspace LIMIT ?]]

return function(partition_key, keyspace, range_min, count)
  if range_min == nil then
    return from_start:query(keyspace, count)
  end
  return from_min:query(keyspace, range_min, count)
end
