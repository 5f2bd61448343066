//! Client tests against the mock server: pipelining, the window, connection loss, routing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lockstep_core::{DataType, HashRing, ResultTable, Value};
use lockstep_wire::response::status;
use lockstep_wire::{Invocation, Response};

use crate::mock::{self, Auto, MockConn};
use crate::{Client, ClientConfig, ClientError};

async fn connect(auto: Auto, max_in_flight: usize) -> (Client, MockConn) {
    let (addr, mut conns) = mock::start(auto).await;
    let client = Client::connect(&addr, ClientConfig { max_in_flight, ..ClientConfig::default() }).await.unwrap();
    let conn = conns.recv().await.unwrap();
    (client, conn)
}

fn echo(inv: &Invocation) -> Response {
    let mut t = ResultTable::with_columns(&[("V", DataType::BigInt)]);
    t.push(vec![inv.params[0].clone()]);
    Response::success(inv.handle, vec![t])
}

fn spawn_call(client: &Client, v: i64) -> tokio::task::JoinHandle<Result<Response, ClientError>> {
    let c = client.clone();
    tokio::spawn(async move { c.call("P", vec![Value::Int(v)]).await })
}

#[tokio::test]
async fn pipelined_calls_match_out_of_order_answers_by_handle() {
    let (client, mut conn) = connect(mock::no_system_procs(), 100).await;
    let calls: Vec<_> = (0..5).map(|v| spawn_call(&client, v)).collect();
    let mut received = Vec::new();
    for _ in 0..5 {
        received.push(conn.calls.recv().await.unwrap());
    }
    for inv in received.iter().rev() {
        conn.replies.send(echo(inv)).unwrap();
    }
    for (v, call) in calls.into_iter().enumerate() {
        let resp = call.await.unwrap().unwrap();
        assert_eq!(resp.tables[0].rows, vec![vec![Value::Int(v as i64)]]);
    }
    assert_eq!(client.in_flight(), 0);
}

#[tokio::test]
async fn an_answer_read_in_place_holds_what_the_decoded_one_holds() {
    let (client, mut conn) = connect(mock::no_system_procs(), 10).await;
    let eager = spawn_call(&client, 7);
    let c = client.clone();
    let in_place = tokio::spawn(async move { c.start_call("P", vec![Value::from("seven")]).await?.wait_view().await });
    for _ in 0..2 {
        let inv = conn.calls.recv().await.unwrap();
        let reply = match &inv.params[0] {
            Value::Str(_) => {
                let mut t = ResultTable::with_columns(&[("V", DataType::Varchar)]);
                t.push(vec![inv.params[0].clone()]);
                Response::success(inv.handle, vec![t])
            }
            _ => echo(&inv),
        };
        conn.replies.send(reply).unwrap();
    }
    let view = in_place.await.unwrap().unwrap();
    assert_eq!(view.status, status::SUCCESS);
    let t = view.table(0).unwrap();
    assert_eq!((t.row_count(), &*t.columns()[0].name), (1, "V"));
    assert_eq!(t.row(0).unwrap().str(0).unwrap(), Some("seven"));
    assert_eq!(view.to_response().unwrap().tables[0].rows, vec![vec![Value::from("seven")]]);
    assert_eq!(eager.await.unwrap().unwrap().tables[0].rows, vec![vec![Value::Int(7)]]);
    assert_eq!(client.in_flight(), 0);
}

#[tokio::test]
async fn a_malformed_answer_fails_its_call_and_the_connection_goes_on() {
    let (client, mut conn) = connect(mock::no_system_procs(), 10).await;
    let bad = spawn_call(&client, 1);
    let inv = conn.calls.recv().await.unwrap();
    // A whole frame for the call's handle, whose flags announce a serialized exception
    // (which no answer of ours carries).
    let mut payload = vec![0u8];
    payload.extend_from_slice(&inv.handle.to_be_bytes());
    payload.extend_from_slice(&[0x40, 1, 0xFF]);
    let mut frame = (payload.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&payload);
    conn.raw.send(frame).unwrap();
    assert!(matches!(bad.await.unwrap(), Err(ClientError::Protocol(_))));
    let good = spawn_call(&client, 2);
    let inv = conn.calls.recv().await.unwrap();
    conn.replies.send(echo(&inv)).unwrap();
    assert_eq!(good.await.unwrap().unwrap().tables[0].rows, vec![vec![Value::Int(2)]]);
}

