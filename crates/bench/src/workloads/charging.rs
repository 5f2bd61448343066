//! Telco charging (VoltDB's charging demo): users with credit reserve units of products per
//! session and report usage; every 5th event of a user adds credit (the 80/20 mix); 1% of
//! calls repeat an earlier transaction id, which must be answered, not applied. The value at
//! risk and the total balance are queried every few seconds. The procedures are the demo's
//! (apps/charging): usage is charged in full, whatever was reserved, so a balance may go
//! below its reservations or below zero, and neither is checked. Check: money is conserved
//! (the total equals the start plus credits less units used times their cost), each
//! transaction id is recorded once, and every repeat is answered as already applied.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lockstep_core::{Error, Value};
use tokio::sync::Mutex;

use crate::apps;
use crate::conn::Conn;
use crate::rng::Rng;
use crate::stats::Done;
use crate::workload::{populate, Check, Workload};
use crate::workloads::{classify, ok_or_err};

/// Products: (id, name, unit cost), as the demo loads them.
pub const PRODUCTS: [(i64, &str, i64); 5] =
    [(0, "web site", 0), (1, "SMS", 1), (2, "domestic data/GB", 20), (3, "roaming data/GB", 342), (4, "domestic calls/min", 3)];
/// Opening credit of each user (the demo's README example).
pub const INITIAL_CREDIT: i64 = 100_000;
/// Every this-many events of a user is an AddCredit (the demo's 80/20 mix).
pub const ADD_CREDIT_INTERVAL: u64 = 5;

/// Whether a user's `events`-th event (counting from 1) adds credit. Users start at
/// different points of the cycle, so the mix is 80/20 from the first second of a run: the
/// demo's clients ran long enough for every user to pass through it many times, while a
/// short run here gives each user only a few events, and a cycle starting at zero for
/// everyone made AddCredit about 3% of calls instead of 20%.
pub fn adds_credit(user: i64, events: u64) -> bool {
    (events + user.rem_euclid(ADD_CREDIT_INTERVAL as i64) as u64).is_multiple_of(ADD_CREDIT_INTERVAL)
}
/// Share of calls that repeat the user's previous transaction id.
pub const DUPLICATE_SHARE: f64 = 0.01;
/// How often the value-at-risk queries run during the load.
pub const QUERY_EVERY: Duration = Duration::from_secs(5);
/// Users tried when the chosen one is busy, before skipping this turn.
const BUSY_RETRIES: usize = 8;
/// The demo's ReportQuotaUsage deletes a user's recorded transactions older than this (one
/// per call), so the records can be counted exactly only in runs shorter than it.
const TXN_RETENTION: Duration = Duration::from_secs(5 * 60);

pub const STATUS_NO_MONEY: i8 = 43;
pub const STATUS_SOME_UNITS: i8 = 44;
pub const STATUS_ALL_UNITS: i8 = 45;
pub const STATUS_TXN_ALREADY_HAPPENED: i8 = 46;
pub const STATUS_CREDIT_ADDED: i8 = 55;

#[derive(Default)]
struct UserState {
    /// Session per product; −1 before the first reservation.
    sessions: [i64; 5],
    events: u64,
    last_txn: Option<(String, &'static str)>,
}

pub struct Charging {
    users: i64,
    state: Vec<Mutex<UserState>>,
    next_txn: AtomicU64,
    /// Money at the start of the run and transaction records then.
    baseline_money: AtomicI64,
    baseline_txns: AtomicI64,
    credits: AtomicI64,
    spent: AtomicI64,
    applied: AtomicI64,
    dups_sent: AtomicU64,
    dups_answered: AtomicU64,
    /// When the setup ended; every recorded transaction older than [`TXN_RETENTION`] may go.
    started: std::sync::Mutex<Option<Instant>>,
    /// Whether the setup created every user (so no record predates the run).
    fresh: std::sync::atomic::AtomicBool,
}

impl Charging {
    pub fn new(users: Option<u64>) -> Charging {
        let users = users.unwrap_or(100_000).max(1) as i64;
        Charging {
            users,
            state: (0..users).map(|_| Mutex::new(UserState { sessions: [-1; 5], ..UserState::default() })).collect(),
            next_txn: AtomicU64::new(0),
            baseline_money: AtomicI64::new(0),
            baseline_txns: AtomicI64::new(0),
            credits: AtomicI64::new(0),
            spent: AtomicI64::new(0),
            applied: AtomicI64::new(0),
            dups_sent: AtomicU64::new(0),
            dups_answered: AtomicU64::new(0),
            started: std::sync::Mutex::new(None),
            fresh: std::sync::atomic::AtomicBool::new(false),
        }
    }

    async fn total_balance(conn: &Conn) -> Result<i64, Error> {
        let a = conn.call("getTotalBalance", vec![]).await?;
        ok_or_err(&a)?;
        Ok(a.int(0, 0, 0).unwrap_or(0))
    }

