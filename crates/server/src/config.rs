//! Server settings: command-line flags, optionally from a TOML file with the same keys.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::security::{OnOff, SecurityConfig, UserEntry};

/// Calls one connection may have in flight before the server stops reading it.
pub const IN_FLIGHT_PER_CONNECTION_DEFAULT: usize = 5000;
/// Client connections open at once (logged in or logging in); more are refused with
/// VoltDB's "Server has too many connections" login answer.
pub const MAX_CONNECTIONS_DEFAULT: usize = 5000;
/// A logged-in connection that sends nothing for this long is closed (the VoltDB client
/// pings an idle connection every 40 s or so, ours every 60 s).
pub const IDLE_TIMEOUT_S_DEFAULT: u64 = 300;
/// Where the HTTP port (JSON API and `/metrics`) listens unless told otherwise (VoltDB's
/// HTTP port).
pub const HTTP_LISTEN_DEFAULT: &str = "127.0.0.1:8080";
/// A frame that has begun must be complete, and unread answers must make progress, within
/// this many seconds (VoltDB's client hang-up timeout is 30 s as well).
pub const CLIENT_TIMEOUT_S_DEFAULT: u64 = 30;
/// Where the PostgreSQL-protocol listener (`--pg`) is unless told otherwise: PostgreSQL's
/// port plus one, so it never collides with a local PostgreSQL.
pub const PG_LISTEN_DEFAULT: &str = "127.0.0.1:5433";

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub listen: String,
    /// The HTTP port's address; None when it is off (`--http off`).
    pub http: Option<String>,
    /// The PostgreSQL-protocol listener's address; None when `--pg off`.
    pub pg: Option<String>,
    pub data_dir: PathBuf,
    pub sites: Option<u32>,
    pub procedures: Option<PathBuf>,
    pub in_flight_per_connection: usize,
    pub max_connections: usize,
    /// Seconds a logged-in connection may stay silent; 0 keeps it forever.
    pub idle_timeout_s: u64,
    /// Seconds a begun frame may take to complete, and unread answers may sit still.
    pub client_timeout_s: u64,
    /// Milliseconds a query may run (0: no limit); None for the engine's default.
    pub query_timeout_ms: Option<u64>,
    /// `--memory-limit` as given (bytes with k/m/g, a percentage, or "off").
    pub memory_limit: Option<String>,
    /// "off", "async" or "sync" (default sync).
    pub command_log: Option<String>,
    pub flush_ms: Option<u64>,
    pub snapshot_interval: Option<u64>,
    pub snapshots_keep: Option<usize>,
    /// Users, `security` on/off and TLS of the client port (see `security.rs`).
    pub security: SecurityConfig,
    /// In a cluster: this node's internal address (one of `hosts`).
    pub internal: Option<String>,
    /// In a cluster: where to listen for the other nodes when that is not `internal` (the
    /// address the others reach, say through a proxy or a NAT).
    pub internal_listen: Option<String>,
    /// In a cluster: every node's internal address; empty for a single node.
    pub hosts: Vec<String>,
    /// In a cluster: extra copies of each partition (0 when not given).
    pub kfactor: Option<u32>,
    /// In a cluster: how long a silent node has before it is declared down (the cluster
    /// crate's default when not given).
    pub failure_timeout_ms: Option<u64>,
    /// Export targets (`[[export.targets]]` in the configuration file).
    pub export_targets: Vec<lockstep_engine::export::TargetConfig>,
    /// Kafka topics the server consumes (`[[import.kafka]]`).
    pub kafka_imports: Vec<KafkaImport>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:21212".into(),
            http: Some(HTTP_LISTEN_DEFAULT.into()),
            pg: Some(PG_LISTEN_DEFAULT.into()),
            data_dir: PathBuf::from("lockstep-data"),
            sites: None,
            procedures: None,
            in_flight_per_connection: IN_FLIGHT_PER_CONNECTION_DEFAULT,
            max_connections: MAX_CONNECTIONS_DEFAULT,
            idle_timeout_s: IDLE_TIMEOUT_S_DEFAULT,
            client_timeout_s: CLIENT_TIMEOUT_S_DEFAULT,
            query_timeout_ms: None,
            memory_limit: None,
            command_log: None,
            flush_ms: None,
            snapshot_interval: None,
            snapshots_keep: None,
            security: SecurityConfig::default(),
            internal: None,
            internal_listen: None,
            hosts: Vec::new(),
            kfactor: None,
            failure_timeout_ms: None,
            export_targets: Vec::new(),
            kafka_imports: Vec::new(),
        }
    }
}

/// The `[export]` table of a configuration file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportSection {
    #[serde(default)]
    pub targets: Vec<lockstep_engine::export::TargetConfig>,
}

/// The `[import]` table of a configuration file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportSection {
    #[serde(default)]
    pub kafka: Vec<KafkaImport>,
}

