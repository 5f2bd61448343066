//! End-to-end tests of compound procedures with the TATP kit's own procedures (its fk mode
//! 4): bound with the kit's `FROM CLASS` lines, called concurrently from several clients,
//! answered as the kit expects, and run as single-partition calls, never as
//! multi-partition transactions.

mod common;

use common::{adhoc, ok, repo_root, Server, TempDir};
use lockstep_client::Client;
use lockstep_core::Value;

/// Subscribers loaded (s_id 0..SUBSCRIBERS, sub_nbr "0<s_id>" as the kit's loader writes).
const SUBSCRIBERS: i64 = 60;
const CLIENTS: usize = 4;
/// VoltDB's partition id of multi-partition work in `@Statistics`.
const MP_PARTITION_ID: i64 = 16383;

fn s(v: &str) -> Value {
    Value::Str(v.into())
}

fn i(v: i64) -> Value {
    Value::Int(v)
}

/// The TATP tables of `apps/tatp/ddl.sql`, and the kit's procedure lines for what mode 4
/// calls (partitioned writes, unpartitioned compound procedures, as the kit declares them).
async fn load_kit(c: &Client) {
    let ddl = std::fs::read_to_string(repo_root().join("apps/tatp/ddl.sql")).expect("read ddl.sql");
    let tables = ddl.split("CREATE PROCEDURE").next().expect("the tables come first");
    adhoc(c, tables).await;
    for class in ["UpdateLocation", "InsertCallForwarding", "DeleteCallForwarding"] {
        adhoc(c, &format!("CREATE PROCEDURE PARTITION ON TABLE subscriber COLUMN s_id PARAMETER 0 FROM CLASS voltdbtatp.db.{class}")).await;
    }
    for class in ["UpdateLocationCompound", "InsertCallForwardingCompound", "DeleteCallForwardingCompound"] {
        adhoc(c, &format!("CREATE PROCEDURE FROM CLASS voltdbtatp.db.{class}")).await;
    }
    for id in 0..SUBSCRIBERS {
        let nbr = format!("0{id}");
        ok(c, "@AdHoc", vec![s("INSERT INTO subscriber (s_id, sub_nbr) VALUES (?, ?)"), i(id), s(&nbr)]).await;
        ok(c, "SUBSCRIBER_NBR_MAP.insert", vec![s(&nbr), i(id)]).await;
        ok(c, "SPECIAL_FACILITY.insert", vec![i(id), i(2), i(1), i(0), i(0), s("x")]).await;
    }
}

/// Calls `proc` once per subscriber, every call in flight at once, spread over the
/// clients; returns the scalar answers.
async fn call_all(clients: &[Client], proc: &str, params: impl Fn(i64) -> Vec<Value>) -> Vec<Value> {
    let calls = (0..SUBSCRIBERS).map(|id| {
        let c = &clients[id as usize % clients.len()];
        c.call(proc, params(id))
    });
    let answers = futures::future::join_all(calls).await;
    answers
        .into_iter()
        .map(|r| {
            let r = r.expect("call");
            assert_eq!(r.status, 1, "{proc}: {:?}", r.status_string);
            r.tables[0].rows[0][0].clone()
        })
        .collect()
}

fn count(r: &lockstep_client::Response) -> i64 {
    match r.tables[0].rows[0][0] {
        Value::Int(n) => n,
        ref other => panic!("not a count: {other:?}"),
    }
}

