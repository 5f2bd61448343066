-- GetSubscriberData(s_id): the subscriber row (0 or 1 row). ddl.sql declares the same
-- procedure as SQL; this file is what VoltDB's kit binds with
-- `CREATE PROCEDURE … FROM CLASS voltdbtatp.db.GetSubscriberData`. Single-partition on s_id.
local select_sub = sql [[SELECT s_id, sub_nbr,
  bit_1, bit_2, bit_3, bit_4, bit_5, bit_6, bit_7, bit_8, bit_9, bit_10,
  hex_1, hex_2, hex_3, hex_4, hex_5, hex_6, hex_7, hex_8, hex_9, hex_10,
  byte2_1, byte2_2, byte2_3, byte2_4, byte2_5, byte2_6, byte2_7, byte2_8, byte2_9, byte2_10,
  msc_location, vlr_location FROM subscriber WHERE s_id = ?]]

return function(s_id)
  return select_sub:query(s_id)
end
