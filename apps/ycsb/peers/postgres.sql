-- YCSB for PostgreSQL (the side-by-side benchmark's peer): the Store table of apps/ycsb and
-- its procedures as functions named ls_<procedure>. UNLOGGED: Lockstep's run keeps no
-- command log either. Keys sort bytewise (COLLATE "C"), as in Lockstep, so scans agree.
CREATE UNLOGGED TABLE store (
  keyspace bytea NOT NULL,
  key      varchar(128) COLLATE "C" NOT NULL,
  value    bytea NOT NULL,
  PRIMARY KEY (key, keyspace)
);

CREATE FUNCTION ls_get(p_keyspace bytea, p_key text) RETURNS TABLE (value bytea) LANGUAGE sql STABLE AS $$
  SELECT value FROM store WHERE keyspace = p_keyspace AND key = p_key
$$;

-- Big-endian int32 at byte offset off (0-based).
CREATE FUNCTION ls_i32(b bytea, off int) RETURNS int LANGUAGE sql IMMUTABLE AS $$
  SELECT (get_byte(b, off) << 24) | (get_byte(b, off + 1) << 16) | (get_byte(b, off + 2) << 8) | get_byte(b, off + 3)
$$;

-- The fields of a packed map, in order; aborts on a malformed one (at most 1024 fields).
CREATE FUNCTION ls_unpack(b bytea) RETURNS TABLE (ord int, name bytea, val bytea) LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE n int; pos int := 4; l int; i int; nm bytea;
BEGIN
  IF length(b) < 4 THEN RAISE EXCEPTION 'abort: Put: packed value shorter than its 4-byte header'; END IF;
  n := ls_i32(b, 0);
  IF n < 0 OR n > 1024 THEN RAISE EXCEPTION 'abort: Put: packed value has % fields', n; END IF;
  FOR i IN 1..n LOOP
    IF pos + 4 > length(b) THEN RAISE EXCEPTION 'abort: Put: packed value truncated in field %', i; END IF;
    l := ls_i32(b, pos);
    nm := substring(b FROM pos + 5 FOR l);
    pos := pos + 4 + l;
    IF pos + 4 > length(b) THEN RAISE EXCEPTION 'abort: Put: packed value truncated in field %', i; END IF;
    l := ls_i32(b, pos);
    ord := i; name := nm; val := substring(b FROM pos + 5 FOR l);
    pos := pos + 4 + l;
    RETURN NEXT;
  END LOOP;
END $$;

-- Insert, or merge: old fields not named in data (in their order), then data's fields.
CREATE FUNCTION ls_put(p_keyspace bytea, p_key text, p_data bytea) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE old bytea; merged bytea;
BEGIN
  SELECT value INTO old FROM store WHERE keyspace = p_keyspace AND key = p_key FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO store VALUES (p_keyspace, p_key, p_data);
    RETURN 0;
  END IF;
  WITH n AS (SELECT * FROM ls_unpack(p_data)),
       o AS (SELECT * FROM ls_unpack(old) x WHERE NOT EXISTS (SELECT 1 FROM n WHERE n.name = x.name)),
       m AS (SELECT 0 AS grp, * FROM o UNION ALL SELECT 1, * FROM n)
  SELECT int4send(COUNT(*)::int) || coalesce(string_agg(int4send(length(m.name)) || m.name || int4send(length(m.val)) || m.val,
         ''::bytea ORDER BY m.grp, m.ord), ''::bytea)
    INTO merged FROM m;
  UPDATE store SET value = merged WHERE keyspace = p_keyspace AND key = p_key;
  RETURN 0;
END $$;

-- Two queries, not one with "p_min IS NULL OR …", so that the range uses the index.
CREATE FUNCTION ls_scanall(p_keyspace bytea, p_min text, p_count bigint)
RETURNS TABLE (value bytea, key varchar) LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF p_min IS NULL THEN
    RETURN QUERY SELECT s.value, s.key FROM store s WHERE s.keyspace = p_keyspace ORDER BY s.key, s.keyspace LIMIT p_count;
  ELSE
    RETURN QUERY SELECT s.value, s.key FROM store s WHERE s.keyspace = p_keyspace AND s.key >= p_min
      ORDER BY s.key, s.keyspace LIMIT p_count;
  END IF;
END $$;
CREATE FUNCTION ls_scan(p_key bigint, p_keyspace bytea, p_min text, p_count bigint)
RETURNS TABLE (value bytea, key varchar) LANGUAGE sql STABLE AS $$
  SELECT * FROM ls_scanall(p_keyspace, p_min, p_count)
$$;
