//! Peers for side-by-side runs: the same workloads, through the same `Conn`, against
//! PostgreSQL (PL/pgSQL functions), Tarantool (Lua functions over IPROTO) and Redis (Redis 7
//! Functions). A procedure `P` is the peer's function `ls_p`; its answer is reshaped into the
//! tables Lockstep's `P` returns, so workloads and their checks run unchanged.

pub mod adhoc;
pub mod postgres;
pub mod redis_peer;
pub mod shape;
pub mod sources;
pub mod tarantool;

use lockstep_core::{Error, Value};

use crate::apps::App;
use crate::conn::Answer;
pub use sources::PeerKind;

/// Default PostgreSQL connections: a few per core, as pgbench peaks on this box (-c 8 on 2 cores).
pub const PG_POOL_PER_CORE: usize = 4;
/// Default Tarantool and Redis connections: they execute on one thread; two let the client
/// encode on one connection while the other waits.
pub const SINGLE_THREAD_POOL: usize = 2;

/// Where `lockstep bench` sends its load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// host:port of a Lockstep server.
    Lockstep(String),
    Postgres(String),
    /// (host:port, user, password)
    Tarantool(String, String, String),
    Redis(String),
}

/// Parses `lockstep://HOST:PORT`, `postgres://…`, `tarantool://[USER[:PASSWORD]@]HOST:PORT`
/// or `redis://…`.
pub fn parse_target(s: &str) -> Result<Target, Error> {
    let (scheme, rest) = s.split_once("://").ok_or_else(|| {
        Error::graceful(format!("--target {s}: use lockstep://, postgres://, tarantool:// or redis:// followed by the address"))
    })?;
    if rest.is_empty() {
        return Err(Error::graceful(format!("--target {s}: no address")));
    }
    match scheme {
        "lockstep" => Ok(Target::Lockstep(rest.to_string())),
        "postgres" | "postgresql" => Ok(Target::Postgres(s.to_string())),
        "redis" => Ok(Target::Redis(s.to_string())),
        "tarantool" => {
            let (auth, addr) = rest.rsplit_once('@').unwrap_or(("guest", rest));
            let (user, password) = auth.split_once(':').unwrap_or((auth, ""));
            Ok(Target::Tarantool(addr.to_string(), user.to_string(), password.to_string()))
        }
        other => Err(Error::graceful(format!("--target {s}: unknown system {other}: use lockstep, postgres, tarantool or redis"))),
    }
}

/// A connection (pool) to one peer.
pub enum Peer {
    Postgres(postgres::PgPeer),
    Tarantool(tarantool::TarantoolPeer),
    Redis(redis_peer::RedisPeer),
}

/// The peer function that implements procedure `proc`.
pub fn function_name(proc: &str) -> String {
    format!("ls_{}", proc.to_ascii_lowercase())
}

impl Peer {
    /// Connects to a peer target (`None` for a Lockstep target); `pool` overrides the
    /// default number of connections.
    pub async fn connect(target: &Target, pool: Option<usize>) -> Result<Option<Peer>, Error> {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        Ok(Some(match target {
            Target::Lockstep(_) => return Ok(None),
            Target::Postgres(url) => Peer::Postgres(postgres::PgPeer::connect(url, pool.unwrap_or(PG_POOL_PER_CORE * cores)).await?),
            Target::Tarantool(addr, user, password) => {
                Peer::Tarantool(tarantool::TarantoolPeer::connect(addr, user, password, pool.unwrap_or(SINGLE_THREAD_POOL)).await?)
            }
            Target::Redis(url) => Peer::Redis(redis_peer::RedisPeer::connect(url, pool.unwrap_or(SINGLE_THREAD_POOL)).await?),
        }))
    }

    pub fn kind(&self) -> PeerKind {
        match self {
            Peer::Postgres(_) => PeerKind::Postgres,
            Peer::Tarantool(_) => PeerKind::Tarantool,
            Peer::Redis(_) => PeerKind::Redis,
        }
    }