/// (procedure, partition id, invocations) of `@Statistics PROCEDURE`.
async fn procedure_stats(c: &Client) -> Vec<(String, i64, i64)> {
    let r = ok(c, "@Statistics", vec![s("PROCEDURE"), i(0)]).await;
    let t = &r.tables[0];
    let col = |name: &str| t.columns.iter().position(|c| c.name.as_ref() == name).expect(name);
    let (p, part, inv) = (col("PROCEDURE"), col("PARTITION_ID"), col("INVOCATIONS"));
    t.rows
        .iter()
        .map(|row| {
            let int = |v: &Value| if let Value::Int(n) = v { *n } else { panic!("{v:?}") };
            let Value::Str(name) = &row[p] else { panic!("{:?}", row[p]) };
            (name.to_string(), int(&row[part]), int(&row[inv]))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tatp_compound_procedures_run_as_concurrent_single_partition_calls() {
    let dir = TempDir::new("compound");
    let procs = repo_root().join("apps/tatp/procedures");
    let server = Server::start_with(&dir.0, &["--sites", "4", "--procedures", procs.to_str().expect("utf-8")], "127.0.0.1:0");
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(server.client().await);
    }
    let c = &clients[0];
    load_kit(c).await;

    let answers = call_all(&clients, "UpdateLocationCompound", |id| vec![s(&format!("0{id}")), i(1000 + id)]).await;
    assert!(answers.iter().all(|a| *a == i(0)), "{answers:?}");
    let sum = adhoc(c, "SELECT SUM(vlr_location) FROM subscriber").await;
    assert_eq!(count(&sum), (0..SUBSCRIBERS).map(|id| 1000 + id).sum::<i64>());

    // The kit's InsertCallForwarding takes the subscriber's lowest facility (2) whatever
    // sf_type says, and replaces the row at its drawn start time: one row each.
    let answers = call_all(&clients, "InsertCallForwardingCompound", |id| vec![s(&format!("0{id}")), i(1), i(7), i(3)]).await;
    assert!(answers.iter().all(|a| *a == i(0)), "{answers:?}");
    let rows = adhoc(c, "SELECT COUNT(*) FROM call_forwarding WHERE sf_type = 2").await;
    assert_eq!(count(&rows), SUBSCRIBERS);
    let starts = adhoc(c, "SELECT s_id, start_time FROM call_forwarding").await;
    let deletes = starts.tables[0].rows.iter().map(|r| (r[0].clone(), r[1].clone())).collect::<Vec<_>>();
    let by_id = |id: i64| deletes.iter().find(|(s_id, _)| *s_id == i(id)).map(|(_, t)| t.clone()).expect("a row per subscriber");
    let answers = call_all(&clients, "DeleteCallForwardingCompound", |id| vec![s(&format!("0{id}")), i(2), by_id(id)]).await;
    assert!(answers.iter().all(|a| *a == i(0)), "{answers:?}");
    assert_eq!(count(&adhoc(c, "SELECT COUNT(*) FROM call_forwarding").await), 0);

    // An unknown number: -1, as the kit's procedures answer.
    let r = ok(c, "UpdateLocationCompound", vec![s("0999999"), i(1)]).await;
    assert_eq!(r.tables[0].rows[0][0], i(-1));

    // Every step ran as a single-partition call on its partition; nothing ran as a
    // multi-partition transaction (the compound procedures are not transactions).
    let stats = procedure_stats(c).await;
    let invocations = |proc: &str| -> i64 {
        stats.iter().filter(|(name, part, _)| name.ends_with(proc) && *part != MP_PARTITION_ID).map(|(_, _, n)| n).sum()
    };
    assert_eq!(invocations("UpdateLocation"), SUBSCRIBERS);
    assert_eq!(invocations("InsertCallForwarding"), SUBSCRIBERS);
    assert_eq!(invocations("DeleteCallForwarding"), SUBSCRIBERS);
    assert_eq!(invocations("SUBSCRIBER_NBR_MAP.select"), 3 * SUBSCRIBERS + 1);
    let partitions: std::collections::BTreeSet<i64> =
        stats.iter().filter(|(name, _, _)| name.ends_with("UpdateLocation")).map(|(_, p, _)| *p).collect();
    assert!(partitions.len() > 1, "the writes spread over the partitions: {partitions:?}");
    let mp: Vec<_> = stats.iter().filter(|(name, part, _)| *part == MP_PARTITION_ID && name.contains("Compound")).collect();
    assert!(mp.is_empty(), "compound procedures ran as multi-partition work: {mp:?}");
}

/// Calls in flight at once per client while measuring.
const MEASURE_IN_FLIGHT: usize = 50;
/// Calls each way runs while measuring.
const MEASURE_CALLS: i64 = 20_000;

/// A measurement more than a test, so it runs only with LOCKSTEP_LONG=1: UPDATE_LOCATION by
/// sub_nbr three ways on one server, every call checked to succeed, the rates printed (no
/// assertion on speed). `LOCKSTEP_LONG=1 cargo test -p lockstep-cli --test compound --
/// --nocapture measure`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn measure_compound_against_the_client_side_two_step() {
    if !common::history::long() {
        return;
    }
    let dir = TempDir::new("compound-measure");
    let procs = repo_root().join("apps/tatp/procedures");
    let server = Server::start_with(&dir.0, &["--sites", "4", "--procedures", procs.to_str().expect("utf-8")], "127.0.0.1:0");
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(server.client().await);
    }
    load_kit(&clients[0]).await;
    // The former version: the same two steps as one multi-partition transaction.
    adhoc(
        &clients[0],
        "CREATE PROCEDURE UpdateLocationMp FROM FILE 'mp.lua' SOURCE $lua$
         local find = sql [[SELECT s_id FROM subscriber_nbr_map WHERE sub_nbr = ?]]
         local update = sql [[UPDATE subscriber SET vlr_location = ? WHERE s_id = ?]]
         return function(sub_nbr, vlr_location)
           local row = find:first(sub_nbr)
           if not row then return -1 end
           update:exec(vlr_location, row.s_id)
           return 0
         end$lua$",
    )
    .await;
    for way in ["mode 3 (client: SUBSCRIBER_NBR_MAP.select, then UpdateLocation)", "mode 4 (UpdateLocationCompound)", "one MP transaction"]
    {
        let started = std::time::Instant::now();
        let per_client = MEASURE_CALLS / CLIENTS as i64;
        let runs = clients.iter().enumerate().map(|(k, c)| async move {
            let mut next = 0i64;
            let mut in_flight = futures::stream::FuturesUnordered::new();
            use futures::StreamExt;
            loop {
                while in_flight.len() < MEASURE_IN_FLIGHT && next < per_client {
                    let id = (k as i64 * per_client + next) % SUBSCRIBERS;
                    next += 1;
                    in_flight.push(one_update(c, way, id));
                }
                if in_flight.next().await.is_none() {
                    break;
                }
            }
        });
        futures::future::join_all(runs).await;
        let secs = started.elapsed().as_secs_f64();
        println!("{way}: {MEASURE_CALLS} calls in {secs:.2} s = {:.0}/s", MEASURE_CALLS as f64 / secs);
    }
}

async fn one_update(c: &Client, way: &str, id: i64) {
    let nbr = format!("0{id}");
    if way.starts_with("mode 3") {
        let r = ok(c, "SUBSCRIBER_NBR_MAP.select", vec![s(&nbr)]).await;
        let s_id = r.tables[0].rows[0][1].clone();
        ok(c, "UpdateLocation", vec![s_id, i(id)]).await;
    } else if way.starts_with("mode 4") {
        ok(c, "UpdateLocationCompound", vec![s(&nbr), i(id)]).await;
    } else {
        ok(c, "UpdateLocationMp", vec![s(&nbr), i(id)]).await;
    }
}
