-- DeleteCallForwardingCompound(sub_nbr, sf_type, start_time): the kit's compound procedure
-- (its fk mode 4). Not a transaction: a chain of two single-partition calls, as the kit's
-- Java VoltCompoundProcedure: SUBSCRIBER_NBR_MAP.select(sub_nbr) on the number's partition,
-- then DeleteCallForwarding(s_id, sf_type, start_time) on the subscriber's. Returns 0 when
-- done (whether or not a row was deleted), -1 when the number is unknown; a failed call
-- aborts with its message.
compound = true

return function(sub_nbr, sf_type, start_time)
  local found = call("SUBSCRIBER_NBR_MAP.select", sub_nbr)
  if not found.ok then abort("SUBSCRIBER_NBR_MAP.select failed: " .. found.message) end
  local row = found.tables[1][1]
  if not row then return -1 end
  local deleted = call("DeleteCallForwarding", row.s_id, sf_type, start_time)
  if not deleted.ok then abort("DeleteCallForwarding failed: " .. deleted.message) end
  return 0
end
