//! Partition-aware routing (voltdb-wire.md §2.3–2.4): the token ring from `@Statistics TOPO`,
//! partition leaders, and each procedure's partitioning from `@SystemCatalog PROCEDURES`.

use foldhash::HashMap;

use lockstep_core::hash::{hash_value, MP_PARTITION_ID};
use lockstep_core::{DataType, ResultTable, Value};

/// Most tokens we accept in a HASHCONFIG (VoltDB uses 16384).
pub const RING_TOKENS_MAX: usize = 1 << 20;

/// A token ring read from HASHCONFIG: partition(hash) = owner of the greatest token ≤ hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRing {
    /// (token, partition), sorted by token, the first token being −2^31.
    tokens: Vec<(i32, u32)>,
}

impl TokenRing {
    /// Parses the raw config: int32 count, then (int32 token, int32 partition) pairs.
    pub fn from_config(bytes: &[u8]) -> Option<TokenRing> {
        let count = i32::from_be_bytes(bytes.get(..4)?.try_into().ok()?);
        if count < 1 || count as usize > RING_TOKENS_MAX || bytes.len() != 4 + count as usize * 8 {
            return None;
        }
        let mut tokens = Vec::with_capacity(count as usize);
        for pair in bytes[4..].chunks_exact(8) {
            let token = i32::from_be_bytes(pair[..4].try_into().ok()?);
            let partition = i32::from_be_bytes(pair[4..].try_into().ok()?);
            tokens.push((token, u32::try_from(partition).ok()?));
        }
        // The client's lookup needs sorted tokens starting at the lowest possible hash.
        if tokens[0].0 != i32::MIN || tokens.windows(2).any(|w| w[0].0 > w[1].0) {
            return None;
        }
        // A run of tokens owned by one partition routes as its first token alone. Rings
        // give each partition contiguous runs, so 16,384 tokens become a few: a lookup
        // that searched 128 KB for every call (a tenth of the load generator's CPU at a
        // fixed rate) searches a few cache lines.
        tokens.dedup_by(|later, earlier| later.1 == earlier.1);
        Some(TokenRing { tokens })
    }

    pub fn partition_for_hash(&self, hash: i32) -> u32 {
        // tokens[0] is i32::MIN, so at least one token is ≤ any hash.
        let i = self.tokens.partition_point(|(t, _)| *t <= hash);
        self.tokens[i.saturating_sub(1)].1
    }

    /// The partition of a key already converted to the partition column's type.
    pub fn partition_for(&self, key: &Value) -> u32 {
        match hash_value(key) {
            Some(h) => self.partition_for_hash(h),
            None => 0,
        }
    }
}

/// How a procedure is partitioned, from its REMARKS JSON.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcInfo {
    pub read_only: bool,
    pub single_partition: bool,
    /// Index of the partitioning parameter; −1 for a directed procedure.
    pub partition_parameter: i32,
    /// VoltType code of the partition column.
    pub partition_parameter_type: i8,
}

impl ProcInfo {
    /// Parses `{"readOnly":…,"singlePartition":…,"partitionParameter":…,"partitionParameterType":…}`.
    pub fn from_remarks(json: &str) -> Option<ProcInfo> {
        let v: serde_json::Value = serde_json::from_str(json).ok()?;
        let single_partition = v.get("singlePartition")?.as_bool()?;
        let int = |k: &str| v.get(k).and_then(|x| x.as_i64());
        Some(ProcInfo {
            read_only: v.get("readOnly").and_then(|x| x.as_bool()).unwrap_or(false),
            single_partition,
            partition_parameter: if single_partition { int("partitionParameter")? as i32 } else { -1 },
            partition_parameter_type: if single_partition { int("partitionParameterType")? as i8 } else { -1 },
        })
    }
}

/// Everything routing knows; each part may be missing when its system call failed.
#[derive(Clone, Debug, Default)]
pub struct Routing {
    pub ring: Option<TokenRing>,
    /// Partition id → host id of its leader (16383 is the multi-partition initiator).
    pub leaders: HashMap<u32, i32>,
    pub procedures: HashMap<String, ProcInfo>,
}

/// Where a call should go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Partition(u32),
    MultiPartition,
    Anywhere,
}

impl Routing {
    /// Reads the two tables of `@Statistics("TOPO", 0)`; false if they are not as expected.
    pub fn apply_topology(&mut self, tables: &[ResultTable]) -> bool {
        let (Some(topo), Some(hash)) = (tables.first(), tables.get(1)) else {
            return false;
        };
        let (Some(pc), Some(lc)) = (topo.column_index("Partition"), topo.column_index("Leader")) else {
            return false;
        };
        let Some(hc) = hash.column_index("HASHCONFIG") else {
            return false;
        };
        let ring = match hash.rows.first().and_then(|r| r.get(hc)) {
            Some(Value::Bytes(b)) => TokenRing::from_config(b),
            _ => None,
        };
        let Some(ring) = ring else { return false };
        let mut leaders = HashMap::default();
        for row in &topo.rows {
            let (Some(Value::Int(p)), Some(Value::Str(leader))) = (row.get(pc), row.get(lc)) else {
                continue;
            };
            // "hostId:siteId"; the text before ':' is the host.
            let host = leader.split(':').next().and_then(|h| h.trim().parse::<i32>().ok());
            if let (Ok(p), Some(host)) = (u32::try_from(*p), host) {
                leaders.insert(p, host);
            }
        }
        self.ring = Some(ring);
        self.leaders = leaders;
        true
    }

