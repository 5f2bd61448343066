-- InsertCallForwardingCompound(sub_nbr, bit1, data_a, sf_type): the kit's compound procedure
-- (its fk mode 4). Not a transaction: a chain of two single-partition calls, as the kit's
-- Java VoltCompoundProcedure: SUBSCRIBER_NBR_MAP.select(sub_nbr) on the number's partition,
-- then InsertCallForwarding(s_id, bit1, data_a, sf_type) on the subscriber's (which, as the
-- kit's, replaces a row of the subscriber's lowest facility type). Returns 0 when done, -1
-- when the number is unknown; a failed call aborts with its message.
compound = true

return function(sub_nbr, bit1, data_a, sf_type)
  local found = call("SUBSCRIBER_NBR_MAP.select", sub_nbr)
  if not found.ok then abort("SUBSCRIBER_NBR_MAP.select failed: " .. found.message) end
  local row = found.tables[1][1]
  if not row then return -1 end
  local inserted = call("InsertCallForwarding", row.s_id, bit1, data_a, sf_type)
  if not inserted.ok then abort("InsertCallForwarding failed: " .. inserted.message) end
  return 0
end
