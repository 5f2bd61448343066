-- ScanAll(keyspace, range_min, count): (value, key) rows with key >= range_min (all keys
-- when range_min is nil), ordered by key, at most count rows, read consistently across every
-- partition. Multi-partition.
local from_min = sql [[SELECT value, key FROM Store WHERE keyspace = ? AND key >= ? ORDER BY key, keyspace LIMIT ?]]
local from_start = sql [[SELECT value, key FROM Store WHERE keyspace = ? ORDER BY key, keyspace LIMIT ?]]

return function(keyspace, range_min, count)
  if range_min == nil then
    return from_start:query(keyspace, count)
  end
  return from_min:query(keyspace, range_min, count)
end
