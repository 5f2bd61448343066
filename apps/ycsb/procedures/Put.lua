-- Put(keyspace, key, data): stores a YCSB record. data is a packed field map: big-endian
-- int32 field count, then per field int32 name length, name, int32 value length, value.
-- A new key is inserted. For an existing key the fields are merged: old fields not named in
-- data are kept (in their order), then every field of data follows. Returns 0.
-- Single-partition on key.
local find   = sql [[SELECT value FROM Store WHERE keyspace = ? AND key = ?]]
local insert = sql [[INSERT INTO Store (keyspace, key, value) VALUES (?, ?, ?)]]
local update = sql [[UPDATE Store SET value = ? WHERE keyspace = ? AND key = ?]]

-- Fields in a packed map; a bounded count keeps a corrupt header from looping for long.
local FIELDS_MAX = 1024

-- The field count of a packed map and the position of its first field.
local function header(blob)
  if #blob < 4 then abort("Put: packed value shorter than its 4-byte header") end
  local count, pos = string.unpack(">i4", blob)
  if count < 0 or count > FIELDS_MAX then abort("Put: packed value has " .. count .. " fields") end
  return count, pos
end

-- The name of field i, which starts at pos, and the position after it. The value is
-- skipped, not copied: a merge moves whole runs of encoded fields.
local function next_field(blob, pos, i)
  if pos + 3 > #blob then abort("Put: packed value truncated in field " .. i) end
  local name
  name, pos = string.unpack(">s4", blob, pos)
  if pos + 3 > #blob then abort("Put: packed value truncated in field " .. i) end
  local after = pos + 4 + string.unpack(">I4", blob, pos)
  if after - 1 > #blob then abort("Put: packed value truncated in field " .. i) end
  return name, after
end

return function(keyspace, key, data)
  local old = find:first(keyspace, key)
  if not old then
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
  -- Old fields not replaced, as runs of their encoding; then every field of data.
  local value = old.value
  local count, pos = header(value)
  local parts, kept, run = { "" }, 0, nil
  for i = 1, count do
    local name, after = next_field(value, pos, i)
    if replaced[name] then
      if run then parts[#parts + 1] = value:sub(run, pos - 1) end
      run = nil
    else
      kept = kept + 1
      run = run or pos
    end
    pos = after
  end
  if run then parts[#parts + 1] = value:sub(run, pos - 1) end
  parts[1] = string.pack(">i4", kept + new_count)
  parts[#parts + 1] = data:sub(5, new_end - 1)
  update:exec(table.concat(parts), keyspace, key)
  return 0
end