    fn txn_id(&self, kind: &str) -> String {
        // Unique across runs against the same database: the clock's microseconds + a counter.
        let n = self.next_txn.fetch_add(1, Ordering::Relaxed);
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros()).unwrap_or(0);
        format!("{kind}_{t}_{n}")
    }

    async fn event(&self, conn: &Conn, rng: &mut Rng, user: i64, st: &mut UserState) -> (&'static str, Done) {
        st.events += 1;
        if rng.chance(DUPLICATE_SHARE) {
            if let Some((txn, kind)) = st.last_txn.clone() {
                return self.duplicate(conn, rng, user, st, txn, kind).await;
            }
        }
        if adds_credit(user, st.events) {
            let amount = rng.range(100, 399);
            let txn = self.txn_id("AddCredit");
            st.last_txn = Some((txn.clone(), "AddCredit"));
            let r = conn.call("AddCredit", vec![Value::Int(user), Value::Int(amount), Value::from(txn.as_str())]).await;
            let done = classify(r, |a| {
                if a.app_status == STATUS_CREDIT_ADDED {
                    self.credits.fetch_add(amount, Ordering::Relaxed);
                    self.applied.fetch_add(1, Ordering::Relaxed);
                    Done::ok("credit added")
                } else {
                    Done::error(format!("AddCredit answered app status {}", a.app_status))
                }
            });
            return ("AddCredit", done);
        }
        let product = rng.range(0, 4) as usize;
        let session = st.sessions[product];
        let used = if session < 0 { 0 } else { rng.range(0, 49) };
        let wanted = rng.range(50, 98);
        let txn = self.txn_id("ReportQuotaUsage");
        st.last_txn = Some((txn.clone(), "ReportQuotaUsage"));
        let params = vec![
            Value::Int(user),
            Value::Int(product as i64),
            Value::Int(used),
            Value::Int(wanted),
            Value::Int(session),
            Value::from(txn.as_str()),
        ];
        let r = conn.call("ReportQuotaUsage", params).await;
        // The demo charges the units used in full, at the product's cost.
        let spent = used * PRODUCTS[product].2;
        let done = classify(r, |a| {
            // As the demo's client: the last table is (BALANCE, PRODUCT_ID, SESSION_ID, USERID).
            let last = a.table_count().wrapping_sub(1);
            let (true, Some(new_session)) = (a.table_count() >= 3, a.int(last, 0, 2)) else {
                return Done::error(format!("ReportQuotaUsage answered {} tables of an unexpected shape", a.table_count()));
            };
            self.spent.fetch_add(spent, Ordering::Relaxed);
            self.applied.fetch_add(1, Ordering::Relaxed);
            st.sessions[product] = new_session;
            match a.app_status {
                STATUS_ALL_UNITS => Done::ok("all units"),
                STATUS_SOME_UNITS => Done::ok("some units"),
                STATUS_NO_MONEY => Done::ok("no money"),
                s => Done::error(format!("ReportQuotaUsage answered app status {s}")),
            }
        });
        ("ReportQuotaUsage", done)
    }

    /// Resends an applied transaction id: it must be answered 46 and change nothing.
    async fn duplicate(
        &self,
        conn: &Conn,
        rng: &mut Rng,
        user: i64,
        st: &UserState,
        txn: String,
        kind: &'static str,
    ) -> (&'static str, Done) {
        self.dups_sent.fetch_add(1, Ordering::Relaxed);
        let params = if kind == "AddCredit" {
            vec![Value::Int(user), Value::Int(rng.range(100, 399)), Value::from(txn.as_str())]
        } else {
            let p = rng.range(0, 4) as usize;
            vec![
                Value::Int(user),
                Value::Int(p as i64),
                Value::Int(10),
                Value::Int(50),
                Value::Int(st.sessions[p]),
                Value::from(txn.as_str()),
            ]
        };
        let r = conn.call(kind, params).await;
        let done = classify(r, |a| {
            if a.app_status == STATUS_TXN_ALREADY_HAPPENED {
                self.dups_answered.fetch_add(1, Ordering::Relaxed);
                Done::ok("duplicate")
            } else {
                Done::error(format!("a repeated transaction id was answered app status {}", a.app_status))
            }
        });
        (kind, done)
    }
}

impl Charging {
    /// Whether no recorded transaction can have expired yet: every user was created by this
    /// run's setup and the run is shorter than the demo's retention.
    fn records_all_kept(&self) -> bool {
        let elapsed = self.started.lock().ok().and_then(|s| s.map(|t| t.elapsed()));
        self.fresh.load(Ordering::Relaxed) && elapsed.is_some_and(|e| e < TXN_RETENTION)
    }
}

