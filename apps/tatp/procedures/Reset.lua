-- Reset(): deletes every TATP row. Returns the rows deleted per table (5 tables as in
-- VoltDB's kit, the last being 0: Lockstep has no subscriber_nbr_map). Multi-partition.
local del_sf  = sql [[DELETE FROM special_facility]]
local del_ai  = sql [[DELETE FROM access_info]]
local del_sub = sql [[DELETE FROM subscriber]]
local del_cf  = sql [[DELETE FROM call_forwarding]]

return function()
  local sf, ai, sub, cf = batch(del_sf:bind(), del_ai:bind(), del_sub:bind(), del_cf:bind())
  return sf, ai, sub, cf, 0
end