/// One `[[import.kafka]]`: a topic the server consumes into a table or through a procedure
/// for as long as it runs, as `lockstep load kafka --follow` does (the same settings).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KafkaImport {
    pub brokers: String,
    pub topic: String,
    pub table: Option<String>,
    pub procedure: Option<String>,
    /// `json` (the default) or `csv`.
    pub format: Option<String>,
    /// The name its positions are kept under (default `lockstep-server`).
    pub consumer: Option<String>,
    /// Calls in flight.
    pub batch: Option<usize>,
    /// The user it logs in as when security is on (and that user's password).
    pub user: Option<String>,
    pub password: Option<String>,
}

/// `hosts` in a TOML file: one comma-separated string (as the flag takes it) or a list.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum HostList {
    Joined(String),
    List(Vec<String>),
}

impl HostList {
    /// The addresses, trimmed, empty entries dropped.
    pub fn into_vec(self) -> Vec<String> {
        let all = match self {
            HostList::Joined(s) => s.split(',').map(str::to_string).collect(),
            HostList::List(v) => v,
        };
        all.into_iter().map(|h| h.trim().to_string()).filter(|h| !h.is_empty()).collect()
    }
}

/// The keys a `--config` TOML file may set.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<String>,
    /// `host:port` of the HTTP port, or `"off"`.
    pub http: Option<String>,
    /// `pg = "host:port"` or `pg = "off"`.
    pub pg: Option<String>,
    pub data: Option<PathBuf>,
    pub sites: Option<u32>,
    pub procedures: Option<PathBuf>,
    pub in_flight_per_connection: Option<usize>,
    pub max_connections: Option<usize>,
    pub idle_timeout_s: Option<u64>,
    pub client_timeout_s: Option<u64>,
    pub query_timeout_ms: Option<u64>,
    pub memory_limit: Option<String>,
    pub command_log: Option<String>,
    pub flush_ms: Option<u64>,
    pub snapshot_interval: Option<u64>,
    pub snapshots_keep: Option<usize>,
    /// Security: `security = "on"|"off"`, `tls_cert`, `tls_key` (PEM files), `[[users]]`.
    pub security: Option<OnOff>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub users: Option<Vec<UserEntry>>,
    /// Cluster: `internal = "host:port"`, `hosts = "h1:p,h2:p"` (or a list), `kfactor = 1`,
    /// `internal_listen = "host:port"`, `failure_timeout_ms = 500`.
    pub internal: Option<String>,
    pub internal_listen: Option<String>,
    pub hosts: Option<HostList>,
    pub kfactor: Option<u32>,
    pub failure_timeout_ms: Option<u64>,
    /// `[[export.targets]]`: name, type (file, http, postgresql, kafka) and the type's settings.
    pub export: Option<ExportSection>,
    /// `[[import.kafka]]`: Kafka topics to consume (brokers, topic, table or procedure, …).
    pub import: Option<ImportSection>,
}

