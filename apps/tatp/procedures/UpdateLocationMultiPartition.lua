-- UpdateLocationMultiPartition(partition_key, sub_nbr, vlr_location): sets vlr_location of
-- the subscriber with sub_nbr if this partition holds it. Returns the statement's count
-- table (0 or 1), as the VoltDB TATP kit's class does: its client adds up the counts of
-- every partition and expects exactly 1. Run on every partition; partition_key is ignored.
local update = sql [[UPDATE subscriber SET vlr_location = ? WHERE sub_nbr = ?]]

return function(partition_key, sub_nbr, vlr_location)
  return update:query(vlr_location, sub_nbr)
end
