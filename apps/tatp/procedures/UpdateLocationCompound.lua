-- UpdateLocationCompound(sub_nbr, vlr_location): the kit's compound procedure (look the
-- number up in subscriber_nbr_map, then UpdateLocation) as one multi-partition transaction.
-- Returns 0 when done, -1 when the number is unknown (the kit's "errors" answer).
local find = sql [[SELECT s_id FROM subscriber_nbr_map WHERE sub_nbr = ?]]
local update = sql [[UPDATE subscriber SET vlr_location = ? WHERE s_id = ?]]

return function(sub_nbr, vlr_location)
  local row = find:first(sub_nbr)
  if not row then return -1 end
  update:exec(vlr_location, row.s_id)
  return 0
end
