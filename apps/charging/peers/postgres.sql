-- Telco charging for PostgreSQL (the side-by-side benchmark's peer): the tables of
-- apps/charging and its procedures as PL/pgSQL functions named ls_<procedure>, answering
-- with the same statuses and tables (the demo's; not its housekeeping of records older
-- than 5 minutes, which the benchmark's runs do not reach). UNLOGGED: Lockstep's run keeps no command log either. The export
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

-- The demo's remaining credit: the balance less the value reserved, NULL (no row in the
-- demo's answer) when the user holds no reservation.
CREATE FUNCTION ls_remaining(p_user bigint, p_balance bigint) RETURNS bigint LANGUAGE sql STABLE AS $$
  SELECT p_balance - SUM(u.allocated_units * p.unit_cost)::bigint
    FROM user_usage_table u JOIN product_table p ON p.productid = u.productid WHERE u.userid = p_user
  HAVING COUNT(*) > 0
$$;

-- Answers (46, 0, NULL) for a repeat, else (42, tables, purged): 4 tables for a new user,
-- 5 for an update, whose last counts the other records older than 120 minutes it purged.
CREATE FUNCTION ls_upsertuser(p_user bigint, p_amount bigint, p_is_new text, p_json text, p_purpose text,
    p_last_seen bigint, p_txn text) RETURNS TABLE (app_status bigint, tables bigint, purged bigint)
LANGUAGE plpgsql AS $$
DECLARE found_user boolean; n bigint;
BEGIN
  SELECT true INTO found_user FROM user_table WHERE userid = p_user FOR UPDATE;
  PERFORM 1 FROM user_recent_transactions t WHERE t.userid = p_user AND t.user_txn_id = p_txn;
  IF FOUND THEN RETURN QUERY SELECT 46::bigint, 0::bigint, NULL::bigint; RETURN; END IF;
  INSERT INTO user_recent_transactions VALUES (p_user, p_txn, now(), NULL, p_amount, 42);
  IF upper(p_is_new) = 'Y' THEN
    IF found_user THEN RAISE EXCEPTION 'abort: User % exists but shouldn''t', p_user; END IF;
    INSERT INTO user_table (userid, user_json_object, user_last_seen)
      VALUES (p_user, p_json, to_timestamp(p_last_seen / 1e6));
    INSERT INTO user_balances VALUES (p_user, 1, p_amount);
    INSERT INTO user_financial_events VALUES (p_user, p_amount, 'Created user ' || p_user || ' with opening credit of ' || p_amount);
    RETURN QUERY SELECT 42::bigint, 4::bigint, NULL::bigint;
    RETURN;
  END IF;
  IF found_user IS NULL THEN RAISE EXCEPTION 'abort: User % does not exist', p_user; END IF;
  UPDATE user_table SET user_json_object = p_json, user_last_seen = to_timestamp(p_last_seen / 1e6) WHERE userid = p_user;
  UPDATE user_balances SET balance = balance + p_amount, tran_count = tran_count + 1 WHERE userid = p_user;
  GET DIAGNOSTICS n = ROW_COUNT;
  IF n = 0 THEN RAISE EXCEPTION 'abort: User % exists but has no financial history...', p_user; END IF;
  INSERT INTO user_financial_events VALUES (p_user, p_amount, 'Updated user ' || p_user || ' - added credit of ' || p_amount);
  DELETE FROM user_recent_transactions t
   WHERE t.userid = p_user AND t.user_txn_id <> p_txn AND t.txn_time < now() - interval '120 minutes';
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN QUERY SELECT 42::bigint, 5::bigint, n;
END $$;

-- Answers (46, NULL, NULL, NULL) for a repeat, else (55, userid, balance, remaining credit).
CREATE FUNCTION ls_addcredit(p_user bigint, p_extra bigint, p_txn text)
RETURNS TABLE (app_status bigint, a bigint, b bigint, c bigint) LANGUAGE plpgsql AS $$
DECLARE bal bigint;
BEGIN
  PERFORM 1 FROM user_table WHERE userid = p_user FOR UPDATE;
  IF NOT FOUND THEN RAISE EXCEPTION 'abort: User % does not exist', p_user; END IF;
  PERFORM 1 FROM user_recent_transactions t WHERE t.userid = p_user AND t.user_txn_id = p_txn;
  IF FOUND THEN RETURN QUERY SELECT 46::bigint, NULL::bigint, NULL::bigint, NULL::bigint; RETURN; END IF;
  UPDATE user_balances SET balance = balance + p_extra, tran_count = tran_count + 1 WHERE userid = p_user
    RETURNING balance INTO bal;
  INSERT INTO user_financial_events VALUES (p_user, p_extra, p_extra || ' added');
  INSERT INTO user_recent_transactions VALUES (p_user, p_txn, now(), NULL, p_extra, 55);
  RETURN QUERY SELECT 55::bigint, p_user, bal, ls_remaining(p_user, bal);
END $$;

-- Answers (46, NULL…) for a repeat, else (status, reservation deleted 0/1, units reserved or
-- NULL, session, userid, remaining credit or NULL, balance, productid, units wanted > 0 as
-- 0/1). As the demo: usage is charged in full (whatever was reserved), and units are
-- reserved out of the remaining credit (the balance when nothing else is reserved).
CREATE FUNCTION ls_reportquotausage(p_user bigint, p_product bigint, p_used bigint, p_wanted bigint,
    p_session bigint, p_txn text)
RETURNS TABLE (app_status bigint, deleted bigint, alloc_units bigint, session_id bigint, userid bigint,
               remaining bigint, balance bigint, productid bigint, wanted bigint)
LANGUAGE plpgsql AS $$
DECLARE cost bigint; held bigint; amount bigint; st bigint := 42;
        credit_now bigint; grant_units bigint; bal bigint; alloc bigint;
BEGIN
  PERFORM 1 FROM user_table u WHERE u.userid = p_user FOR UPDATE;
  IF NOT FOUND THEN RAISE EXCEPTION 'abort: User % does not exist', p_user; END IF;
  SELECT unit_cost INTO cost FROM product_table p WHERE p.productid = p_product;
  IF NOT FOUND THEN RAISE EXCEPTION 'abort: Product % does not exist', p_product; END IF;
  PERFORM 1 FROM user_recent_transactions t WHERE t.userid = p_user AND t.user_txn_id = p_txn;
  IF FOUND THEN
    RETURN QUERY SELECT 46::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
      NULL::bigint, NULL::bigint;
    RETURN;
  END IF;
  IF p_session <= 0 THEN p_session := nextval('session_ids'); END IF;
  amount := p_used * cost;
  IF p_used > 0 THEN
    UPDATE user_balances b SET balance = b.balance - amount, tran_count = tran_count + 1 WHERE b.userid = p_user;
    INSERT INTO user_financial_events VALUES (p_user, -amount, p_used || ' units of product ' || p_product);
  END IF;
  DELETE FROM user_usage_table u WHERE u.userid = p_user AND u.productid = p_product AND u.sessionid = p_session
    RETURNING allocated_units INTO held;
  SELECT b.balance INTO bal FROM user_balances b WHERE b.userid = p_user;
  IF p_wanted > 0 THEN
    credit_now := coalesce(ls_remaining(p_user, bal), bal);
    grant_units := p_wanted;
    IF cost > 0 AND credit_now > 0 THEN grant_units := least(p_wanted, credit_now / cost); END IF;
    IF credit_now <= 0 OR grant_units <= 0 THEN
      st := 43;
    ELSE
      INSERT INTO user_usage_table VALUES (p_user, p_product, grant_units, p_session, now());
      alloc := grant_units;
      st := CASE WHEN grant_units < p_wanted THEN 44 ELSE 45 END;
    END IF;
  END IF;
  INSERT INTO user_recent_transactions VALUES (p_user, p_txn, now(), p_product, -amount, st);
  RETURN QUERY SELECT st, CASE WHEN held IS NULL THEN 0::bigint ELSE 1::bigint END, alloc, p_session, p_user,
    ls_remaining(p_user, bal), bal, p_product, CASE WHEN p_wanted > 0 THEN 1::bigint ELSE 0::bigint END;
END $$;

CREATE FUNCTION ls_gettotalbalance() RETURNS TABLE (balance bigint) LANGUAGE sql STABLE AS $$
  SELECT SUM(balance)::bigint FROM user_balances
$$;
CREATE FUNCTION ls_showcurrentallocations()
RETURNS TABLE (productid bigint, productname varchar, allocated_units bigint, value_at_risk bigint)
LANGUAGE sql STABLE AS $$
  SELECT p.productid, p.productname, SUM(u.allocated_units)::bigint, SUM(u.allocated_units * p.unit_cost)::bigint
    FROM product_table p JOIN user_usage_table u ON u.productid = p.productid
   GROUP BY p.productid, p.productname ORDER BY p.productid
$$;