#[tokio::test]
async fn failure_status_is_still_a_response() {
    let (client, _conn) = connect(mock::no_system_procs(), 10).await;
    let resp = client.call("@Nope", vec![]).await.unwrap();
    assert_eq!(resp.status, status::UNEXPECTED_FAILURE);
    assert_eq!(resp.status_string.as_deref(), Some("Procedure @Nope was not found"));
}

#[tokio::test]
async fn the_window_bounds_calls_in_flight() {
    let (client, mut conn) = connect(mock::no_system_procs(), 2).await;
    let calls: Vec<_> = (0..3).map(|v| spawn_call(&client, v)).collect();
    let first = conn.calls.recv().await.unwrap();
    let second = conn.calls.recv().await.unwrap();
    // Give a third call every chance to get out; it must not, while two are unanswered.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(conn.calls.try_recv().is_err(), "a third call was sent past the window");
    assert_eq!(client.in_flight(), 2);
    conn.replies.send(echo(&first)).unwrap();
    let third = conn.calls.recv().await.unwrap();
    conn.replies.send(echo(&second)).unwrap();
    conn.replies.send(echo(&third)).unwrap();
    let mut got = Vec::new();
    for call in calls {
        got.push(call.await.unwrap().unwrap().tables[0].rows[0][0].clone());
    }
    got.sort();
    assert_eq!(got, vec![Value::Int(0), Value::Int(1), Value::Int(2)]);
}

#[tokio::test]
async fn an_unanswered_call_times_out_and_frees_its_slot() {
    let (client, mut conn) = connect(mock::no_system_procs(), 1).await;
    let err = client.call_with_timeout("P", vec![Value::Int(1)], Duration::from_millis(20)).await.unwrap_err();
    assert_eq!(err, ClientError::Timeout(20));
    assert_eq!(client.in_flight(), 0);
    let late = conn.calls.recv().await.unwrap();
    conn.replies.send(echo(&late)).unwrap();
    // The late answer is dropped; the next call gets its own.
    let call = spawn_call(&client, 2);
    let inv = conn.calls.recv().await.unwrap();
    conn.replies.send(echo(&inv)).unwrap();
    assert_eq!(call.await.unwrap().unwrap().tables[0].rows[0][0], Value::Int(2));
}

#[tokio::test]
async fn losing_the_connection_fails_every_pending_call() {
    let (client, mut conn) = connect(mock::no_system_procs(), 10).await;
    let calls: Vec<_> = (0..2).map(|v| spawn_call(&client, v)).collect();
    conn.calls.recv().await.unwrap();
    conn.calls.recv().await.unwrap();
    drop(conn);
    for call in calls {
        assert!(matches!(call.await.unwrap(), Err(ClientError::ConnectionLost(_))));
    }
    assert!(matches!(client.call("P", vec![Value::Int(1)]).await, Err(ClientError::ConnectionLost(_))));
    assert_eq!(client.in_flight(), 0);
}

