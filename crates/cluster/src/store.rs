//! The membership group's storage for openraft: the Raft log and vote on disk
//! (`LogStore`), and the state machine, the cluster state, with its snapshots on disk
//! (`StateMachine`).
//!
//! Files in the node's data directory:
//! - `raft-log`: CRC-checked records (`record.rs`), one per log entry, appended and synced
//!   before openraft is told they are durable. Truncating or purging rewrites the file whole
//!   (atomically): both are rare here and the log stays short because it is compacted into
//!   snapshots. A torn record at the end (a crash mid-append) is cut off on open.
//! - `raft-vote`: the last vote, replaced atomically and synced before `save_vote` returns.
//! - `raft-snapshot`: the last snapshot (its meta and the serialized cluster state),
//!   replaced atomically whenever one is built or installed.
//!
//! What survives a restart: the vote, every appended entry, and the last snapshot. The state
//! machine is rebuilt from the snapshot, and openraft re-applies the log after it once the
//! group's leader tells the node what is committed (the committed index is not saved).
//! Disk IO is done inline on the async task: the membership group writes a few small records
//! per change, and the group changes rarely.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::File;
use std::io::{self, Cursor, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, RaftLogStorage, RaftStateMachine};
use openraft::{
    AnyError, EmptyNode, Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, LogState, OptionalSend, RaftLogReader, RaftSnapshotBuilder,
    Snapshot, SnapshotMeta, StorageError, StorageIOError, StoredMembership, Vote,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::placement::Placement;
use crate::raft::{RaftNodeId, TypeConfig};
use crate::record;
use crate::state::{ClusterState, Outcome};

const LOG_FILE: &str = "raft-log";
const VOTE_FILE: &str = "raft-vote";
const SNAPSHOT_FILE: &str = "raft-snapshot";

type StoreResult<T> = Result<T, StorageError<RaftNodeId>>;

/// One record of the log file.
#[derive(Serialize, Deserialize)]
enum LogRecord {
    /// The log was purged up to here (first in a rewritten file).
    Purged(LogId<RaftNodeId>),
    Entry(Entry<TypeConfig>),
}

fn io_error(subject: ErrorSubject<RaftNodeId>, verb: ErrorVerb, e: impl std::error::Error + 'static) -> StorageError<RaftNodeId> {
    StorageIOError::new(subject, verb, AnyError::new(&e)).into()
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, postcard::Error> {
    postcard::to_stdvec(value)
}

struct LogInner {
    path: PathBuf,
    file: File,
    entries: BTreeMap<u64, Entry<TypeConfig>>,
    last_purged: Option<LogId<RaftNodeId>>,
    vote_path: PathBuf,
    vote: Option<Vote<RaftNodeId>>,
}

/// The Raft log and vote, on disk. Clones share one log (a clone is the log reader).
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Mutex<LogInner>>,
}

impl LogStore {
    /// Opens (or creates) the log and vote in `dir`.
    pub fn open(dir: &Path) -> io::Result<LogStore> {
        let path = dir.join(LOG_FILE);
        let (entries, last_purged) = read_log(&path)?;
        let vote_path = dir.join(VOTE_FILE);
        let vote = match record::read_whole(&vote_path)? {
            None => None,
            Some(bytes) => Some(postcard::from_bytes(&bytes).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{} cannot be read ({e}): the node's data directory is damaged", vote_path.display()),
                )
            })?),
        };
        let file = record::open_append(&path)?;
        Ok(LogStore { inner: Arc::new(Mutex::new(LogInner { path, file, entries, last_purged, vote_path, vote })) })
    }

    fn lock(&self) -> MutexGuard<'_, LogInner> {
        // A panic while holding the lock leaves the data consistent (every change is made in
        // memory after its disk write succeeded), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Reads the log file: its entries and how far it was purged. A torn tail is cut off.