impl FileConfig {
    pub fn load(path: &Path) -> Result<FileConfig, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read config {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("bad config {}: {e}", path.display()))
    }

    /// Applies the file's settings; the caller applies command-line flags afterwards, so they win.
    pub fn apply_to(mut self, c: &mut ServerConfig) {
        self.apply_security_to(&mut c.security);
        if let Some(v) = self.listen {
            c.listen = v;
        }
        if let Some(v) = self.http {
            c.http = (!v.trim().eq_ignore_ascii_case("off")).then_some(v);
        }
        if let Some(v) = self.pg {
            c.pg = (!v.trim().eq_ignore_ascii_case("off")).then_some(v);
        }
        if let Some(v) = self.data {
            c.data_dir = v;
        }
        if self.sites.is_some() {
            c.sites = self.sites;
        }
        if self.procedures.is_some() {
            c.procedures = self.procedures;
        }
        if let Some(v) = self.in_flight_per_connection {
            c.in_flight_per_connection = v;
        }
        if let Some(v) = self.max_connections {
            c.max_connections = v.max(1);
        }
        if let Some(v) = self.idle_timeout_s {
            c.idle_timeout_s = v;
        }
        if let Some(v) = self.client_timeout_s {
            c.client_timeout_s = v.max(1);
        }
        if self.query_timeout_ms.is_some() {
            c.query_timeout_ms = self.query_timeout_ms;
        }
        if self.memory_limit.is_some() {
            c.memory_limit = self.memory_limit;
        }
        if self.command_log.is_some() {
            c.command_log = self.command_log;
        }
        if self.flush_ms.is_some() {
            c.flush_ms = self.flush_ms;
        }
        if self.snapshot_interval.is_some() {
            c.snapshot_interval = self.snapshot_interval;
        }
        if self.snapshots_keep.is_some() {
            c.snapshots_keep = self.snapshots_keep;
        }
        if self.internal.is_some() {
            c.internal = self.internal;
        }
        if self.internal_listen.is_some() {
            c.internal_listen = self.internal_listen;
        }
        if let Some(h) = self.hosts {
            c.hosts = h.into_vec();
        }
        if self.kfactor.is_some() {
            c.kfactor = self.kfactor;
        }
        if self.failure_timeout_ms.is_some() {
            c.failure_timeout_ms = self.failure_timeout_ms;
        }
        if let Some(e) = self.export {
            c.export_targets = e.targets;
        }
        if let Some(i) = self.import {
            c.kafka_imports = i.kafka;
        }
    }

    fn apply_security_to(&mut self, c: &mut SecurityConfig) {
        if let Some(OnOff(on)) = self.security.take() {
            c.enabled = on;
        }
        if let Some(v) = self.tls_cert.take() {
            c.tls_cert = Some(v);
        }
        if let Some(v) = self.tls_key.take() {
            c.tls_key = Some(v);
        }
        if let Some(users) = self.users.take() {
            c.users = users;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_is_on_by_default_and_off_turns_it_off() {
        assert_eq!(ServerConfig::default().http.as_deref(), Some(HTTP_LISTEN_DEFAULT));
        for (text, want) in [("http = \"off\"", None), ("http = \"OFF\"", None), ("http = \"127.0.0.1:0\"", Some("127.0.0.1:0"))] {
            let mut c = ServerConfig::default();
            toml::from_str::<FileConfig>(text).unwrap().apply_to(&mut c);
            assert_eq!(c.http.as_deref(), want, "{text}");
        }
    }

    #[test]
    fn cluster_keys_take_hosts_as_one_string_or_a_list() {
        for text in [
            "internal = \"127.0.0.1:3022\"\nhosts = \"127.0.0.1:3021, 127.0.0.1:3022\"\nkfactor = 1\nfailure_timeout_ms = 700",
            "internal = \"127.0.0.1:3022\"\nhosts = [\"127.0.0.1:3021\", \"127.0.0.1:3022\"]\nkfactor = 1\nfailure_timeout_ms = 700",
        ] {
            let file: FileConfig = toml::from_str(text).unwrap();
            let mut c = ServerConfig::default();
            file.apply_to(&mut c);
            assert_eq!(c.hosts, ["127.0.0.1:3021", "127.0.0.1:3022"]);
            assert_eq!((c.internal.as_deref(), c.kfactor), (Some("127.0.0.1:3022"), Some(1)));
            assert_eq!(c.failure_timeout_ms, Some(700));
        }
    }

    #[test]
    fn the_postgresql_listener_is_on_by_default_and_off_when_told() {
        assert_eq!(ServerConfig::default().pg.as_deref(), Some(PG_LISTEN_DEFAULT));
        for (text, want) in [("pg = \"off\"", None), ("pg = \"127.0.0.1:6543\"", Some("127.0.0.1:6543"))] {
            let mut c = ServerConfig::default();
            toml::from_str::<FileConfig>(text).unwrap().apply_to(&mut c);
            assert_eq!(c.pg.as_deref(), want, "{text}");
        }
    }

    #[test]
    fn export_targets_take_their_type_and_settings() {
        use lockstep_engine::export::{TargetKind, MAX_BACKLOG_BYTES_DEFAULT};
        let text = "[[export.targets]]\nname = \"files\"\ntype = \"file\"\n\n\
                    [[export.targets]]\nname = \"hook\"\ntype = \"http\"\nurl = \"http://h:1/x\"\nmax_backlog_bytes = 1000\n\n\
                    [[export.targets]]\nname = \"pg\"\ntype = \"postgresql\"\nurl = \"host=h\"\ntable = \"t\"\n\n\
                    [[export.targets]]\nname = \"k\"\ntype = \"kafka\"\nbrokers = \"h:9092\"\ntopic = \"ev\"\nkey_column = \"id\"\nlinger_ms = 5\n";
        let mut c = ServerConfig::default();
        toml::from_str::<FileConfig>(text).unwrap().apply_to(&mut c);
        let t = &c.export_targets;
        assert_eq!(t.len(), 4);
        assert_eq!((t[0].kind.clone(), t[0].max_backlog_bytes), (TargetKind::File, MAX_BACKLOG_BYTES_DEFAULT));
        assert_eq!((t[1].kind.clone(), t[1].max_backlog_bytes), (TargetKind::Http { url: "http://h:1/x".into() }, 1000));
        assert_eq!(t[2].kind, TargetKind::Postgresql { url: "host=h".into(), table: "t".into() });
        let TargetKind::Kafka(k) = &t[3].kind else { panic!("a kafka target: {:?}", t[3].kind) };
        assert_eq!(
            (k.brokers.clone(), k.topic.as_str(), k.key_column.as_deref(), k.linger_ms),
            (vec!["h:9092".to_string()], "ev", Some("id"), 5)
        );
        for (bad, says) in [
            ("type = \"kafka\"", "needs brokers"),
            ("type = \"kafka\"\nbrokers = \"h:1\"\ntopic = \"t\"\nacks = \"1\"", "acks"),
            ("type = \"http\"", "needs url"),
            ("type = \"http\"\nurl = \"http://h/\"\nurll = \"x\"", "unknown field `urll`"),
        ] {
            let err = toml::from_str::<FileConfig>(&format!("[[export.targets]]\nname = \"k\"\n{bad}\n")).unwrap_err().to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
}
