//! Starts a cluster of real `lockstep server` processes on loopback for the cluster tests.

use std::path::Path;
use std::process::{Command, Stdio};

use super::{Server, BIN};

/// Sites per node of the test clusters: 3 nodes with k = 1 then hold 3 partitions.
pub const SITES_PER_NODE: u32 = 2;

/// Free loopback addresses for the nodes' internal ports, which must be named before the
/// nodes start (see `free_port_run`).
pub fn free_addrs(n: usize) -> Vec<String> {
    let first = free_port_run(n as u16);
    (first..first + n as u16).map(|p| format!("127.0.0.1:{p}")).collect()
}

/// The first of `n` consecutive loopback ports free now. They are taken below the kernel's
/// range for outgoing connections (32768 and up): a port picked there was once taken,
/// between the check and the node's bind, by a connection of a cluster another test of
/// the same binary ran. Each test binary starts at its own place (by process id) and
/// never hands out a port twice.
pub fn free_port_run(n: u16) -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(u32::MAX, std::process::id().wrapping_mul(97) % SPAN, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..1_000 {
        let offset = NEXT.fetch_add(u32::from(n), Ordering::Relaxed) % SPAN;
        if offset + u32::from(n) > SPAN {
            continue;
        }
        let first = (LOW + offset) as u16;
        let held: Vec<_> = (first..first + n).map(|p| std::net::TcpListener::bind(("127.0.0.1", p))).collect();
        if held.iter().all(Result::is_ok) {
            return first;
        }
    }
    panic!("no {n} consecutive free ports found");
}

/// The nodes log errors only, on the test's stderr. LOCKSTEP_CLUSTER_LOG=<filter> (e.g.
/// `info,openraft=warn`) logs with that filter instead, node i's to
/// `<CARGO_TARGET_TMPDIR>/cluster-logs/node-i.log` (appended to: a restarted node's
/// second process writes after its first), to study a failure.
fn log_setup(node: usize) -> (String, Stdio) {
    let Ok(filter) = std::env::var("LOCKSTEP_CLUSTER_LOG") else {
        // The Raft library reports every failed message to a killed node as an error.
        return ("error,openraft=off".into(), Stdio::inherit());
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cluster-logs");
    std::fs::create_dir_all(&dir).expect("create the cluster log directory");
    let file =
        std::fs::OpenOptions::new().create(true).append(true).open(dir.join(format!("node-{node}.log"))).expect("open a node's log file");
    (filter, Stdio::from(file))
}

/// Starts `n` nodes with k-factor `k` (`SITES_PER_NODE` sites each, command log off) and
/// waits until every one is ready. Node i is `servers[i]`.
pub fn start_cluster(root: &Path, n: usize, k: u32) -> Vec<Server> {
    start_cluster_on(root, &free_addrs(n), None, k, "off")
}

/// `start_cluster` with the nodes' internal addresses given (to restart a node later with
/// `start_node`), where each listens if not there (`--internal-listen`, behind a
/// `FaultProxy`), and their `--command-log` mode.
pub fn start_cluster_on(root: &Path, hosts: &[String], listens: Option<&[String]>, k: u32, command_log: &str) -> Vec<Server> {
    start_cluster_with(root, hosts, listens, k, command_log, &[])
}

/// `start_cluster_on`, with more arguments for every node's `lockstep server` (`extra`).
pub fn start_cluster_with(
    root: &Path,
    hosts: &[String],
    listens: Option<&[String]>,
    k: u32,
    command_log: &str,
    extra: &[&str],
) -> Vec<Server> {
    let children: Vec<_> = (0..hosts.len()).map(|i| spawn_node(root, i, hosts, listens, k, command_log, extra)).collect();
    // Every node is started before any is waited for: none is ready before a majority is up.
    children.into_iter().map(|(child, data)| Server::from_child(child, &data)).collect()
}

/// Starts node `i` of the cluster on `hosts` (again, after it was killed: with its data
/// directory, whose cluster membership data it keeps) and waits until it is ready.
pub fn start_node(root: &Path, i: usize, hosts: &[String], listens: Option<&[String]>, k: u32, command_log: &str) -> Server {
    start_node_with(root, i, hosts, listens, k, command_log, &[])
}

/// `start_node`, with more arguments for `lockstep server` (`extra`).
pub fn start_node_with(
    root: &Path,
    i: usize,
    hosts: &[String],
    listens: Option<&[String]>,
    k: u32,
    command_log: &str,
    extra: &[&str],
) -> Server {
    let (child, data) = spawn_node(root, i, hosts, listens, k, command_log, extra);
    Server::from_child(child, &data)
}

fn spawn_node(
    root: &Path,
    i: usize,
    hosts: &[String],
    listens: Option<&[String]>,
    k: u32,
    command_log: &str,
    extra: &[&str],
) -> (std::process::Child, std::path::PathBuf) {
    let data = root.join(format!("node-{i}"));
    let (filter, log) = log_setup(i);
    let child = Command::new(BIN)
        .arg("server")
        .args([
            "--listen",
            "127.0.0.1:0",
            "--http",
            "off",
            "--pg",
            "off",
            "--sites",
            &SITES_PER_NODE.to_string(),
            "--command-log",
            command_log,
        ])
        .args(["--internal", &hosts[i], "--hosts", &hosts.join(","), "--kfactor", &k.to_string(), "--data"])
        .arg(&data)
        .args(listens.map(|l| ["--internal-listen".to_string(), l[i].clone()]).into_iter().flatten())
        .args(extra)
        .env("LOCKSTEP_LOG", filter)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("start a cluster node");
    (child, data)
}

/// Each partition's members as `@Statistics TOPO` lists them through `client` (host ids,
/// by partition), or None if the call failed.
pub async fn members(client: &lockstep_client::Client) -> Option<Vec<Vec<String>>> {
    use lockstep_core::Value;
    let r = client.call("@Statistics", vec![Value::Str("TOPO".into()), Value::Int(0)]).await.ok().filter(|r| r.status == 1)?;
    let t = r.tables.first()?;
    // The last row is the multi-partition coordinator's.
    let parts = &t.rows[..t.rows.len().saturating_sub(1)];
    Some(
        parts
            .iter()
            .map(|row| match &row[1] {
                Value::Str(sites) => {
                    sites.split(',').filter(|x| !x.is_empty()).map(|x| x.split(':').next().unwrap_or("").to_string()).collect()
                }
                _ => Vec::new(),
            })
            .collect(),
    )
}

/// Whether every partition has k + 1 members (every replica holds it), per `client`.
pub async fn fully_replicated(client: &lockstep_client::Client, k: u32) -> bool {
    members(client).await.is_some_and(|m| !m.is_empty() && m.iter().all(|hosts| hosts.len() == k as usize + 1))
}

/// Waits (at most `limit`) until every partition has k + 1 members, per `client`; panics
/// with `what` and the members TOPO lists if not.
pub async fn wait_fully_replicated(client: &lockstep_client::Client, k: u32, limit: std::time::Duration, what: &str) {
    let deadline = std::time::Instant::now() + limit;
    while !fully_replicated(client, k).await {
        assert!(std::time::Instant::now() < deadline, "{what}: TOPO lists {:?}", members(client).await);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