fn procedures_table() -> ResultTable {
    let mut t = ResultTable::with_columns(&[
        ("PROCEDURE_CAT", DataType::Varchar),
        ("PROCEDURE_SCHEM", DataType::Varchar),
        ("PROCEDURE_NAME", DataType::Varchar),
        ("RESERVED1", DataType::Varchar),
        ("RESERVED2", DataType::Varchar),
        ("RESERVED3", DataType::Varchar),
        ("REMARKS", DataType::Varchar),
        ("PROCEDURE_TYPE", DataType::SmallInt),
        ("SPECIFIC_NAME", DataType::Varchar),
    ]);
    let row = |name: &str, remarks: &str| {
        vec![
            Value::Null,
            Value::Null,
            Value::from(name),
            Value::Null,
            Value::Null,
            Value::Null,
            Value::from(remarks),
            Value::Int(1),
            Value::from(name),
        ]
    };
    t.push(row("Sp", r#"{"readOnly":false,"singlePartition":true,"partitionParameter":1,"partitionParameterType":6}"#));
    t.push(row("ByName", r#"{"readOnly":true,"singlePartition":true,"partitionParameter":0,"partitionParameterType":9}"#));
    t.push(row("Mp", r#"{"readOnly":false,"singlePartition":false}"#));
    t
}

/// A one-host, four-partition server that answers the topology calls and @GetPartitionKeys,
/// and echoes where an all-partition call ran.
fn cluster_of_four() -> Auto {
    cluster_of_four_with(Arc::new(AtomicBool::new(false)))
}

/// `cluster_of_four` whose catalog has procedure `Late` too once `late` is set.
fn cluster_of_four_with(late: Arc<AtomicBool>) -> Auto {
    let ring = HashRing::new(4);
    Arc::new(move |inv: &Invocation| match inv.procedure.as_str() {
        "@Statistics" => {
            let mut topo =
                ResultTable::with_columns(&[("Partition", DataType::Integer), ("Sites", DataType::Varchar), ("Leader", DataType::Varchar)]);
            for p in 0..4 {
                topo.push(vec![Value::Int(p), Value::from(format!("0:{p}")), Value::from(format!("0:{p}"))]);
            }
            topo.push(vec![Value::Int(16383), Value::from("0:4"), Value::from("0:4")]);
            let mut hash = ResultTable::with_columns(&[("HASHTYPE", DataType::Varchar), ("HASHCONFIG", DataType::Varbinary)]);
            hash.push(vec![Value::from("ELASTIC"), Value::Bytes(ring.config_bytes().into())]);
            Some(Response::success(0, vec![topo, hash]))
        }
        "@SystemCatalog" => {
            let mut t = procedures_table();
            if late.load(Ordering::SeqCst) {
                let mut late = t.rows[0].clone();
                late[2] = Value::from("Late");
                t.push(late);
            }
            Some(Response::success(0, vec![t]))
        }
        "@GetPartitionKeys" => {
            let mut t = ResultTable::with_columns(&[("PARTITION_ID", DataType::Integer), ("PARTITION_KEY", DataType::Integer)]);
            for (p, k) in ring.partition_keys() {
                t.push(vec![Value::Int(p as i64), Value::Int(k)]);
            }
            Some(Response::success(0, vec![t]))
        }
        "Everywhere" => {
            let mut t =
                ResultTable::with_columns(&[("PARTITION", DataType::Integer), ("KEY", DataType::BigInt), ("ARG", DataType::Varchar)]);
            let dest = inv.partition_destination.map(|p| p as i64).unwrap_or(-1);
            let all = if inv.all_partition { "all" } else { "one" };
            t.push(vec![Value::Int(dest), inv.params[0].clone(), Value::from(format!("{all} {}", inv.params[1]))]);
            Some(Response::success(0, vec![t]))
        }
        _ => None,
    })
}

#[tokio::test]
async fn routing_follows_the_topology_answer() {
    let (client, _conn) = connect(cluster_of_four(), 10).await;
    let ring = HashRing::new(4);
    for k in [0i64, 1, 42, 1_000_000, -7] {
        let expected = ring.partition_for(&Value::Int(k));
        assert_eq!(client.partition_for_call("Sp", &[Value::from("x"), Value::Int(k)]), Some(expected));
        // A string argument for a BIGINT column is parsed first, as the server does.
        assert_eq!(client.partition_for_call("Sp", &[Value::Null, Value::from(k.to_string())]), Some(expected));
    }
    assert_eq!(client.partition_for_call("ByName", &[Value::from("hello")]), Some(ring.partition_for(&Value::from("hello"))));
    assert_eq!(client.partition_for_call("Sp", &[Value::Int(1), Value::Null]), Some(0));
    assert_eq!(client.partition_for_call("Sp", &[Value::Int(1)]), None, "too few arguments");
    assert_eq!(client.partition_for_call("Mp", &[Value::Int(1)]), None);
    assert_eq!(client.partition_for_call("Unknown", &[Value::Int(1)]), None);
}

/// A procedure made after the client connected: its first call goes to any node, and the
/// routing is read again, so that later calls go to the leader.
#[tokio::test]
async fn a_procedure_made_after_connecting_is_routed_once_a_call_names_it() {
    let late = Arc::new(AtomicBool::new(false));
    // Two connections (to the same mock): with one, there is no choice to make.
    let (addr, mut conns) = mock::start(cluster_of_four_with(late.clone())).await;
    let client = Client::connect_many(&[&addr, &addr], ClientConfig::default()).await.expect("connect");
    let (mut a, mut b) = (conns.recv().await.expect("a connection"), conns.recv().await.expect("another"));
    assert_eq!(client.partition_for_call("Late", &[Value::Null, Value::Int(7)]), None);
    late.store(true, Ordering::SeqCst);
    let c = client.clone();
    let call = tokio::spawn(async move { c.call("Late", vec![Value::Int(1), Value::Int(7)]).await });
    let (inv, conn) = tokio::select! {
        inv = a.calls.recv() => (inv, &a),
        inv = b.calls.recv() => (inv, &b),
    };
    conn.replies.send(echo(&inv.expect("the call reached the server"))).expect("the mock takes replies");
    assert!(call.await.expect("the call's task").is_ok());
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while client.partition_for_call("Late", &[Value::Null, Value::Int(7)]).is_none() {
        assert!(std::time::Instant::now() < deadline, "the routing never learnt the new procedure");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(client.partition_for_call("Late", &[Value::Null, Value::Int(7)]), Some(HashRing::new(4).partition_for(&Value::Int(7))));
}

#[tokio::test]
async fn without_system_procedures_routing_is_off_but_calls_work() {
    let (client, mut conn) = connect(mock::no_system_procs(), 10).await;
    assert_eq!(client.partition_for_call("Sp", &[Value::Int(1), Value::Int(2)]), None);
    let call = spawn_call(&client, 9);
    let inv = conn.calls.recv().await.unwrap();
    conn.replies.send(echo(&inv)).unwrap();
    assert_eq!(call.await.unwrap().unwrap().tables[0].rows[0][0], Value::Int(9));
}

#[tokio::test]
async fn call_all_partitions_runs_once_per_partition() {
    let (client, _conn) = connect(cluster_of_four(), 3).await;
    let resps = client.call_all_partitions("Everywhere", vec![Value::from("arg")]).await.unwrap();
    let keys = HashRing::new(4).partition_keys();
    assert_eq!(resps.len(), 4);
    for (resp, (p, k)) in resps.iter().zip(keys) {
        assert_eq!(resp.tables[0].rows, vec![vec![Value::Int(p as i64), Value::Int(k), Value::from("all arg")]]);
    }
}

#[tokio::test]
async fn call_all_partitions_reports_a_failed_key_lookup() {
    let (client, _conn) = connect(mock::no_system_procs(), 3).await;
    let err = client.call_all_partitions("Everywhere", vec![]).await.unwrap_err();
    assert_eq!(err, ClientError::Failed("@GetPartitionKeys failed: Procedure @GetPartitionKeys was not found".into()));
}

#[tokio::test]
async fn unencodable_parameters_are_refused_before_sending() {
    let (client, _conn) = connect(mock::no_system_procs(), 3).await;
    let err = client.call("P", vec![Value::Array(vec![Value::Int(1), Value::from("a")].into())]).await.unwrap_err();
    assert!(matches!(err, ClientError::InvalidCall(_)), "{err:?}");
    assert_eq!(client.in_flight(), 0);
}

#[tokio::test]
async fn connecting_to_nothing_is_an_io_error() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    assert!(matches!(Client::connect(&addr, ClientConfig::default()).await, Err(ClientError::Io(_))));
}

/// Two callers of `call_all_partitions` each holding part of the window while waiting for
/// the rest would wait on each other forever: the slots of a chunk are taken all at once.
#[tokio::test]
async fn concurrent_all_partition_calls_cannot_deadlock_on_the_window() {
    let (client, mut conn) = connect(cluster_of_four(), 2).await;
    // The first call learns the partition keys, so the calls below ask only "Everywhere".
    client.call_all_partitions("Everywhere", vec![Value::from("x")]).await.unwrap();
    // Two unanswered calls fill the window.
    let held: Vec<_> = (0..2).map(|v| spawn_call(&client, v)).collect();
    let (p1, p2) = (conn.calls.recv().await.unwrap(), conn.calls.recv().await.unwrap());
    let spawn_all = || {
        let c = client.clone();
        tokio::spawn(async move { c.call_all_partitions("Everywhere", vec![Value::from("y")]).await })
    };
    // Both wait for the window, first one then the other; then slots free one at a time,
    // which (with a slot taken per call) would give each of them one slot of the two.
    let first = spawn_all();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = spawn_all();
    tokio::time::sleep(Duration::from_millis(50)).await;
    conn.replies.send(echo(&p1)).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    conn.replies.send(echo(&p2)).unwrap();
    for call in [first, second] {
        let resps = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("all-partition calls deadlocked on the window")
            .unwrap()
            .unwrap();
        assert_eq!(resps.len(), 4);
    }
    for h in held {
        h.await.unwrap().unwrap();
    }
    assert_eq!(client.in_flight(), 0);
}

#[tokio::test]
async fn an_idle_connection_pings_the_server_so_its_idle_timeout_never_fires() {
    // Everything but @Ping is answered by the mock itself; pings reach the test.
    let others = mock::no_system_procs();
    let auto: Auto = Arc::new(move |inv: &Invocation| if inv.procedure == "@Ping" { None } else { others(inv) });
    let (_client, mut conn) = connect(auto, 10).await;
    // Time stands still until every task waits; then it jumps to the next timer.
    tokio::time::pause();
    let ping = tokio::time::timeout(Duration::from_secs(120), conn.calls.recv()).await;
    let ping = ping.expect("an idle connection must ping within its keep-alive interval").expect("a call");
    assert_eq!(ping.procedure, "@Ping");
}
