//! Starts a cluster of real `lockstep server` processes on loopback for the cluster tests.

use std::path::Path;
use std::process::{Command, Stdio};

use super::{Server, BIN};

/// Sites per node of the test clusters: 3 nodes with k = 1 then hold 3 partitions.
pub const SITES_PER_NODE: u32 = 2;

/// Free loopback addresses for the nodes' internal ports (bound together, then released).
pub fn free_addrs(n: usize) -> Vec<String> {
    let held: Vec<std::net::TcpListener> = (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    held.iter().map(|l| l.local_addr().unwrap().to_string()).collect()
}

/// The nodes log errors only, on the test's stderr. LOCKSTEP_CLUSTER_LOG=<filter> (e.g.
/// `info,openraft=warn`) logs with that filter instead, node i's to
/// `<CARGO_TARGET_TMPDIR>/cluster-logs/node-i.log` (overwritten by the next cluster), to
/// study a failure.
fn log_setup(node: usize) -> (String, Stdio) {
    let Ok(filter) = std::env::var("LOCKSTEP_CLUSTER_LOG") else {
        // The Raft library reports every failed message to a killed node as an error.
        return ("error,openraft=off".into(), Stdio::inherit());
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cluster-logs");
    std::fs::create_dir_all(&dir).expect("create the cluster log directory");
    let file = std::fs::File::create(dir.join(format!("node-{node}.log"))).expect("create a node's log file");
    (filter, Stdio::from(file))
}

/// Starts `n` nodes with k-factor `k` (`SITES_PER_NODE` sites each, no command log: no
/// test restarts a node) and waits until every one is ready. Node i is `servers[i]`.
pub fn start_cluster(root: &Path, n: usize, k: u32) -> Vec<Server> {
    let hosts = free_addrs(n);
    let joined = hosts.join(",");
    let children: Vec<_> = hosts
        .iter()
        .enumerate()
        .map(|(i, internal)| {
            let data = root.join(format!("node-{i}"));
            let (filter, log) = log_setup(i);
            let child = Command::new(BIN)
                .arg("server")
                .args(["--listen", "127.0.0.1:0", "--pg", "off", "--sites", &SITES_PER_NODE.to_string(), "--command-log", "off"])
                .args(["--internal", internal, "--hosts", &joined, "--kfactor", &k.to_string(), "--data"])
                .arg(&data)
                .env("LOCKSTEP_LOG", filter)
                .stdout(Stdio::piped())
                .stderr(log)
                .spawn()
                .expect("start a cluster node");
            (child, data)
        })
        .collect();
    // Every node is started before any is waited for: none is ready before a majority is up.
    children.into_iter().map(|(child, data)| Server::from_child(child, &data)).collect()
}