impl Workload for Charging {
    async fn setup(&self, conn: &Conn) -> Result<(), Error> {
        apps::ensure_loaded(conn, &apps::CHARGING, "user_table").await?;
        for (id, name, cost) in PRODUCTS {
            conn.adhoc(&format!("UPSERT INTO product_table (productid, productname, unit_cost) VALUES ({id}, '{name}', {cost})")).await?;
        }
        let have = conn.scalar("SELECT COUNT(*) FROM user_table").await?;
        self.fresh.store(have != self.users, Ordering::Relaxed);
        if have != self.users {
            if have > 0 {
                for t in ["user_table", "user_usage_table", "user_balances", "user_recent_transactions"] {
                    conn.adhoc(&format!("DELETE FROM {t}")).await?;
                }
            }
            let conn2 = conn.clone();
            let json = format!("{{\"payload\":\"{}\"}}", "x".repeat(10));
            populate("charging users", self.users as u64, move |i| {
                let (conn, json) = (conn2.clone(), json.clone());
                async move {
                    let params = vec![
                        Value::Int(i as i64),
                        Value::Int(INITIAL_CREDIT),
                        Value::from("Y"),
                        Value::from(json.as_str()),
                        Value::from("Created"),
                        Value::Timestamp(0),
                        Value::from(format!("Create_{i}").as_str()),
                    ];
                    let a = conn.call("UpsertUser", params).await?;
                    ok_or_err(&a).map_err(|e| e.context(format!("UpsertUser({i})")))
                }
            })
            .await?;
        } else {
            eprintln!("charging: {have} users already loaded");
        }
        self.baseline_money.store(Self::total_balance(conn).await?, Ordering::Relaxed);
        self.baseline_txns.store(conn.scalar("SELECT COUNT(*) FROM user_recent_transactions").await?, Ordering::Relaxed);
        if let Ok(mut started) = self.started.lock() {
            *started = Some(Instant::now());
        }
        Ok(())
    }

    fn one<'a>(&'a self, conn: &'a Conn, rng: &'a mut Rng) -> impl std::future::Future<Output = (&'static str, Done)> + Send + 'a {
        async move {
            // One call per user at a time (as the demo's client): a busy user is passed over.
            for _ in 0..BUSY_RETRIES {
                let user = rng.range(0, self.users - 1);
                if let Ok(mut st) = self.state[user as usize].try_lock() {
                    return self.event(conn, rng, user, &mut st).await;
                }
            }
            tokio::task::yield_now().await;
            ("skipped (user busy)", Done::ok("skipped"))
        }
    }

    fn periodic_every(&self) -> Option<Duration> {
        Some(QUERY_EVERY)
    }

    fn periodic<'a>(&'a self, conn: &'a Conn) -> impl std::future::Future<Output = Vec<(&'static str, Duration, Done)>> + Send + 'a {
        async move {
            let mut out = Vec::new();
            for name in ["showCurrentAllocations", "getTotalBalance"] {
                let t = Instant::now();
                let done = classify(conn.call(name, vec![]).await, |_| Done::ok("ok"));
                out.push((name, t.elapsed(), done));
            }
            out
        }
    }

    async fn check(&self, conn: &Conn) -> Check {
        let mut c = Check::new();
        let expected =
            self.baseline_money.load(Ordering::Relaxed) + self.credits.load(Ordering::Relaxed) - self.spent.load(Ordering::Relaxed);
        match Self::total_balance(conn).await {
            Ok(total) => c.expect(
                total == expected,
                format!(
                    "money conserved: balances {total} = start {} + credits {} - spent {}",
                    self.baseline_money.load(Ordering::Relaxed),
                    self.credits.load(Ordering::Relaxed),
                    self.spent.load(Ordering::Relaxed)
                ),
            ),
            Err(e) => c.expect(false, format!("getTotalBalance: {}", e.message)),
        }
        match conn.scalar("SELECT SUM(balance) FROM user_balances").await {
            Ok(sum) => c.expect(sum == expected, format!("sum of user balances {sum} = total_balances view {expected}")),
            Err(e) => c.expect(false, format!("summing balances: {}", e.message)),
        }
        let txns_expected = self.baseline_txns.load(Ordering::Relaxed) + self.applied.load(Ordering::Relaxed);
        match conn.scalar("SELECT COUNT(*) FROM user_recent_transactions").await {
            Ok(n) if self.records_all_kept() => {
                c.expect(n == txns_expected, format!("transaction ids recorded {n} = applied {txns_expected} (each once)"))
            }
            // Older records may have been deleted by the demo's housekeeping: at most as many.
            Ok(n) => c.expect(
                n <= txns_expected,
                format!("transaction ids recorded {n} <= applied {txns_expected} (each at most once; older ones expire)"),
            ),
            Err(e) => c.expect(false, format!("counting transactions: {}", e.message)),
        }
        let (sent, answered) = (self.dups_sent.load(Ordering::Relaxed), self.dups_answered.load(Ordering::Relaxed));
        c.expect(sent == answered, format!("repeated transaction ids: {sent} sent, {answered} answered as already applied"));
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifth_of_events_add_credit_from_each_users_first_event_on() {
        for events in 1..=3u64 {
            let n = (0..10_000i64).filter(|&u| adds_credit(u, events)).count();
            assert_eq!(n, 2_000, "event {events}");
        }
        // Each user still adds credit exactly once in every five events.
        for u in 0..50i64 {
            assert_eq!((1..=100u64).filter(|&e| adds_credit(u, e)).count(), 20);
        }
    }
}
