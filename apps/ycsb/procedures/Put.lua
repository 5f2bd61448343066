-- Put(keyspace, key, data): stores a YCSB record. data is a packed field map: big-endian
-- int32 field count, then per field int32 name length, name, int32 value length, value.
-- A new key is inserted. For an existing key the fields are merged: old fields not named in
-- data are kept (in their order), then every field of data follows. Returns 0.
-- Single-partition on key.
local find   = sql [[SELECT value FROM Store WHERE keyspace = ? AND key = ?]]
local insert = sql [[INSERT INTO Store (keyspace, key, value) VALUES (?, ?, ?)]]
local update = sql [[UPDATE Store SET value = ? WHERE keyspace = ? AND key = ?]]

local unpack, pack, sub, concat = string.unpack, string.pack, string.sub, table.concat

-- Fields in a packed map; a bounded count keeps a corrupt header from looping for long.
local FIELDS_MAX = 1024

-- The field count of a packed map and the position of its first field.
local function header(blob)
  if #blob < 4 then abort("Put: packed value shorter than its 4-byte header") end
  local count, pos = unpack(">i4", blob)
  if count < 0 or count > FIELDS_MAX then abort("Put: packed value has " .. count .. " fields") end
  return count, pos
end

-- The name of field i, which starts at pos, and the position after it. The value is
-- skipped, not copied: a merge moves whole runs of encoded fields.
local function next_field(blob, pos, i)
  if pos + 3 > #blob then abort("Put: packed value truncated in field " .. i) end
  local name
  name, pos = unpack(">s4", blob, pos)
  if pos + 3 > #blob then abort("Put: packed value truncated in field " .. i) end
  local after = pos + 4 + unpack(">I4", blob, pos)
  if after - 1 > #blob then abort("Put: packed value truncated in field " .. i) end
  return name, after
end

return function(keyspace, key, data)
  local value = find:values(keyspace, key)
  if not value then
    insert:exec(keyspace, key, data)
    return 0
  end
  local new_count, new_end = header(data)
  local replaced = {}
  for i = 1, new_count do
    local name
    name, new_end = next_field(data, new_end, i)
    replaced[name] = true
  end
  -- Old fields not replaced, as runs of their encoding; then every field of data. The
  -- stored fields are read inline, without a call per field (a record has 10): the stored
  -- value was checked when Put wrote it, and a damaged one still fails, in string.unpack
  -- for a field that starts past the end, or in the check after the loop.
  local count, pos = header(value)
  local parts, kept, run = { "" }, 0, nil
  for _ = 1, count do
    local name, at = unpack(">s4", value, pos)
    local after = at + 4 + unpack(">I4", value, at)
    if replaced[name] then
      if run then parts[#parts + 1] = sub(value, run, pos - 1) end
      run = nil
    else
      kept = kept + 1
      run = run or pos
    end
    pos = after
  end
  if pos - 1 > #value then abort("Put: stored value truncated in field " .. count) end
  if run then parts[#parts + 1] = sub(value, run, pos - 1) end
  parts[1] = pack(">i4", kept + new_count)
  parts[#parts + 1] = sub(data, 5, new_end - 1)
  update:exec(concat(parts), keyspace, key)
  return 0
end
