//! End-to-end tests of scheduled tasks (`CREATE TASK`): they run on their schedule (EVERY,
//! DELAY, CRON), once or on every partition, stop on an error when told to, are enabled,
//! disabled and dropped, are counted in `@Statistics TASK`, and survive a restart; VoltDB's
//! `DIRECTED FROM CLASS` procedures run from a task, and scheduler-class tasks stay disabled.

mod common;

use std::time::{Duration, Instant};

use common::{adhoc, Server, TempDir};
use lockstep_client::Client;
use lockstep_core::Value;

/// How long a test waits for runs before it fails.
const DEADLINE_S: u64 = 30;

async fn scalar(client: &Client, sql: &str) -> i64 {
    adhoc(client, sql).await.tables[0].rows[0][0].as_i64().expect("an integer")
}

/// Polls until `check` holds; false when the deadline passes first.
async fn eventually<F, Fut>(mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(DEADLINE_S);
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// `@Statistics TASK`'s row for `task`: (STATE, RUNS, PROCEDURE_INVOCATIONS, PROCEDURE_FAILURES, LAST_ERROR).
async fn task_stats(client: &Client, task: &str) -> Option<(String, i64, i64, i64, Option<String>)> {
    let r = client.call("@Statistics", vec![Value::from("TASK"), Value::Int(0)]).await.expect("statistics");
    assert_eq!(r.status, 1, "{:?}", r.status_string);
    let t = &r.tables[0];
    let col = |name: &str| t.columns.iter().position(|c| &*c.name == name).expect("column");
    let text = |v: &Value| match v {
        Value::Str(s) => Some(s.to_string()),
        _ => None,
    };
    t.rows.iter().find(|row| row[col("TASK_NAME")] == Value::from(task)).map(|row| {
        (
            text(&row[col("STATE")]).unwrap_or_default(),
            row[col("RUNS")].as_i64().unwrap_or(-1),
            row[col("PROCEDURE_INVOCATIONS")].as_i64().unwrap_or(-1),
            row[col("PROCEDURE_FAILURES")].as_i64().unwrap_or(-1),
            text(&row[col("LAST_ERROR")]),
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_run_on_schedule_are_disabled_enabled_dropped_and_survive_a_restart() {
    let dir = TempDir::new("tasks");
    let server = Server::start(&dir.0, 2);
    let client = server.client().await;
    adhoc(
        &client,
        "CREATE TABLE counter (id INTEGER NOT NULL PRIMARY KEY, n BIGINT NOT NULL); \
         CREATE PROCEDURE Bump AS UPDATE counter SET n = n + ? WHERE id = 1;",
    )
    .await;
    adhoc(&client, "INSERT INTO counter VALUES (1, 0)").await;
    adhoc(&client, "CREATE TASK bump ON SCHEDULE EVERY 100 MILLISECONDS PROCEDURE Bump WITH (1)").await;
    assert!(eventually(|| async { scalar(&client, "SELECT n FROM counter").await >= 3 }).await, "the task did not run");
    let (state, runs, calls, failures, _) = task_stats(&client, "BUMP").await.expect("BUMP in @Statistics TASK");
    assert_eq!((state.as_str(), failures), ("ENABLED", 0));
    assert!(runs >= 3 && calls == runs, "{runs} runs, {calls} calls");

    adhoc(&client, "ALTER TASK bump DISABLE").await;
    // A run that was out when it was disabled may still land: wait it out, then nothing moves.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n = scalar(&client, "SELECT n FROM counter").await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(scalar(&client, "SELECT n FROM counter").await, n, "a disabled task ran");
    assert_eq!(task_stats(&client, "BUMP").await.map(|s| s.0), Some("DISABLED".into()));

    // Restart: the task (disabled) is schema; enabled again, it runs again.
    drop(client);
    assert!(server.stop().success());
    let server = Server::start(&dir.0, 2);
    let client = server.client().await;
    assert_eq!(task_stats(&client, "BUMP").await.map(|s| s.0), Some("DISABLED".into()));
    let n = scalar(&client, "SELECT n FROM counter").await;
    adhoc(&client, "ALTER TASK bump ENABLE").await;
    assert!(eventually(|| async { scalar(&client, "SELECT n FROM counter").await >= n + 2 }).await, "the enabled task did not run");

    adhoc(&client, "DROP TASK bump").await;
    assert_eq!(task_stats(&client, "BUMP").await, None);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n = scalar(&client, "SELECT n FROM counter").await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(scalar(&client, "SELECT n FROM counter").await, n, "a dropped task ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_delay_cron_and_on_error_stop() {
    let dir = TempDir::new("tasks-kinds");
    let server = Server::start(&dir.0, 2);
    let client = server.client().await;
    adhoc(
        &client,
        "CREATE TABLE hits (id BIGINT NOT NULL PRIMARY KEY, n BIGINT NOT NULL); PARTITION TABLE hits ON COLUMN id; \
         CREATE PROCEDURE Touch DIRECTED AS UPDATE hits SET n = n + 1; \
         CREATE TABLE once (id INTEGER NOT NULL PRIMARY KEY); \
         CREATE TABLE ticks (kind VARCHAR(8) NOT NULL, at TIMESTAMP DEFAULT NOW);",
    )
    .await;
    for id in 0..16 {
        adhoc(&client, &format!("INSERT INTO hits VALUES ({id}, 0)")).await;
    }
    // RUN ON PARTITIONS: each run touches every partition's rows.
    adhoc(&client, "CREATE TASK touch ON SCHEDULE DELAY 50 MILLISECONDS PROCEDURE Touch RUN ON PARTITIONS").await;
    assert!(eventually(|| async { scalar(&client, "SELECT MIN(n) FROM hits").await >= 2 }).await, "some partition was not run on");
    let (_, runs, calls, _, _) = task_stats(&client, "TOUCH").await.expect("TOUCH");
    assert_eq!(calls, runs * 2, "one call per partition (2) per run");

    // CRON, every second.
    adhoc(&client, "CREATE TASK tick ON SCHEDULE CRON '* * * * * *' PROCEDURE TICKS.insert WITH ('cron', NULL)").await;
    assert!(eventually(|| async { scalar(&client, "SELECT COUNT(*) FROM ticks WHERE kind = 'cron'").await >= 2 }).await);

    // ON ERROR STOP: the second run fails (a duplicate key) and the task stops there.
    adhoc(&client, "CREATE TASK once ON SCHEDULE EVERY 50 MILLISECONDS PROCEDURE ONCE.insert WITH (1) ON ERROR STOP").await;
    assert!(eventually(|| async { task_stats(&client, "ONCE").await.is_some_and(|s| s.0 == "STOPPED") }).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, runs, _, failures, error) = task_stats(&client, "ONCE").await.expect("ONCE");
    assert_eq!((runs, failures), (2, 1), "a stopped task runs no more");
    assert!(error.unwrap_or_default().to_lowercase().contains("constraint"));
    adhoc(&client, "ALTER TASK once ENABLE").await;
    assert!(eventually(|| async { task_stats(&client, "ONCE").await.is_some_and(|s| s.0 == "STOPPED" && s.1 == 3) }).await);
}

/// The end of VoltDB's charging demo script: a `DIRECTED FROM CLASS` procedure (a Lua file
/// here, deleting with `ORDER BY … LIMIT` on its own partition) run on every partition by a
/// task, and a Java scheduler-class task created disabled, which cannot be enabled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directed_class_procedures_run_from_tasks_and_class_tasks_stay_disabled() {
    let dir = TempDir::new("tasks-class");
    let procs = dir.0.join("procs");
    std::fs::create_dir_all(&procs).expect("procedure directory");
    let sweep = "local del = sql [[DELETE FROM hits ORDER BY id LIMIT 1]]\n\
                 return function() return result_table({ 'modified_tuples' }, { { del:exec() } }) end\n";
    std::fs::write(procs.join("Sweep.lua"), sweep).expect("write Sweep.lua");
    let procs_arg = procs.to_str().expect("a UTF-8 path").to_string();
    let data = dir.0.join("data");
    let server = Server::start_with(&data, &["--sites", "2", "--procedures", &procs_arg], "127.0.0.1:0");
    let client = server.client().await;
    adhoc(&client, "CREATE TABLE hits (id BIGINT NOT NULL PRIMARY KEY); PARTITION TABLE hits ON COLUMN id;").await;
    for id in 0..16 {
        adhoc(&client, &format!("INSERT INTO hits VALUES ({id})")).await;
    }
    adhoc(&client, "CREATE PROCEDURE DIRECTED\n   FROM CLASS chargingdemoprocs.Sweep;").await;
    adhoc(&client, "CREATE TASK sweep ON SCHEDULE DELAY 20 MILLISECONDS PROCEDURE Sweep ON ERROR LOG RUN ON PARTITIONS").await;
    assert!(
        eventually(|| async { scalar(&client, "SELECT COUNT(*) FROM hits").await == 0 }).await,
        "the directed sweep did not empty both partitions"
    );
    let (_, runs, calls, failures, error) = task_stats(&client, "SWEEP").await.expect("SWEEP");
    assert_eq!((calls, failures, error), (runs * 2, 0, None), "one call per partition per run, none failing");
    adhoc(&client, "DROP TASK sweep").await;

    let demo =
        "CREATE TASK PurgeWrangler  FROM CLASS chargingdemotasks.PurgeWrangler WITH (10,30000) ON ERROR LOG RUN ON PARTITIONS DISABLE;";
    adhoc(&client, demo).await;
    assert_eq!(task_stats(&client, "PURGEWRANGLER").await.map(|s| s.0), Some("DISABLED".into()));
    let r = client.call("@AdHoc", vec![Value::from("ALTER TASK PurgeWrangler ENABLE")]).await.expect("an answer");
    assert_eq!(r.status, -2);
    let msg = r.status_string.unwrap_or_default();
    assert!(msg.contains("cannot run Java classes") && msg.contains("chargingdemotasks.PurgeWrangler"), "{msg}");

    // Both are schema: after a restart the procedure is directed and the task still disabled.
    drop(client);
    assert!(server.stop().success());
    let server = Server::start_with(&data, &["--sites", "2", "--procedures", &procs_arg], "127.0.0.1:0");
    let client = server.client().await;
    assert_eq!(task_stats(&client, "PURGEWRANGLER").await.map(|s| s.0), Some("DISABLED".into()));
    let r = client.call("Sweep", vec![]).await.expect("an answer");
    assert_ne!(r.status, 1, "a directed procedure called without a partition is refused");
    adhoc(&client, "DROP TASK PurgeWrangler").await;
    assert_eq!(task_stats(&client, "PURGEWRANGLER").await, None);
}