fn read_log(path: &Path) -> io::Result<(BTreeMap<u64, Entry<TypeConfig>>, Option<LogId<RaftNodeId>>)> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    let (records, good) = record::decode_all(&bytes);
    let mut entries = BTreeMap::new();
    let mut last_purged = None;
    for payload in records {
        let rec: LogRecord = postcard::from_bytes(payload).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} holds a record that cannot be read ({e}): the node's data directory is damaged", path.display()),
            )
        })?;
        match rec {
            LogRecord::Purged(id) => last_purged = Some(id),
            LogRecord::Entry(e) => {
                entries.insert(e.log_id.index, e);
            }
        }
    }
    if good < bytes.len() {
        tracing::warn!(file = %path.display(), dropped_bytes = bytes.len() - good, "cutting a torn record off the end of the Raft log (a crash during an append)");
        let f = std::fs::OpenOptions::new().write(true).open(path)?;
        f.set_len(good as u64)?;
        f.sync_all()?;
    }
    Ok((entries, last_purged))
}

impl LogInner {
    /// Rewrites the log file from memory, atomically.
    fn rewrite(&mut self) -> io::Result<()> {
        let mut bytes = Vec::new();
        let mut push = |rec: &LogRecord| -> io::Result<()> {
            let payload = encode(rec).map_err(io::Error::other)?;
            record::encode(&payload, &mut bytes);
            Ok(())
        };
        if let Some(id) = self.last_purged {
            push(&LogRecord::Purged(id))?;
        }
        for e in self.entries.values() {
            push(&LogRecord::Entry(e.clone()))?;
        }
        record::write_file_atomically(&self.path, &bytes)?;
        self.file = record::open_append(&self.path)?;
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StoreResult<Vec<Entry<TypeConfig>>> {
        Ok(self.lock().entries.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> StoreResult<LogState<TypeConfig>> {
        let inner = self.lock();
        let last_purged_log_id = inner.last_purged;
        let last_log_id = inner.entries.values().next_back().map(|e| e.log_id).or(last_purged_log_id);
        Ok(LogState { last_purged_log_id, last_log_id })
    }

    async fn get_log_reader(&mut self) -> LogStore {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<RaftNodeId>) -> StoreResult<()> {
        let mut inner = self.lock();
        let bytes = encode(vote).map_err(|e| io_error(ErrorSubject::Vote, ErrorVerb::Write, e))?;
        record::write_whole(&inner.vote_path, &bytes).map_err(|e| io_error(ErrorSubject::Vote, ErrorVerb::Write, e))?;
        inner.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> StoreResult<Option<Vote<RaftNodeId>>> {
        Ok(self.lock().vote)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StoreResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut inner = self.lock();
        let mut bytes = Vec::new();
        let mut added = Vec::new();
        for e in entries {
            let payload = encode(&LogRecord::Entry(e.clone())).map_err(|err| io_error(ErrorSubject::Logs, ErrorVerb::Write, err))?;
            record::encode(&payload, &mut bytes);
            added.push(e);
        }
        let written = inner.file.write_all(&bytes).and_then(|_| inner.file.sync_data());
        if let Err(e) = &written {
            // Nothing was promised yet: report the failure both ways, and keep memory as it was.
            callback.log_io_completed(Err(io::Error::new(e.kind(), e.to_string())));
            return Err(io_error(ErrorSubject::Logs, ErrorVerb::Write, io::Error::new(e.kind(), e.to_string())));
        }
        for e in added {
            inner.entries.insert(e.log_id.index, e);
        }
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<RaftNodeId>) -> StoreResult<()> {
        let mut inner = self.lock();
        let removed = inner.entries.split_off(&log_id.index);
        if let Err(e) = inner.rewrite() {
            inner.entries.extend(removed);
            return Err(io_error(ErrorSubject::Logs, ErrorVerb::Delete, e));
        }
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<RaftNodeId>) -> StoreResult<()> {
        let mut inner = self.lock();
        let kept = inner.entries.split_off(&(log_id.index + 1));
        let removed = std::mem::replace(&mut inner.entries, kept);
        let before = inner.last_purged.replace(log_id);
        if let Err(e) = inner.rewrite() {
            inner.entries.extend(removed);
            inner.last_purged = before;
            return Err(io_error(ErrorSubject::Logs, ErrorVerb::Delete, e));
        }
        Ok(())
    }
}

/// The snapshot file's content.
#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    meta: SnapshotMeta<RaftNodeId, EmptyNode>,
    /// The serialized `ClusterState`.
    data: Vec<u8>,
}

struct SmInner {
    dir: PathBuf,
    placement: Placement,
    state: ClusterState,
    last_applied: Option<LogId<RaftNodeId>>,
    membership: StoredMembership<RaftNodeId, EmptyNode>,
    snapshot: Option<SnapshotFile>,
    /// Counts snapshots built by this process, to give each a distinct id.
    built: u64,
    published: watch::Sender<ClusterState>,
}

/// The cluster state as openraft's state machine. Every applied change is published on a
/// watch channel. Clones share one state machine (a clone is the snapshot builder).
#[derive(Clone)]
pub struct StateMachine {
    inner: Arc<Mutex<SmInner>>,
}

/// Why a stored snapshot cannot be used.
fn bad_snapshot(detail: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, detail)
}

/// Decodes a snapshot's cluster state and checks it belongs to this cluster's layout.
fn decode_state(data: &[u8], placement: &Placement) -> io::Result<ClusterState> {
    let state: ClusterState =
        postcard::from_bytes(data).map_err(|e| bad_snapshot(format!("a snapshot of the cluster state cannot be read: {e}")))?;
    state.validate().map_err(|e| bad_snapshot(e.to_string()))?;
    if state.placement() != placement {
        return Err(bad_snapshot(format!(
            "a snapshot of the cluster state is for {} nodes × {} sites with k = {}, but this node is configured for {} × {} with k = {}: start every node with the same hosts, sites and k-factor",
            state.placement().nodes,
            state.placement().sites_per_node,
            state.placement().kfactor,
            placement.nodes,
            placement.sites_per_node,
            placement.kfactor
        )));
    }
    Ok(state)
}

impl StateMachine {
    /// Opens the state machine in `dir`: the last snapshot if there is one, else the
    /// placement's initial state. Returns it and a receiver of every applied state.
    pub fn open(dir: &Path, placement: Placement) -> io::Result<(StateMachine, watch::Receiver<ClusterState>)> {
        let path = dir.join(SNAPSHOT_FILE);
        let (state, snapshot) = match record::read_whole(&path)? {
            None => (ClusterState::new(placement.clone()), None),
            Some(bytes) => {
                let file: SnapshotFile = postcard::from_bytes(&bytes)
                    .map_err(|e| bad_snapshot(format!("{} cannot be read ({e}): the node's data directory is damaged", path.display())))?;
                (decode_state(&file.data, &placement)?, Some(file))
            }
        };
        let (last_applied, membership) = match &snapshot {
            Some(f) => (f.meta.last_log_id, f.meta.last_membership.clone()),
            None => (None, StoredMembership::default()),
        };
        let (published, rx) = watch::channel(state.clone());
        let inner = SmInner { dir: dir.to_path_buf(), placement, state, last_applied, membership, snapshot, built: 0, published };
        Ok((StateMachine { inner: Arc::new(Mutex::new(inner)) }, rx))
    }

    fn lock(&self) -> MutexGuard<'_, SmInner> {
        // As in `LogStore::lock`: state changes are whole before the lock is released.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl SmInner {
    fn save_snapshot(&mut self, file: SnapshotFile) -> io::Result<()> {
        let bytes = encode(&file).map_err(io::Error::other)?;
        record::write_whole(&self.dir.join(SNAPSHOT_FILE), &bytes)?;
        self.snapshot = Some(file);
        Ok(())
    }

    fn current_snapshot(&self) -> Option<Snapshot<TypeConfig>> {
        self.snapshot.as_ref().map(|f| Snapshot { meta: f.meta.clone(), snapshot: Box::new(Cursor::new(f.data.clone())) })
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> StoreResult<Snapshot<TypeConfig>> {
        let mut inner = self.lock();
        let data = encode(&inner.state).map_err(|e| io_error(ErrorSubject::StateMachine, ErrorVerb::Read, e))?;
        inner.built += 1;
        let snapshot_id = format!("{}-{}", inner.last_applied.map_or(0, |l| l.index), inner.built);
        let meta = SnapshotMeta { last_log_id: inner.last_applied, last_membership: inner.membership.clone(), snapshot_id };
        let signature = meta.signature();
        inner
            .save_snapshot(SnapshotFile { meta, data })
            .map_err(|e| io_error(ErrorSubject::Snapshot(Some(signature)), ErrorVerb::Write, e))?;
        inner
            .current_snapshot()
            .ok_or_else(|| io_error(ErrorSubject::Snapshot(None), ErrorVerb::Read, io::Error::other("snapshot vanished")))
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(&mut self) -> StoreResult<(Option<LogId<RaftNodeId>>, StoredMembership<RaftNodeId, EmptyNode>)> {
        let inner = self.lock();
        Ok((inner.last_applied, inner.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StoreResult<Vec<Outcome>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut inner = self.lock();
        let mut outcomes = Vec::new();
        let epoch = inner.state.epoch();
        for e in entries {
            inner.last_applied = Some(e.log_id);
            let outcome = match e.payload {
                EntryPayload::Normal(command) => inner.state.apply(&command),
                EntryPayload::Blank => Outcome::Unchanged { epoch: inner.state.epoch() },
                EntryPayload::Membership(m) => {
                    inner.membership = StoredMembership::new(Some(e.log_id), m);
                    Outcome::Unchanged { epoch: inner.state.epoch() }
                }
            };
            outcomes.push(outcome);
        }
        if inner.state.epoch() != epoch {
            let state = inner.state.clone();
            inner.published.send_replace(state);
        }
        Ok(outcomes)
    }

    async fn get_snapshot_builder(&mut self) -> StateMachine {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> StoreResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta<RaftNodeId, EmptyNode>, snapshot: Box<Cursor<Vec<u8>>>) -> StoreResult<()> {
        let mut inner = self.lock();
        let subject = || ErrorSubject::Snapshot(Some(meta.signature()));
        let data = snapshot.into_inner();
        let state = decode_state(&data, &inner.placement).map_err(|e| io_error(subject(), ErrorVerb::Read, e))?;
        inner.save_snapshot(SnapshotFile { meta: meta.clone(), data }).map_err(|e| io_error(subject(), ErrorVerb::Write, e))?;
        inner.state = state.clone();
        inner.last_applied = meta.last_log_id;
        inner.membership = meta.last_membership.clone();
        inner.published.send_replace(state);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StoreResult<Option<Snapshot<TypeConfig>>> {
        Ok(self.lock().current_snapshot())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::testing::{StoreBuilder, Suite};
    use std::sync::atomic::{AtomicU64, Ordering};

    static DIRS: AtomicU64 = AtomicU64::new(0);

    /// A fresh directory, removed when dropped.
    pub(crate) struct TempDir(pub PathBuf);

    impl TempDir {
        pub(crate) fn new(tag: &str) -> TempDir {
            let n = DIRS.fetch_add(1, Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!("lockstep-cluster-{tag}-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            TempDir(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn placement() -> Placement {
        Placement::new(3, 2, 1).unwrap()
    }

    struct Builder;

    impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for Builder {
        async fn build(&self) -> StoreResult<(TempDir, LogStore, StateMachine)> {
            let dir = TempDir::new("suite");
            let log = LogStore::open(&dir.0).unwrap();
            let (sm, _) = StateMachine::open(&dir.0, placement()).unwrap();
            Ok((dir, log, sm))
        }
    }

    /// openraft's own conformance suite for log stores and state machines.
    #[test]
    fn the_store_passes_the_openraft_suite() {
        Suite::test_all(Builder).unwrap();
    }

    fn entry(term: u64, index: u64, payload: EntryPayload<TypeConfig>) -> Entry<TypeConfig> {
        Entry { log_id: LogId::new(openraft::CommittedLeaderId::new(term, 0), index), payload }
    }

    async fn append(log: &mut LogStore, entries: Vec<Entry<TypeConfig>>) {
        use openraft::storage::RaftLogStorageExt;
        log.blocking_append(entries).await.unwrap();
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn the_log_and_vote_survive_a_reopen_and_a_torn_tail_is_cut() {
        use crate::state::Command;
        let dir = TempDir::new("reopen");
        runtime().block_on(async {
            let mut log = LogStore::open(&dir.0).unwrap();
            let vote = Vote::new(3, 1);
            log.save_vote(&vote).await.unwrap();
            append(&mut log, (1..=5).map(|i| entry(1, i, EntryPayload::Normal(Command::NodeDown(i as u32 % 3)))).collect()).await;
            log.truncate(LogId::new(openraft::CommittedLeaderId::new(1, 0), 5)).await.unwrap();
            log.purge(LogId::new(openraft::CommittedLeaderId::new(1, 0), 1)).await.unwrap();
            append(&mut log, vec![entry(2, 5, EntryPayload::Blank)]).await;
            drop(log);

            let mut log = LogStore::open(&dir.0).unwrap();
            assert_eq!(log.read_vote().await.unwrap(), Some(vote));
            let state = log.get_log_state().await.unwrap();
            assert_eq!(state.last_purged_log_id.map(|l| l.index), Some(1));
            assert_eq!(state.last_log_id.map(|l| (l.leader_id.term, l.index)), Some((2, 5)));
            let indexes: Vec<u64> = log.try_get_log_entries(0..100).await.unwrap().iter().map(|e| e.log_id.index).collect();
            assert_eq!(indexes, vec![2, 3, 4, 5]);
            drop(log);

            // A crash in the middle of an append leaves half a record: it is cut off.
            let path = dir.0.join(LOG_FILE);
            let mut bytes = std::fs::read(&path).unwrap();
            let full = bytes.len();
            bytes.extend_from_slice(&[9, 0, 0, 0, 1, 2]);
            std::fs::write(&path, &bytes).unwrap();
            let mut log = LogStore::open(&dir.0).unwrap();
            assert_eq!(log.try_get_log_entries(0..100).await.unwrap().len(), 4);
            assert_eq!(std::fs::metadata(&path).unwrap().len() as usize, full);
        });
    }

    #[test]
    fn a_damaged_vote_stops_the_node_with_a_clear_error() {
        let dir = TempDir::new("vote");
        runtime().block_on(async {
            let mut log = LogStore::open(&dir.0).unwrap();
            log.save_vote(&Vote::new(1, 0)).await.unwrap();
        });
        let path = dir.0.join(VOTE_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let err = LogStore::open(&dir.0).err().unwrap();
        assert!(err.to_string().contains("damaged"), "{err}");
    }

    #[test]
    fn a_snapshot_restores_the_state_and_one_for_another_layout_is_refused() {
        use crate::state::Command;
        let dir = TempDir::new("snapshot");
        runtime().block_on(async {
            let (mut sm, rx) = StateMachine::open(&dir.0, placement()).unwrap();
            let outcomes = sm.apply(vec![entry(1, 1, EntryPayload::Normal(Command::NodeDown(2)))]).await.unwrap();
            assert_eq!(outcomes, vec![Outcome::Changed { epoch: 1 }]);
            assert_eq!(rx.borrow().epoch(), 1, "applied changes are published");
            let snap = sm.build_snapshot().await.unwrap();
            assert_eq!(snap.meta.last_log_id.map(|l| l.index), Some(1));
            drop(sm);

            let (mut sm, rx) = StateMachine::open(&dir.0, placement()).unwrap();
            assert_eq!(rx.borrow().epoch(), 1);
            assert!(!rx.borrow().is_alive(2));
            assert_eq!(sm.applied_state().await.unwrap().0.map(|l| l.index), Some(1));
            assert!(StateMachine::open(&dir.0, Placement::new(3, 4, 1).unwrap()).err().unwrap().to_string().contains("same hosts"));
        });
    }
}
