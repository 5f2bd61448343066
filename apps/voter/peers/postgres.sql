-- Voter for PostgreSQL (the side-by-side benchmark's peer): the same tables and procedures
-- as apps/voter, as PL/pgSQL functions named ls_<procedure>. Tables are UNLOGGED because
-- Lockstep's run keeps no command log either (nothing reaches the disk on either side).
CREATE UNLOGGED TABLE contestants (
  contestant_number integer     NOT NULL PRIMARY KEY,
  contestant_name   varchar(50) NOT NULL
);
CREATE UNLOGGED TABLE area_code_state (
  area_code smallint   NOT NULL PRIMARY KEY,
  state     varchar(2) NOT NULL
);
CREATE UNLOGGED TABLE votes (
  phone_number      bigint     NOT NULL,
  state             varchar(2) NOT NULL,
  contestant_number integer    NOT NULL
);
-- Lockstep keeps the per-phone count in a materialized view; PostgreSQL counts through an
-- index, which is how a PostgreSQL user would write it (no hot summary rows to lock).
CREATE INDEX votes_phone ON votes (phone_number);
CREATE VIEW v_votes_by_phone_number AS
  SELECT phone_number, COUNT(*) AS num_votes FROM votes GROUP BY phone_number;

CREATE FUNCTION ls_initialize(max_contestants bigint, names_csv text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  existing bigint;
  names text[] := string_to_array(names_csv, ',');
BEGIN
  SELECT COUNT(*) INTO existing FROM contestants;
  IF existing > 0 THEN RETURN existing; END IF;
  IF max_contestants > coalesce(array_length(names, 1), 0) THEN
    RAISE EXCEPTION 'abort: Initialize: only % contestant names were given for % contestants',
      coalesce(array_length(names, 1), 0), max_contestants;
  END IF;
  INSERT INTO contestants SELECT i, names[i] FROM generate_series(1, max_contestants::int) AS i;
  INSERT INTO area_code_state (area_code, state) VALUES --@AREA_CODES@
    ON CONFLICT DO NOTHING;
  RETURN max_contestants;
END $$;

CREATE FUNCTION ls_vote(phone bigint, contestant bigint, max_votes bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  n bigint;
  st varchar(2);
BEGIN
  PERFORM 1 FROM contestants WHERE contestant_number = contestant;
  IF NOT FOUND THEN RETURN 1; END IF;
  -- Two votes of one phone at once must not both pass the limit: serialize per phone.
  PERFORM pg_advisory_xact_lock(phone);
  SELECT COUNT(*) INTO n FROM votes WHERE phone_number = phone;
  IF n >= max_votes THEN RETURN 2; END IF;
  SELECT state INTO st FROM area_code_state WHERE area_code = phone / 10000000;
  INSERT INTO votes (phone_number, state, contestant_number) VALUES (phone, coalesce(st, 'XX'), contestant);
  RETURN 0;
END $$;

CREATE FUNCTION ls_results() RETURNS TABLE (contestant_name varchar, contestant_number bigint, total_votes bigint)
LANGUAGE sql STABLE AS $$
  SELECT a.contestant_name, a.contestant_number::bigint, COUNT(*)::bigint
    FROM votes b JOIN contestants a ON a.contestant_number = b.contestant_number
   GROUP BY a.contestant_name, a.contestant_number
   ORDER BY 3 DESC, 2 ASC, 1 ASC
$$;
