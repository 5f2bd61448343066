-- Telco charging for PostgreSQL (the side-by-side benchmark's peer): the tables of
-- apps/charging and its procedures as PL/pgSQL functions named ls_<procedure>, answering
-- with the same statuses. UNLOGGED: Lockstep's run keeps no command log either. The export
-- stream user_financial_events becomes an append-only table (the same write per event).
-- Multi-table answers come back as one row that the benchmark splits into tables.
CREATE UNLOGGED TABLE product_table (
  productid bigint NOT NULL PRIMARY KEY, productname varchar(50) NOT NULL, unit_cost bigint NOT NULL
);
CREATE UNLOGGED TABLE user_table (
  userid bigint NOT NULL PRIMARY KEY, user_json_object varchar(8000),
  user_last_seen timestamp DEFAULT now(), user_softlock_sessionid bigint, user_softlock_expiry timestamp
);
CREATE UNLOGGED TABLE user_recent_transactions (
  userid bigint NOT NULL, user_txn_id varchar(128) NOT NULL, txn_time timestamp DEFAULT now() NOT NULL,
  productid bigint, amount bigint, status smallint, PRIMARY KEY (userid, user_txn_id)
);
CREATE UNLOGGED TABLE user_financial_events (
  userid bigint NOT NULL, amount bigint NOT NULL, purpose varchar(80) NOT NULL
);
CREATE UNLOGGED TABLE user_usage_table (
  userid bigint NOT NULL, productid bigint NOT NULL, allocated_units bigint NOT NULL,
  sessionid bigint NOT NULL, lastdate timestamp NOT NULL, PRIMARY KEY (userid, productid, sessionid)
);
CREATE UNLOGGED TABLE user_balances (
  userid bigint NOT NULL PRIMARY KEY, tran_count bigint NOT NULL, balance bigint NOT NULL
);
-- Lockstep starts a session with the transaction's id; here a sequence gives unique ids.
CREATE SEQUENCE session_ids START 1000000;

-- Value reserved by a user's sessions.
CREATE FUNCTION ls_reserved(p_user bigint) RETURNS bigint LANGUAGE sql STABLE AS $$
  SELECT coalesce(SUM(u.allocated_units * p.unit_cost), 0)::bigint
    FROM user_usage_table u JOIN product_table p ON p.productid = u.productid WHERE u.userid = p_user
$$;

-- Answers (app_status, status, amount) for a repeat, else (42, NULL, NULL).
CREATE FUNCTION ls_upsertuser(p_user bigint, p_amount bigint, p_is_new text, p_json text, p_purpose text,
    p_last_seen bigint, p_txn text) RETURNS TABLE (app_status bigint, status bigint, amount bigint)
LANGUAGE plpgsql AS $$
DECLARE prev record; found_user boolean; n bigint;
BEGIN
  SELECT true INTO found_user FROM user_table WHERE userid = p_user FOR UPDATE;
  SELECT t.status, t.amount INTO prev FROM user_recent_transactions t WHERE t.userid = p_user AND t.user_txn_id = p_txn;
  IF FOUND THEN RETURN QUERY SELECT 46::bigint, prev.status::bigint, prev.amount; RETURN; END IF;
  IF p_is_new = 'Y' THEN
    IF found_user THEN RAISE EXCEPTION 'abort: UpsertUser: user % exists but shouldn''t', p_user; END IF;
    INSERT INTO user_table (userid, user_json_object, user_last_seen)
      VALUES (p_user, p_json, to_timestamp(p_last_seen / 1e6));
    INSERT INTO user_balances VALUES (p_user, 1, p_amount);
  ELSE
    IF found_user IS NULL THEN RAISE EXCEPTION 'abort: UpsertUser: user % does not exist', p_user; END IF;
    UPDATE user_table SET user_json_object = p_json, user_last_seen = to_timestamp(p_last_seen / 1e6) WHERE userid = p_user;
    UPDATE user_balances SET balance = balance + p_amount, tran_count = tran_count + 1 WHERE userid = p_user;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n = 0 THEN RAISE EXCEPTION 'abort: UpsertUser: user % has no balance', p_user; END IF;
  END IF;
  INSERT INTO user_financial_events VALUES (p_user, p_amount, 'Created/updated with ' || p_amount);
  INSERT INTO user_recent_transactions VALUES (p_user, p_txn, now(), NULL, p_amount, 42);
  RETURN QUERY SELECT 42::bigint, NULL::bigint, NULL::bigint;
END $$;

-- Answers (46, status, amount, NULL) for a repeat, else (55, userid, balance, credit).
CREATE FUNCTION ls_addcredit(p_user bigint, p_extra bigint, p_txn text)
RETURNS TABLE (app_status bigint, a bigint, b bigint, c bigint) LANGUAGE plpgsql AS $$
DECLARE prev record; bal bigint;
BEGIN
  PERFORM 1 FROM user_table WHERE userid = p_user FOR UPDATE;
  IF NOT FOUND THEN RAISE EXCEPTION 'abort: AddCredit: user % does not exist', p_user; END IF;
  SELECT t.status, t.amount INTO prev FROM user_recent_transactions t WHERE t.userid = p_user AND t.user_txn_id = p_txn;
  IF FOUND THEN RETURN QUERY SELECT 46::bigint, prev.status::bigint, prev.amount, NULL::bigint; RETURN; END IF;
  UPDATE user_balances SET balance = balance + p_extra, tran_count = tran_count + 1 WHERE userid = p_user
    RETURNING balance INTO bal;
  INSERT INTO user_financial_events VALUES (p_user, p_extra, p_extra || ' added');
  INSERT INTO user_recent_transactions VALUES (p_user, p_txn, now(), NULL, p_extra, 55);
  RETURN QUERY SELECT 55::bigint, p_user, bal, bal - ls_reserved(p_user);
END $$;

-- Answers (46, status, amount, NULL…) for a repeat, else (status, spent, allocated units or
-- NULL, session, userid, credit, balance, productid).
CREATE FUNCTION ls_reportquotausage(p_user bigint, p_product bigint, p_used bigint, p_wanted bigint,
    p_session bigint, p_txn text)
RETURNS TABLE (app_status bigint, spent bigint, alloc_units bigint, session_id bigint, userid bigint,
               credit bigint, balance bigint, productid bigint)
LANGUAGE plpgsql AS $$
DECLARE prev record; cost bigint; held bigint; used bigint; amount bigint; st bigint := 42;
        credit_now bigint; grant_units bigint; bal bigint; alloc bigint;
BEGIN
  PERFORM 1 FROM user_table u WHERE u.userid = p_user FOR UPDATE;
  IF NOT FOUND THEN RAISE EXCEPTION 'abort: ReportQuotaUsage: user % does not exist', p_user; END IF;
  SELECT unit_cost INTO cost FROM product_table p WHERE p.productid = p_product;
  IF NOT FOUND THEN RAISE EXCEPTION 'abort: ReportQuotaUsage: product % does not exist', p_product; END IF;
  SELECT t.status, t.amount INTO prev FROM user_recent_transactions t WHERE t.userid = p_user AND t.user_txn_id = p_txn;
  IF FOUND THEN
    RETURN QUERY SELECT 46::bigint, prev.status::bigint, prev.amount, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint;
    RETURN;
  END IF;
  IF p_session <= 0 THEN p_session := nextval('session_ids'); END IF;
  DELETE FROM user_usage_table u WHERE u.userid = p_user AND u.productid = p_product AND u.sessionid = p_session
    RETURNING allocated_units INTO held;
  -- Usage is charged in full, whatever was reserved (as the demo's ReportQuotaUsage).
  used := greatest(0, p_used);
  amount := used * cost;
  IF amount > 0 THEN
    UPDATE user_balances b SET balance = b.balance - amount, tran_count = tran_count + 1 WHERE b.userid = p_user;
    INSERT INTO user_financial_events VALUES (p_user, -amount, used || ' units of product ' || p_product);
  END IF;
  IF p_wanted > 0 THEN
    SELECT b.balance INTO bal FROM user_balances b WHERE b.userid = p_user;
    credit_now := bal - ls_reserved(p_user);
    grant_units := p_wanted;
    IF cost > 0 THEN grant_units := least(p_wanted, floor(credit_now::numeric / cost)::bigint); END IF;
    IF grant_units <= 0 THEN
      st := 43;
    ELSE
      INSERT INTO user_usage_table VALUES (p_user, p_product, grant_units, p_session, now());
      alloc := grant_units;
      st := CASE WHEN grant_units < p_wanted THEN 44 ELSE 45 END;
    END IF;
  END IF;
  INSERT INTO user_recent_transactions VALUES (p_user, p_txn, now(), p_product, -amount, st);
  SELECT b.balance INTO bal FROM user_balances b WHERE b.userid = p_user;
  RETURN QUERY SELECT st, amount, alloc, p_session, p_user, bal - ls_reserved(p_user), bal, p_product;
END $$;

CREATE FUNCTION ls_gettotalbalance() RETURNS TABLE (balance bigint, users bigint) LANGUAGE sql STABLE AS $$
  SELECT SUM(balance)::bigint, COUNT(*)::bigint FROM user_balances
$$;
CREATE FUNCTION ls_showcurrentallocations()
RETURNS TABLE (productid bigint, productname varchar, allocated_units bigint, value_at_risk bigint)
LANGUAGE sql STABLE AS $$
  SELECT p.productid, p.productname, SUM(u.allocated_units)::bigint, SUM(u.allocated_units * p.unit_cost)::bigint
    FROM product_table p JOIN user_usage_table u ON u.productid = p.productid
   GROUP BY p.productid, p.productname ORDER BY p.productid
$$;