    /// Loads the peer's version of `app` unless `probe_table` is there; errors when the peer
    /// has no version of it. Returns whether it loaded.
    pub async fn ensure_loaded(&self, app: &App, probe_table: &str) -> Result<bool, Error> {
        let source = sources::source(app.name, self.kind())?.ok_or_else(|| {
            Error::graceful(format!("{} has no version of {}: it runs voter and ycsb only", self.kind().name(), app.name))
        })?;
        match self {
            Peer::Postgres(pg) => {
                let probe = pg.adhoc(&format!("SELECT to_regclass('{}') IS NOT NULL", probe_table.to_ascii_lowercase())).await?;
                let present = matches!(probe, Ok(t) if t.rows.first().and_then(|r| r.first()) == Some(&Value::Str("t".into())));
                if present {
                    return Ok(false);
                }
                pg.batch(&source).await.map_err(|e| e.context(format!("loading app {}", app.name)))?;
                Ok(true)
            }
            // Functions live in the server's memory: (re)load them on every connect; spaces
            // and keys are created only when absent.
            Peer::Tarantool(t) => {
                t.eval(sources::TARANTOOL_PRELUDE).await?;
                t.eval(&source).await?;
                Ok(true)
            }
            Peer::Redis(r) => {
                r.load_library(&source).await?;
                Ok(true)
            }
        }
    }

    /// Calls procedure `proc` (or runs an `@AdHoc` statement) on the peer.
    pub async fn call(&self, proc: &str, params: Vec<Value>) -> Result<Answer, Error> {
        if proc == "@AdHoc" {
            return self.adhoc(params).await;
        }
        let f = function_name(proc);
        let raw = match self {
            Peer::Postgres(p) => p.call(&f, &params).await?,
            Peer::Tarantool(t) => t.call(&f, &params).await?,
            Peer::Redis(r) => r.call(&f, &params).await?,
        };
        Ok(shape::answer(proc, raw))
    }

    /// A peer is one partition: the procedure runs once, with partition key 0.
    pub async fn call_all_partitions(&self, proc: &str, params: Vec<Value>) -> Result<Vec<Answer>, Error> {
        let mut p = Vec::with_capacity(params.len() + 1);
        p.push(Value::Int(0));
        p.extend(params);
        Ok(vec![self.call(proc, p).await?])
    }

    async fn adhoc(&self, params: Vec<Value>) -> Result<Answer, Error> {
        let Some(Value::Str(sql)) = params.first() else {
            return Err(Error::graceful("@AdHoc takes one SQL string"));
        };
        if let Peer::Postgres(pg) = self {
            let sql = adhoc::for_postgres(sql)?;
            return Ok(match pg.adhoc(&sql).await? {
                Ok(t) => Answer::new(crate::conn::STATUS_SUCCESS, None, shape::APP_STATUS_UNSET, vec![t]),
                Err(m) => shape::answer("@AdHoc", Err(m)),
            });
        }
        let query = match adhoc::parse(sql) {
            Ok(q) => q,
            Err(e) => return Ok(shape::answer("@AdHoc", Err(e.message))),
        };
        let (f, args) = match (self, &query) {
            (Peer::Redis(_), adhoc::Query::Count(t)) if t == "votes" => ("ls_voter_count", vec![]),
            (Peer::Redis(_), adhoc::Query::Count(t)) if t == "store" => ("ls_ycsb_count", vec![]),
            (Peer::Redis(_), adhoc::Query::DeleteAll(t)) if t == "store" => ("ls_ycsb_clear", vec![]),
            (Peer::Redis(_), adhoc::Query::VotesOverLimit(_)) => query.function(),
            (Peer::Redis(_), _) => return Ok(shape::answer("@AdHoc", Err(format!("redis does not answer: {sql}")))),
            _ => query.function(),
        };
        let raw = match self {
            Peer::Tarantool(t) => t.call(f, &args).await?,
            Peer::Redis(r) => r.call(f, &args).await?,
            Peer::Postgres(_) => unreachable!("PostgreSQL answered above"),
        };
        Ok(shape::answer("@AdHoc", raw))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse() {
        assert_eq!(parse_target("lockstep://127.0.0.1:21212").unwrap(), Target::Lockstep("127.0.0.1:21212".into()));
        assert_eq!(
            parse_target("tarantool://bench:pw@127.0.0.1:13301").unwrap(),
            Target::Tarantool("127.0.0.1:13301".into(), "bench".into(), "pw".into())
        );
        assert_eq!(parse_target("redis://127.0.0.1:16379").unwrap(), Target::Redis("redis://127.0.0.1:16379".into()));
        assert!(parse_target("mysql://x").is_err());
        assert!(parse_target("127.0.0.1:21212").is_err());
        assert_eq!(function_name("GetSubscriberData"), "ls_getsubscriberdata");
    }
}