    /// Reads `@SystemCatalog("PROCEDURES")`: name in column 2, REMARKS JSON in column 6.
    pub fn apply_procedures(&mut self, table: &ResultTable) {
        let mut procs = HashMap::default();
        for row in &table.rows {
            if let (Some(Value::Str(name)), Some(Value::Str(remarks))) = (row.get(2), row.get(6)) {
                if let Some(info) = ProcInfo::from_remarks(remarks) {
                    procs.insert(name.to_string(), info);
                }
            }
        }
        self.procedures = procs;
    }

    /// Whether the routing knows procedure `proc` (it may have been made since it was read).
    pub fn knows(&self, proc: &str) -> bool {
        self.procedures.contains_key(proc)
    }

    /// Where a call of `proc` with `params` goes (§2.4 "Routing decision per call").
    pub fn target(&self, proc: &str, params: &[Value]) -> Target {
        let (Some(ring), Some(info)) = (&self.ring, self.procedures.get(proc)) else {
            return Target::Anywhere;
        };
        if !info.single_partition || info.partition_parameter < 0 {
            return Target::MultiPartition;
        }
        let Some(arg) = params.get(info.partition_parameter as usize) else {
            return Target::MultiPartition;
        };
        let Some(ty) = DataType::from_wire_code(info.partition_parameter_type) else {
            return Target::Anywhere;
        };
        match arg {
            Value::Null => Target::Partition(0),
            // The server hashes the value converted to the column type, so do the same.
            _ => match arg.coerce_to(ty) {
                Ok(key) => Target::Partition(ring.partition_for(&key)),
                Err(_) => Target::Anywhere,
            },
        }
    }

    /// The host leading `target`'s partition, if known.
    pub fn host_for(&self, target: Target) -> Option<i32> {
        match target {
            Target::Partition(p) => self.leaders.get(&p).copied(),
            Target::MultiPartition => self.leaders.get(&(MP_PARTITION_ID as u32)).copied(),
            Target::Anywhere => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_core::HashRing;

    #[test]
    fn token_ring_agrees_with_the_core_ring() {
        let core = HashRing::new(5);
        let ring = TokenRing::from_config(&core.config_bytes()).unwrap();
        for k in [-1000i64, -1, 0, 1, 42, 1_000_000, i64::MAX] {
            assert_eq!(ring.partition_for(&Value::Int(k)), core.partition_for(&Value::Int(k)), "key {k}");
        }
        for s in ["", "hello", "VoltDB"] {
            assert_eq!(ring.partition_for(&Value::from(s)), core.partition_for(&Value::from(s)));
        }
    }

    #[test]
    fn runs_of_tokens_of_one_partition_route_as_their_first() {
        let core = HashRing::new(3);
        let ring = TokenRing::from_config(&core.config_bytes()).unwrap();
        assert_eq!(ring.tokens.len(), 3, "one token for each partition's run");
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = Value::Int(x as i64);
            assert_eq!(ring.partition_for(&key), core.partition_for(&key), "{key:?}");
        }
        // Partitions that own several runs keep one token for each run.
        let pairs: [(i32, u32); 5] = [(i32::MIN, 0), (-100, 0), (0, 1), (50, 1), (100, 0)];
        let mut config = (pairs.len() as i32).to_be_bytes().to_vec();
        for (token, partition) in pairs {
            config.extend(token.to_be_bytes());
            config.extend((partition as i32).to_be_bytes());
        }
        let ring = TokenRing::from_config(&config).unwrap();
        assert_eq!(ring.tokens, vec![(i32::MIN, 0), (0, 1), (100, 0)]);
        for (hash, partition) in [(i32::MIN, 0), (-50, 0), (-1, 0), (0, 1), (75, 1), (99, 1), (100, 0), (i32::MAX, 0)] {
            assert_eq!(ring.partition_for_hash(hash), partition, "hash {hash}");
        }
    }

    #[test]
    fn bad_configs_are_refused() {
        assert_eq!(TokenRing::from_config(&[]), None);
        // One token that is not −2^31.
        assert_eq!(TokenRing::from_config(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]), None);
        // Count larger than the bytes.
        assert_eq!(TokenRing::from_config(&[0, 0, 0, 2, 0x80, 0, 0, 0, 0, 0, 0, 0]), None);
    }

    #[test]
    fn remarks_json_is_parsed() {
        let sp = ProcInfo::from_remarks(r#"{"readOnly":true,"singlePartition":true,"partitionParameter":1,"partitionParameterType":6}"#)
            .unwrap();
        assert_eq!(sp, ProcInfo { read_only: true, single_partition: true, partition_parameter: 1, partition_parameter_type: 6 });
        let mp = ProcInfo::from_remarks(r#"{"readOnly":false,"singlePartition":false}"#).unwrap();
        assert!(!mp.single_partition);
        assert_eq!(ProcInfo::from_remarks("not json"), None);
        assert_eq!(ProcInfo::from_remarks(r#"{"singlePartition":true}"#), None);
    }
}
