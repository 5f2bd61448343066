//! A fault proxy between the nodes of a test cluster. Node i is started with `--internal`
//! set to its proxy's address (the one every node connects to) and `--internal-listen` set
//! to its own; the proxy forwards every connection. The first frame on a connection is the
//! connecting node's hello, which names it, so the proxy knows which node sends each byte.
//! While the link from node a to node b is cut, the bytes a sends b are held, not dropped;
//! when it heals they flow again: a network split as TCP sees it (silence, then late
//! delivery), not a reset. Cuts may be one way.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockstep_cluster::message::{encode_frame, read_frame, Request};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How often a held link looks whether it healed.
const HELD_POLL: Duration = Duration::from_millis(10);
const COPY_BUFFER_BYTES: usize = 64 * 1024;

type Cuts = Arc<Mutex<HashSet<(usize, usize)>>>;

pub struct FaultProxy {
    cuts: Cuts,
    nodes: usize,
    tasks: Vec<JoinHandle<()>>,
}

/// What a proxied cluster's nodes are started with.
pub struct ProxiedAddrs {
    /// `--hosts` (and each node's `--internal`): the proxies.
    pub hosts: Vec<String>,
    /// Each node's `--internal-listen`.
    pub listens: Vec<String>,
}

impl FaultProxy {
    /// Proxies for `nodes` nodes, on free loopback ports.
    pub async fn start(nodes: usize) -> (FaultProxy, ProxiedAddrs) {
        let cuts: Cuts = Arc::default();
        let listens = super::cluster::free_addrs(nodes);
        let mut hosts = Vec::new();
        let mut tasks = Vec::new();
        for (node, target) in listens.iter().enumerate() {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a proxy port");
            hosts.push(listener.local_addr().expect("proxy address").to_string());
            tasks.push(tokio::spawn(accept(listener, node, target.clone(), cuts.clone())));
        }
        (FaultProxy { cuts, nodes, tasks }, ProxiedAddrs { hosts, listens })
    }

    /// Cuts the link from `from` to `to` (one way).
    pub fn cut_one_way(&self, from: usize, to: usize) {
        self.cuts.lock().unwrap().insert((from, to));
    }

    /// Cuts `node` off from every other node, both ways.
    pub fn isolate(&self, node: usize) {
        for other in (0..self.nodes).filter(|o| *o != node) {
            self.cut_one_way(node, other);
            self.cut_one_way(other, node);
        }
    }

    /// Heals every cut.
    pub fn heal(&self) {
        self.cuts.lock().unwrap().clear();
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn accept(listener: TcpListener, node: usize, target: String, cuts: Cuts) {
    while let Ok((inbound, _)) = listener.accept().await {
        tokio::spawn(forward(inbound, node, target.clone(), cuts.clone()));
    }
}

/// Forwards one connection to node `to`, once its hello said who opened it.
async fn forward(mut inbound: TcpStream, to: usize, target: String, cuts: Cuts) {
    let Ok((id, hello)) = read_frame::<Request, _>(&mut inbound).await else { return };
    let from = match &hello {
        Request::Hello(h) => h.from as usize,
        _ => return,
    };
    let Ok(first) = encode_frame(id, &hello) else { return };
    let Ok(mut outbound) = TcpStream::connect(&target).await else { return };
    let _ = (inbound.set_nodelay(true), outbound.set_nodelay(true));
    if outbound.write_all(&first).await.is_err() {
        return;
    }
    let (in_read, in_write) = inbound.into_split();
    let (out_read, out_write) = outbound.into_split();
    let there = tokio::spawn(pump(in_read, out_write, (from, to), cuts.clone()));
    pump(out_read, in_write, (to, from), cuts).await;
    there.abort();
}

/// Copies bytes one way, holding them while the link is cut.
async fn pump(mut from: impl AsyncRead + Unpin, mut to: impl AsyncWrite + Unpin, link: (usize, usize), cuts: Cuts) {
    let mut buf = vec![0u8; COPY_BUFFER_BYTES];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while cuts.lock().unwrap().contains(&link) {
            tokio::time::sleep(HELD_POLL).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
