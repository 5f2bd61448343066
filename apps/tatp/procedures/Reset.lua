-- Reset(): deletes every TATP row. Returns the rows deleted per table, in the order of
-- VoltDB's kit (special_facility, access_info, subscriber, call_forwarding,
-- subscriber_nbr_map). Multi-partition.
local del_sf  = sql [[DELETE FROM special_facility]]
local del_ai  = sql [[DELETE FROM access_info]]
local del_sub = sql [[DELETE FROM subscriber]]
local del_cf  = sql [[DELETE FROM call_forwarding]]
local del_map = sql [[DELETE FROM subscriber_nbr_map]]

return function()
  return batch(del_sf:bind(), del_ai:bind(), del_sub:bind(), del_cf:bind(), del_map:bind())
end
