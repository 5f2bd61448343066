-- TATP for PostgreSQL (the side-by-side benchmark's peer): the tables of apps/tatp and its
-- procedures as PL/pgSQL functions named ls_<procedure>, with the same parameters and answers.
-- UNLOGGED: Lockstep's run keeps no command log either. Random choices use random()
-- (Lockstep's use ctx.random): the same distributions, not the same draws.
CREATE UNLOGGED TABLE subscriber (
  s_id bigint NOT NULL PRIMARY KEY,
  sub_nbr varchar(15) COLLATE "C" NOT NULL UNIQUE,
  bit_1 smallint, bit_2 smallint, bit_3 smallint, bit_4 smallint, bit_5 smallint, bit_6 smallint, bit_7 smallint, bit_8 smallint, bit_9 smallint, bit_10 smallint, hex_1 smallint, hex_2 smallint, hex_3 smallint, hex_4 smallint, hex_5 smallint, hex_6 smallint, hex_7 smallint, hex_8 smallint, hex_9 smallint, hex_10 smallint, byte2_1 smallint, byte2_2 smallint, byte2_3 smallint, byte2_4 smallint, byte2_5 smallint, byte2_6 smallint, byte2_7 smallint, byte2_8 smallint, byte2_9 smallint, byte2_10 smallint,
  msc_location bigint,
  vlr_location bigint
);
CREATE UNLOGGED TABLE access_info (
  s_id bigint NOT NULL, ai_type smallint NOT NULL, data1 smallint, data2 smallint,
  data3 varchar(3), data4 varchar(5), PRIMARY KEY (s_id, ai_type)
);
CREATE UNLOGGED TABLE special_facility (
  s_id bigint NOT NULL, sf_type smallint NOT NULL, is_active smallint NOT NULL,
  error_cntrl smallint, data_a smallint, data_b varchar(5), PRIMARY KEY (s_id, sf_type)
);
CREATE UNLOGGED TABLE call_forwarding (
  s_id bigint NOT NULL, sf_type smallint NOT NULL, start_time smallint NOT NULL,
  end_time smallint, numberx varchar(15), PRIMARY KEY (s_id, sf_type, start_time)
);

-- Uniform integer in lo..hi.
CREATE FUNCTION ls_rand(lo int, hi int) RETURNS int LANGUAGE sql VOLATILE AS $$
  SELECT lo + floor(random() * (hi - lo + 1))::int
$$;
CREATE FUNCTION ls_letters(n int) RETURNS text LANGUAGE sql VOLATILE AS $$
  SELECT string_agg(chr(64 + ls_rand(1, 26)), '') FROM generate_series(1, n)
$$;
CREATE FUNCTION ls_digits(n int) RETURNS text LANGUAGE sql VOLATILE AS $$
  SELECT string_agg(chr(47 + ls_rand(1, 10)), '') FROM generate_series(1, n)
$$;
-- The first k of a random permutation of vals.
CREATE FUNCTION ls_pick(vals int[], k int) RETURNS SETOF int LANGUAGE sql VOLATILE AS $$
  SELECT v FROM unnest(vals) AS v ORDER BY random() LIMIT k
$$;

CREATE FUNCTION ls_loadsubscriber(p_s_id bigint, p_sub_nbr text, p_bit_1 bigint, p_bit_2 bigint, p_bit_3 bigint, p_bit_4 bigint, p_bit_5 bigint, p_bit_6 bigint, p_bit_7 bigint, p_bit_8 bigint, p_bit_9 bigint, p_bit_10 bigint, p_hex_1 bigint, p_hex_2 bigint, p_hex_3 bigint, p_hex_4 bigint, p_hex_5 bigint, p_hex_6 bigint, p_hex_7 bigint, p_hex_8 bigint, p_hex_9 bigint, p_hex_10 bigint, p_byte2_1 bigint, p_byte2_2 bigint, p_byte2_3 bigint, p_byte2_4 bigint, p_byte2_5 bigint, p_byte2_6 bigint, p_byte2_7 bigint, p_byte2_8 bigint, p_byte2_9 bigint, p_byte2_10 bigint,
    p_msc bigint, p_vlr bigint, p_seed bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  n bigint := 1;
  t int;
  st int;
BEGIN
  INSERT INTO subscriber VALUES (p_s_id, p_sub_nbr, p_bit_1, p_bit_2, p_bit_3, p_bit_4, p_bit_5, p_bit_6, p_bit_7, p_bit_8, p_bit_9, p_bit_10, p_hex_1, p_hex_2, p_hex_3, p_hex_4, p_hex_5, p_hex_6, p_hex_7, p_hex_8, p_hex_9, p_hex_10, p_byte2_1, p_byte2_2, p_byte2_3, p_byte2_4, p_byte2_5, p_byte2_6, p_byte2_7, p_byte2_8, p_byte2_9, p_byte2_10, p_msc, p_vlr);
  FOR t IN SELECT ls_pick(ARRAY[1,2,3,4], ls_rand(1, 4)) LOOP
    INSERT INTO access_info VALUES (p_s_id, t, ls_rand(0, 255), ls_rand(0, 255), ls_letters(3), ls_letters(5));
    n := n + 1;
  END LOOP;
  FOR t IN SELECT ls_pick(ARRAY[1,2,3,4], ls_rand(1, 4)) LOOP
    INSERT INTO special_facility VALUES (p_s_id, t, CASE WHEN random() < 0.85 THEN 1 ELSE 0 END,
      ls_rand(0, 255), ls_rand(0, 255), ls_letters(5));
    n := n + 1;
    FOR st IN SELECT ls_pick(ARRAY[0,8,16], ls_rand(0, 3)) LOOP
      INSERT INTO call_forwarding VALUES (p_s_id, t, st, st + ls_rand(1, 8), ls_digits(15));
      n := n + 1;
    END LOOP;
  END LOOP;
  RETURN n;
END $$;

CREATE FUNCTION ls_reset() RETURNS TABLE (sf bigint, ai bigint, sub bigint, cf bigint, map bigint)
LANGUAGE plpgsql AS $$
DECLARE a bigint; b bigint; c bigint; d bigint;
BEGIN
  DELETE FROM special_facility; GET DIAGNOSTICS a = ROW_COUNT;
  DELETE FROM access_info; GET DIAGNOSTICS b = ROW_COUNT;
  DELETE FROM subscriber; GET DIAGNOSTICS c = ROW_COUNT;
  DELETE FROM call_forwarding; GET DIAGNOSTICS d = ROW_COUNT;
  RETURN QUERY SELECT a, b, c, d, 0::bigint;
END $$;

CREATE FUNCTION ls_getsubscriberdata(p_s_id bigint) RETURNS SETOF subscriber LANGUAGE sql STABLE AS $$
  SELECT * FROM subscriber WHERE s_id = p_s_id
$$;
CREATE FUNCTION ls_getnewdestination(p_s_id bigint, p_sf_type bigint, p_start bigint, p_end bigint)
RETURNS TABLE (numberx varchar) LANGUAGE sql STABLE AS $$
  SELECT cf.numberx FROM special_facility sf, call_forwarding cf
   WHERE sf.s_id = p_s_id AND sf.sf_type = p_sf_type AND sf.is_active = 1
     AND cf.s_id = sf.s_id AND cf.sf_type = sf.sf_type
     AND cf.start_time <= p_start AND p_end < cf.end_time
$$;
CREATE FUNCTION ls_getaccessdata(p_s_id bigint, p_ai_type bigint)
RETURNS TABLE (data1 smallint, data2 smallint, data3 varchar, data4 varchar) LANGUAGE sql STABLE AS $$
  SELECT data1, data2, data3, data4 FROM access_info WHERE s_id = p_s_id AND ai_type = p_ai_type
$$;
CREATE FUNCTION ls_updatesubscriberdata(p_s_id bigint, p_bit_1 bigint, p_data_a bigint, p_sf_type bigint)
RETURNS TABLE (a bigint, b bigint) LANGUAGE plpgsql AS $$
DECLARE x bigint; y bigint;
BEGIN
  UPDATE subscriber SET bit_1 = p_bit_1 WHERE s_id = p_s_id; GET DIAGNOSTICS x = ROW_COUNT;
  UPDATE special_facility SET data_a = p_data_a WHERE s_id = p_s_id AND sf_type = p_sf_type;
  GET DIAGNOSTICS y = ROW_COUNT;
  RETURN QUERY SELECT x, y;
END $$;
CREATE FUNCTION ls_updatelocation(p_s_id bigint, p_vlr bigint) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE x bigint;
BEGIN
  UPDATE subscriber SET vlr_location = p_vlr WHERE s_id = p_s_id; GET DIAGNOSTICS x = ROW_COUNT;
  RETURN x;
END $$;
CREATE FUNCTION ls_insertcallforwarding(p_s_id bigint, p_bit1 bigint, p_data_a bigint, p_sf_type bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE x bigint; st int := (ARRAY[0,8,16])[ls_rand(1, 3)];
BEGIN
  PERFORM 1 FROM special_facility WHERE s_id = p_s_id AND sf_type = p_sf_type;
  IF NOT FOUND THEN RETURN 0; END IF;
  INSERT INTO call_forwarding VALUES (p_s_id, p_sf_type, st, ls_rand(1, 24), ls_digits(15))
    ON CONFLICT DO NOTHING;
  GET DIAGNOSTICS x = ROW_COUNT;
  RETURN x;
END $$;
CREATE FUNCTION ls_deletecallforwarding(p_s_id bigint, p_sf_type bigint, p_start bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE x bigint;
BEGIN
  DELETE FROM call_forwarding WHERE s_id = p_s_id AND sf_type = p_sf_type AND start_time = p_start;
  GET DIAGNOSTICS x = ROW_COUNT;
  RETURN x;
END $$;
CREATE FUNCTION ls_mapsubstringtonumbernoview(p_nbr text) RETURNS TABLE (s_id bigint) LANGUAGE sql STABLE AS $$
  SELECT s_id FROM subscriber WHERE sub_nbr = p_nbr ORDER BY s_id
$$;
CREATE FUNCTION ls_mapsubstringtonumberallpartitions(p_key bigint, p_nbr text) RETURNS TABLE (s_id bigint)
LANGUAGE sql STABLE AS $$
  SELECT s_id FROM subscriber WHERE sub_nbr = p_nbr
$$;
CREATE FUNCTION ls_updatelocationmultipartition(p_key bigint, p_nbr text, p_vlr bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE x bigint;
BEGIN
  UPDATE subscriber SET vlr_location = p_vlr WHERE sub_nbr = p_nbr; GET DIAGNOSTICS x = ROW_COUNT;
  RETURN x;
END $$;
CREATE FUNCTION ls_insertcallforwardingmultipartition(p_key bigint, p_nbr text, p_bit1 bigint, p_data_a bigint,
    p_sf_type bigint) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE sid bigint;
BEGIN
  SELECT s_id INTO sid FROM subscriber WHERE sub_nbr = p_nbr;
  IF NOT FOUND THEN RETURN 0; END IF;
  RETURN ls_insertcallforwarding(sid, p_bit1, p_data_a, p_sf_type);
END $$;
CREATE FUNCTION ls_deletecallforwardingmultipartition(p_key bigint, p_nbr text, p_sf_type bigint, p_start bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE sid bigint;
BEGIN
  SELECT s_id INTO sid FROM subscriber WHERE sub_nbr = p_nbr;
  IF NOT FOUND THEN RETURN 0; END IF;
  RETURN ls_deletecallforwarding(sid, p_sf_type, p_start);
END $$;
