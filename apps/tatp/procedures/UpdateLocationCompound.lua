-- UpdateLocationCompound(sub_nbr, vlr_location): the kit's compound procedure (its fk mode
-- 4). Not a transaction: a chain of two single-partition calls, as the kit's Java
-- VoltCompoundProcedure: SUBSCRIBER_NBR_MAP.select(sub_nbr) on the number's partition, then
-- UpdateLocation(s_id, vlr_location) on the subscriber's. Returns 0 when done, -1 when the
-- number is unknown; a failed call aborts with its message (the update is not undone if
-- something fails after it: nothing is, across a compound procedure's calls).
compound = true

return function(sub_nbr, vlr_location)
  local found = call("SUBSCRIBER_NBR_MAP.select", sub_nbr)
  if not found.ok then abort("SUBSCRIBER_NBR_MAP.select failed: " .. found.message) end
  local row = found.tables[1][1]
  if not row then return -1 end
  local updated = call("UpdateLocation", row.s_id, vlr_location)
  if not updated.ok then abort("UpdateLocation failed: " .. updated.message) end
  return 0
end
