-- UpdateLocation(s_id, vlr_location): sets the subscriber's VLR location. Returns the
-- statement's count table (1, or 0 for an unknown s_id), as the VoltDB TATP kit's class
-- does. Single-partition on s_id.
local update = sql [[UPDATE subscriber SET vlr_location = ? WHERE s_id = ?]]

return function(s_id, vlr_location)
  return update:query(vlr_location, s_id)
end
