-- UpdateSubscriberData(s_id, bit_1, data_a, sf_type): sets the subscriber's bit_1 and the
-- data_a of its special facility sf_type, in one transaction. Returns two 1x1 tables: rows
-- changed in subscriber, rows changed in special_facility (0 when the facility is absent,
-- which TATP counts as a miss, not an error). Single-partition on s_id.
local set_bit = sql [[UPDATE subscriber SET bit_1 = ? WHERE s_id = ?]]
local set_data = sql [[UPDATE special_facility SET data_a = ? WHERE s_id = ? AND sf_type = ?]]

return function(s_id, bit_1, data_a, sf_type)
  local a, b = batch(set_bit:bind(bit_1, s_id), set_data:bind(data_a, s_id, sf_type))
  return a, b
end
