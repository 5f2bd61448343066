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

-- Parses a packed map into an array of {name, value}; aborts on malformed input.
local function unpack_fields(blob)
  if #blob < 4 then abort("Put: packed value shorter than its 4-byte header") end
  local count, pos = string.unpack(">i4", blob)
  if count < 0 or count > FIELDS_MAX then abort("Put: packed value has " .. count .. " fields") end
  local fields = {}
  for i = 1, count do
    if pos + 3 > #blob then abort("Put: packed value truncated in field " .. i) end
    local name, value
    name, pos = string.unpack(">s4", blob, pos)
    if pos + 3 > #blob then abort("Put: packed value truncated in field " .. i) end
    value, pos = string.unpack(">s4", blob, pos)
    fields[i] = { name, value }
  end
  return fields
end

local function pack_fields(fields)
  local parts = { string.pack(">i4", #fields) }
  for _, f in ipairs(fields) do
    parts[#parts + 1] = string.pack(">s4>s4", f[1], f[2])
  end
  return table.concat(parts)
end

return function(keyspace, key, data)
  local old = find:first(keyspace, key)
  if not old then
    insert:exec(keyspace, key, data)
    return 0
  end
  local new_fields = unpack_fields(data)
  local replaced = {}
  for _, f in ipairs(new_fields) do replaced[f[1]] = true end
  local merged = {}
  for _, f in ipairs(unpack_fields(old.value)) do
    if not replaced[f[1]] then merged[#merged + 1] = f end
  end
  for _, f in ipairs(new_fields) do merged[#merged + 1] = f end
  update:exec(pack_fields(merged), keyspace, key)
  return 0
end
