//! Each peer adapter answers like Lockstep: PostgreSQL, Tarantool and Redis are started from
//! scripts/peers.sh on 127.0.0.1 (fresh data directories), each app is loaded into them and
//! into an embedded Lockstep engine, and the same calls must give the same answers (statuses,
//! app statuses and rows; session ids and random draws, which differ by design, are compared
//! by their rules instead). A missing peer binary fails the test with the command that
//! installs it (scripts/test.sh runs `scripts/peers.sh install` first).

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use lockstep_bench::apps;
use lockstep_bench::conn::{Answer, Conn};
use lockstep_bench::peers::{parse_target, Peer};
use lockstep_bench::workloads::ycsb::{key_of, pack};
use lockstep_core::Value;

const SYSTEMS: [&str; 3] = ["postgres", "tarantool", "redis"];

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/peers.sh")
}

/// The peer servers of this test, stopped (and their directories removed) on drop.
struct Servers {
    dir: PathBuf,
    targets: Vec<(&'static str, String)>,
}

impl Servers {
    fn start() -> Servers {
        let dir = std::env::temp_dir().join(format!("lockstep-peers-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut servers = Servers { dir: dir.clone(), targets: Vec::new() };
        // Ports from the process id so that two test runs do not collide, below Linux's
        // ephemeral range (32768 on) so that no outgoing connection holds one.
        let base = 20_000 + (std::process::id() % 4000) as u16 * 3;
        for (k, system) in SYSTEMS.iter().enumerate() {
            let out = Command::new("bash")
                .arg(script())
                .args(["start", system, dir.join(system).to_str().unwrap(), &(base + k as u16).to_string()])
                .env("PEER_MEMORY_MB", "512")
                .output()
                .expect("bash runs");
            assert!(
                out.status.success(),
                "cannot start {system}: {} (install the peers with: scripts/peers.sh install)",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            servers.targets.push((system, String::from_utf8_lossy(&out.stdout).trim().to_string()));
        }
        servers
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for system in SYSTEMS {
            let _ = Command::new("bash").arg(script()).args(["stop", system, self.dir.join(system).to_str().unwrap_or("")]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn i(v: i64) -> Value {
    Value::Int(v)
}
fn s(v: &str) -> Value {
    Value::from(v)
}

/// What must agree: status, app status and rows (timestamps and session ids blanked).
fn essence(a: &Answer, blank: &[(usize, usize)]) -> (i8, i8, Vec<Vec<Vec<Value>>>) {
    let mut tables: Vec<Vec<Vec<Value>>> = (0..a.table_count()).map(|t| a.rows(t)).collect();
    for (t, c) in blank {
        for row in tables.get_mut(*t).map(|t| t.as_mut_slice()).unwrap_or(&mut []) {
            if let Some(v) = row.get_mut(*c) {
                *v = Value::Null;
            }
        }
    }
    for v in tables.iter_mut().flatten().flatten() {
        if matches!(v, Value::Timestamp(_)) {
            *v = Value::Null;
        }
    }
    (a.status, if a.is_success() { a.app_status } else { 0 }, tables)
}

/// Lockstep and the peers side by side.
struct Both {
    lockstep: Conn,
    peers: Vec<(&'static str, Conn)>,
}

impl Both {
    async fn new(servers: &Servers, app: &apps::App, probe: &str) -> Both {
        let lockstep = Conn::embedded(Some(2)).unwrap();
        apps::ensure_loaded(&lockstep, app, probe).await.unwrap();
        let mut peers = Vec::new();
        for (system, url) in &servers.targets {
            let peer = Peer::connect(&parse_target(url).unwrap(), Some(2)).await.unwrap().unwrap();
            let conn = Conn::Peer(Arc::new(peer));
            match apps::ensure_loaded(&conn, app, probe).await {
                Ok(_) => peers.push((*system, conn)),
                // Redis has no TATP or charging: the adapter must say so.
                Err(e) => assert!(*system == "redis" && e.message.contains("voter and ycsb only"), "{system}: {}", e.message),
            }
        }
        Both { lockstep, peers }
    }

    /// Calls everywhere; the answers must agree (`blank`: (table, column) cells to ignore).
    async fn same(&self, proc: &str, params: Vec<Value>, blank: &[(usize, usize)]) -> Answer {
        let want = self.lockstep.call(proc, params.clone()).await.unwrap();
        for (system, conn) in &self.peers {
            let got = conn.call(proc, params.clone()).await.unwrap();
            assert_eq!(essence(&got, blank), essence(&want, blank), "{system} answers {proc}{params:?} unlike Lockstep");
        }
        want
    }

    async fn same_scalar(&self, sql: &str) -> i64 {
        let want = self.lockstep.scalar(sql).await.unwrap();
        for (system, conn) in &self.peers {
            assert_eq!(conn.scalar(sql).await.unwrap(), want, "{system}: {sql}");
        }
        want
    }
}

async fn voter(servers: &Servers) {
    let b = Both::new(servers, &apps::VOTER, "votes").await;
    b.same("Initialize", vec![i(3), s("A,B,C,D")], &[]).await;
    b.same("Initialize", vec![i(3), s("A,B,C,D")], &[]).await;
    for (phone, c) in [(2015550123, 1), (2015550123, 2), (2015550123, 1), (2015550123, 9), (3105550000, 3), (9995550000, 3)] {
        b.same("Vote", vec![i(phone), i(c), i(2)], &[]).await;
    }
    assert_eq!(b.same("Results", vec![], &[]).await.row_count(0), 3);
    assert_eq!(b.same_scalar("SELECT COUNT(*) FROM votes").await, 4);
    assert_eq!(b.same_scalar("SELECT COUNT(*) FROM v_votes_by_phone_number WHERE num_votes > 1").await, 1);
}

async fn ycsb(servers: &Servers) {
    let b = Both::new(servers, &apps::YCSB, "Store").await;
    let ks = Value::Bytes(b"usertable"[..].into());
    for n in 0..20u64 {
        let rec = pack(&[("field0".into(), format!("v{n}").into_bytes()), ("field1".into(), vec![0, 1, 2, 255])]);
        b.same("Put", vec![ks.clone(), s(&key_of(n)), Value::Bytes(rec.into())], &[]).await;
    }
    // A merge keeps field1, replaces field0 and appends field2, in that order.
    let upd = pack(&[("field2".into(), b"new".to_vec()), ("field0".into(), b"x".to_vec())]);
    b.same("Put", vec![ks.clone(), s(&key_of(3)), Value::Bytes(upd.into())], &[]).await;
    let got = b.same("Get", vec![ks.clone(), s(&key_of(3))], &[]).await;
    assert_eq!(
        got.value(0, 0, 0),
        Some(Value::Bytes(
            pack(&[("field1".into(), vec![0, 1, 2, 255]), ("field2".into(), b"new".to_vec()), ("field0".into(), b"x".to_vec())]).into()
        ))
    );
    b.same("Get", vec![ks.clone(), s("nobody")], &[]).await;
    b.same("Put", vec![ks.clone(), s(&key_of(4)), Value::Bytes(vec![0, 0].into())], &[]).await;
    // Scans: Lockstep's per-partition runs merged, against the peers' single run.
    let start = key_of(7);
    let scan = |conn: &Conn| {
        let (conn, ks, start) = (conn.clone(), ks.clone(), start.clone());
        async move {
            let answers = conn.call_all_partitions("Scan", vec![ks, Value::Bytes(start.into_bytes().into()), i(5)]).await.unwrap();
            let runs: Vec<Vec<String>> = answers.iter().map(|a| a.rows(0).iter().map(|r| format!("{:?}", r[1])).collect()).collect();
            lockstep_bench::workloads::ycsb::merge_sorted(&runs, 5).unwrap()
        }
    };
    let want = scan(&b.lockstep).await;
    assert_eq!(want.len(), 5);
    for (system, conn) in &b.peers {
        assert_eq!(scan(conn).await, want, "{system}: Scan");
    }
    assert_eq!(b.same_scalar("SELECT COUNT(*) FROM Store").await, 20);
}

async fn charging(servers: &Servers) {
    let b = Both::new(servers, &apps::CHARGING, "user_table").await;
    for (id, name, cost) in [(0, "web site", 0), (1, "SMS", 1), (2, "data", 20)] {
        let sql = format!("UPSERT INTO product_table (productid, productname, unit_cost) VALUES ({id}, '{name}', {cost})");
        b.lockstep.adhoc(&sql).await.unwrap();
        for (_, c) in &b.peers {
            c.adhoc(&sql).await.unwrap();
        }
    }
    let user = |id: i64, txn: &str, new: &str| vec![i(id), i(1000), s(new), s("{}"), s("Created"), Value::Timestamp(0), s(txn)];
    b.same("UpsertUser", user(1, "c1", "Y"), &[]).await;
    b.same("UpsertUser", user(2, "c2", "Y"), &[]).await;
    b.same("UpsertUser", user(1, "c1", "Y"), &[]).await; // repeat: 46
    b.same("UpsertUser", user(1, "c3", "Y"), &[]).await; // exists: abort
    b.same("UpsertUser", user(2, "u2", "N"), &[]).await; // an update: five tables
                                                         // A new session (id differs by design: blanked in the reservation and the balance row).
    let first = b.same("ReportQuotaUsage", vec![i(1), i(2), i(0), i(30), i(-1), s("r1")], &[(1, 1), (3, 2)]).await;
    assert_eq!(first.app_status, 45);
    // Another session gets the 20 units the remaining 400 pay for; 10 of them are used and
    // charged in full, and 5 more reserved out of 800 - 600.
    for (system, conn) in &b.peers {
        let a = conn.call("ReportQuotaUsage", vec![i(1), i(2), i(0), i(60), i(-1), s("r2")]).await.unwrap();
        assert_eq!((a.app_status, a.int(1, 0, 0)), (44, Some(20)), "{system}: some units");
        let session = a.int(3, 0, 2).unwrap();
        let used = conn.call("ReportQuotaUsage", vec![i(1), i(2), i(10), i(5), i(session), s("r3")]).await.unwrap();
        assert_eq!((used.app_status, used.int(3, 0, 0)), (45, Some(800)), "{system}: 10 units of 20 charged");
    }
    let lock = b.lockstep.call("ReportQuotaUsage", vec![i(1), i(2), i(0), i(60), i(-1), s("r2")]).await.unwrap();
    let session = lock.int(3, 0, 2).unwrap();
    let used = b.lockstep.call("ReportQuotaUsage", vec![i(1), i(2), i(10), i(5), i(session), s("r3")]).await.unwrap();
    assert_eq!((used.app_status, used.int(3, 0, 0)), (45, Some(800)));
    b.same("ReportQuotaUsage", vec![i(1), i(2), i(10), i(5), i(session), s("r3")], &[]).await; // repeat: 46
    b.same("ReportQuotaUsage", vec![i(7), i(2), i(0), i(5), i(-1), s("r4")], &[]).await; // no user: abort
    b.same("ReportQuotaUsage", vec![i(1), i(9), i(0), i(5), i(-1), s("r5")], &[]).await; // no product: abort
    b.same("AddCredit", vec![i(2), i(250), s("a1")], &[]).await;
    b.same("AddCredit", vec![i(2), i(999), s("a1")], &[]).await; // repeat: 46
    b.same("AddCredit", vec![i(1), i(5), s("a2")], &[]).await; // credit net of reservations
                                                               // User 2 holds 2250: 3 SMS used, nothing wanted (five tables); 112 units of data for its
                                                               // 2247 (some of 500); then 7 left, less than one unit of data (no money, three tables).
    b.same("ReportQuotaUsage", vec![i(2), i(1), i(3), i(0), i(-1), s("r6")], &[(4, 2)]).await;
    let some = b.same("ReportQuotaUsage", vec![i(2), i(2), i(0), i(500), i(-1), s("r7")], &[(1, 1), (3, 2)]).await;
    assert_eq!((some.app_status, some.int(1, 0, 0), some.int(2, 0, 1)), (44, Some(112), Some(7)));
    let none = b.same("ReportQuotaUsage", vec![i(2), i(2), i(0), i(5), i(-1), s("r8")], &[(2, 2)]).await;
    assert_eq!((none.app_status, none.table_count()), (43, 3));
    b.same("getTotalBalance", vec![], &[]).await;
    b.same("showCurrentAllocations", vec![], &[]).await;
    assert_eq!(b.same_scalar("SELECT SUM(balance) FROM user_balances").await, 805 + 2247);
    assert_eq!(b.same_scalar("SELECT COUNT(*) FROM user_balances WHERE balance < 0").await, 0);
    assert_eq!(b.same_scalar("SELECT COUNT(*) FROM user_recent_transactions").await, 11);
}

async fn tatp(servers: &Servers) {
    let b = Both::new(servers, &apps::TATP, "subscriber").await;
    for s_id in 1..=10 {
        let mut p = vec![i(s_id), s(&format!("{s_id:015}"))];
        p.extend((0..30).map(|k| i(k % 2)));
        p.extend([i(7), i(8), i(s_id)]);
        b.lockstep.call("LoadSubscriber", p.clone()).await.unwrap();
        for (system, c) in &b.peers {
            let n = c.call("LoadSubscriber", p.clone()).await.unwrap().int(0, 0, 0).unwrap();
            assert!((3..=21).contains(&n), "{system}: {n} rows for one subscriber");
        }
    }
    assert_eq!(b.same_scalar("SELECT COUNT(*) FROM subscriber").await, 10);
    b.same("GetSubscriberData", vec![i(4)], &[]).await;
    b.same("GetSubscriberData", vec![i(40)], &[]).await;
    b.same("UpdateLocation", vec![i(4), i(99)], &[]).await;
    b.same("UpdateLocation", vec![i(40), i(99)], &[]).await;
    b.same("GetSubscriberData", vec![i(4)], &[]).await;
    b.same("MapSubStringToNumberNoView", vec![s("000000000000005")], &[]).await;
    b.same("UpdateLocationMultiPartition", vec![i(0), s("000000000000040"), i(1)], &[]).await;
    b.same("DeleteCallForwarding", vec![i(40), i(1), i(0)], &[]).await;
    b.same("GetAccessData", vec![i(40), i(1)], &[]).await;
    // Facilities are drawn at random: every subscriber has 1..4 access types, everywhere.
    for (system, c) in std::iter::once(("lockstep", &b.lockstep)).chain(b.peers.iter().map(|(s, c)| (*s, c))) {
        for s_id in 1..=10 {
            let mut hits = 0;
            for t in 1..=4 {
                hits += c.call("GetAccessData", vec![i(s_id), i(t)]).await.unwrap().row_count(0);
            }
            assert!((1..=4).contains(&hits), "{system}: subscriber {s_id} has {hits} access types");
        }
        let a = c.call("UpdateSubscriberData", vec![i(3), i(1), i(5), i(1)]).await.unwrap();
        assert_eq!((a.table_count(), a.int(0, 0, 0)), (2, Some(1)), "{system}: UpdateSubscriberData");
    }
}

#[test]
fn peers_answer_like_lockstep() {
    let servers = Servers::start();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        voter(&servers).await;
        ycsb(&servers).await;
        charging(&servers).await;
        tatp(&servers).await;
    });
}
