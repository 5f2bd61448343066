//! The `kafka` export target: produces each batch to one partition of a Kafka topic with
//! rskafka (a pure-Rust client, on a small runtime of the exporter's own). Every row is one
//! message whose value is the row's export record as JSON (the shape the `http` target
//! posts) and whose key is the key column's value, if one is configured. All rows of one
//! Lockstep partition go to Kafka partition `P mod N` (N: the topic's partitions), so they
//! keep their commit order in Kafka; a batch is acknowledged when the broker has written it
//! to all in-sync replicas (acks=all, the only mode rskafka produces with).

use std::time::Duration;

use rskafka::client::error::{Error as KafkaError, ProtocolError};
use rskafka::client::partition::{Compression, PartitionClient, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder};
use rskafka::record::Record;
use rskafka::BackoffConfig;

use super::deliver::Sink;

/// Default messages per produce request.
pub const KAFKA_BATCH_ROWS_DEFAULT: usize = 500;
/// Default wait for a batch to fill before a partial one is sent.
pub const KAFKA_LINGER_MS_DEFAULT: u64 = 0;
/// Upper bound of `batch_size` (the exporter reads at most this many rows at once).
pub const KAFKA_BATCH_ROWS_MAX: usize = super::deliver::BATCH_ROWS_MAX;
/// Upper bound of `linger_ms`.
pub const KAFKA_LINGER_MS_MAX: u64 = 60_000;
/// One attempt (connect, find the partition, produce) gives up after this long; the
/// exporter then notes the target down and retries with its own back-off.
pub const KAFKA_ATTEMPT_MS: u64 = 10_000;
/// rskafka's own retries inside one attempt stop after this long.
const KAFKA_CLIENT_RETRY_MS: u64 = 5_000;
/// Time the broker may take to create a missing topic.
const KAFKA_CREATE_TOPIC_MS: i32 = 10_000;
/// Replication factor of a topic the exporter creates (a single broker needs 1; create the
/// topic yourself for more).
const KAFKA_CREATED_REPLICATION: i16 = 1;
/// Largest message rskafka accepts in an answer.
const KAFKA_MESSAGE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// The settings of one `type = "kafka"` target.
#[derive(Clone, Debug, PartialEq)]
pub struct KafkaSettings {
    /// Bootstrap brokers, `host:port` each.
    pub brokers: Vec<String>,
    pub topic: String,
    /// The column whose value is each message's key (none: messages have no key).
    pub key_column: Option<String>,
    /// Messages per produce request.
    pub batch_rows: usize,
    /// How long the exporter waits for a batch to fill before it sends a partial one.
    pub linger_ms: u64,
}

impl KafkaSettings {
    /// Checks the file's settings: brokers given, acks that keep the at-least-once promise.
    pub fn parse(
        name: &str,
        brokers: Option<String>,
        topic: Option<String>,
        key_column: Option<String>,
        acks: Option<String>,
        batch_rows: Option<usize>,
        linger_ms: Option<u64>,
    ) -> Result<KafkaSettings, String> {
        let brokers: Vec<String> =
            brokers.unwrap_or_default().split(',').map(str::trim).filter(|b| !b.is_empty()).map(String::from).collect();
        if brokers.is_empty() {
            return Err(format!("export target {name:?} of type \"kafka\" needs brokers = \"host:port[,host:port…]\""));
        }
        if let Some(b) = brokers.iter().find(|b| !b.contains(':')) {
            return Err(format!("export target {name:?}: broker {b:?} needs a port (host:port)"));
        }
        let topic =
            topic.filter(|t| !t.is_empty()).ok_or_else(|| format!("export target {name:?} of type \"kafka\" needs topic = \"…\""))?;
        match acks.as_deref().map(str::to_ascii_lowercase).as_deref() {
            None | Some("all") | Some("-1") => {}
            Some(other) => {
                return Err(format!(
                    "export target {name:?}: acks = {other:?} is not supported; the Kafka target waits for all in-sync replicas (acks = \"all\"), since a row is only acknowledged once Kafka has it"
                ))
            }
        }
        let batch_rows = batch_rows.unwrap_or(KAFKA_BATCH_ROWS_DEFAULT);
        if batch_rows == 0 || batch_rows > KAFKA_BATCH_ROWS_MAX {
            return Err(format!("export target {name:?}: batch_size must be 1..={KAFKA_BATCH_ROWS_MAX}, not {batch_rows}"));
        }
        let linger_ms = linger_ms.unwrap_or(KAFKA_LINGER_MS_DEFAULT);
        if linger_ms > KAFKA_LINGER_MS_MAX {
            return Err(format!("export target {name:?}: linger_ms must be at most {KAFKA_LINGER_MS_MAX}, not {linger_ms}"));
        }
        Ok(KafkaSettings { brokers, topic, key_column: key_column.filter(|k| !k.is_empty()), batch_rows, linger_ms })
    }
}

/// Held while an exporter makes a missing topic (the exporters of a target would race).
static CREATING_TOPIC: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub struct KafkaSink {
    settings: KafkaSettings,
    /// This exporter's Lockstep partition, and how many there are (partitions of a topic
    /// the exporter creates).
    partition: u32,
    partitions: u32,
    runtime: Option<tokio::runtime::Runtime>,
    /// Connected to the leader of this lane's Kafka partition; dropped after an error.
    producer: Option<(Client, PartitionClient)>,
}

impl KafkaSink {
    pub fn new(settings: &KafkaSettings, partition: u32, partitions: u32) -> Self {
        KafkaSink { settings: settings.clone(), partition, partitions, runtime: None, producer: None }
    }
}

/// The Kafka message of one export record: key from the key column, value the record.
pub fn message(record: &serde_json::Value, key_column: Option<&str>) -> Result<Record, String> {
    let value = serde_json::to_vec(record).map_err(|e| e.to_string())?;
    let key = key_column.and_then(|k| {
        let row = record.get("row")?.as_object()?;
        let v = row.iter().find(|(name, _)| name.eq_ignore_ascii_case(k)).map(|(_, v)| v)?;
        match v {
            serde_json::Value::Null => None,
            serde_json::Value::String(s) => Some(s.as_bytes().to_vec()),
            other => Some(other.to_string().into_bytes()),
        }
    });
    // rskafka's chrono has no clock: the message's time is taken from the system's.
    let millis = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let timestamp = rskafka::chrono::DateTime::from_timestamp_millis(millis).unwrap_or_default();
    Ok(Record { key, value: Some(value), headers: Default::default(), timestamp })
}

/// Connects, creates the topic if it is missing, and opens this lane's Kafka partition.
async fn connect(settings: &KafkaSettings, partition: u32, partitions: u32) -> Result<(Client, PartitionClient), String> {
    let backoff = BackoffConfig {
        init_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(1),
        base: 2.0,
        deadline: Some(Duration::from_millis(KAFKA_CLIENT_RETRY_MS)),
    };
    let brokers = settings.brokers.join(",");
    let client = ClientBuilder::new(settings.brokers.clone())
        .client_id("lockstep-export")
        .max_message_size(KAFKA_MESSAGE_BYTES_MAX)
        .backoff_config(backoff)
        .build()
        .await
        .map_err(|e| format!("cannot connect to Kafka at {brokers}: {e}"))?;
    let count = match topic_partitions(&client, &settings.topic).await? {
        Some(n) => n,
        None => {
            // One exporter at a time makes a missing topic; the others find it made.
            let _one = CREATING_TOPIC.lock().await;
            if let Some(n) = topic_partitions(&client, &settings.topic).await? {
                return open_partition(client, settings, partition, n).await;
            }
            let wanted = i32::try_from(partitions.max(1)).unwrap_or(i32::MAX);
            let controller = client.controller_client().map_err(|e| e.to_string())?;
            match controller.create_topic(&settings.topic, wanted, KAFKA_CREATED_REPLICATION, KAFKA_CREATE_TOPIC_MS).await {
                // Another server, or someone by hand, may have made it meanwhile.
                Ok(()) | Err(KafkaError::ServerError { protocol_error: ProtocolError::TopicAlreadyExists, .. }) => {}
                Err(e) => return Err(format!("Kafka topic {} does not exist and cannot be created: {e}", settings.topic)),
            }
            topic_partitions(&client, &settings.topic)
                .await?
                .ok_or_else(|| format!("Kafka topic {} was created but is not listed yet", settings.topic))?
        }
    };
    open_partition(client, settings, partition, count).await
}

/// Opens Kafka partition `partition mod count` of the topic.
async fn open_partition(client: Client, settings: &KafkaSettings, partition: u32, count: u32) -> Result<(Client, PartitionClient), String> {
    let target = i32::try_from(partition % count).unwrap_or(0);
    let p = client
        .partition_client(settings.topic.clone(), target, UnknownTopicHandling::Retry)
        .await
        .map_err(|e| format!("cannot open partition {target} of Kafka topic {}: {e}", settings.topic))?;
    Ok((client, p))
}

/// The number of partitions of `topic`, or None when the topic does not exist.
async fn topic_partitions(client: &Client, topic: &str) -> Result<Option<u32>, String> {
    let topics = client.list_topics().await.map_err(|e| format!("cannot list Kafka's topics: {e}"))?;
    Ok(topics.into_iter().find(|t| t.name == topic).map(|t| t.partitions.len() as u32).filter(|n| *n > 0))
}

impl Sink for KafkaSink {
    fn send(&mut self, rows: &[serde_json::Value]) -> Result<(), String> {
        let records: Vec<Record> = rows.iter().map(|r| message(r, self.settings.key_column.as_deref())).collect::<Result<_, _>>()?;
        if self.runtime.is_none() {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
            self.runtime = Some(rt);
        }
        let Some(rt) = self.runtime.as_ref() else { return Err("no runtime".into()) };
        let (settings, producer, partition, partitions) = (&self.settings, &mut self.producer, self.partition, self.partitions);
        let attempt = async {
            if producer.is_none() {
                *producer = Some(connect(settings, partition, partitions).await?);
            }
            let Some((_, p)) = producer.as_ref() else { return Err("no Kafka connection".to_string()) };
            // In order, one request after another: a later request is only sent once the
            // earlier one is acknowledged, so a failure never leaves a gap before a success.
            let mut left = records;
            while !left.is_empty() {
                let rest = left.split_off(left.len().min(settings.batch_rows));
                p.produce(left, Compression::NoCompression).await.map_err(|e| format!("Kafka refused the batch: {e}"))?;
                left = rest;
            }
            Ok(())
        };
        let result = rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(KAFKA_ATTEMPT_MS), attempt)
                .await
                .unwrap_or_else(|_| Err(format!("Kafka did not acknowledge within {KAFKA_ATTEMPT_MS} ms")))
        });
        if result.is_err() {
            // Start afresh: the leader may have moved or the broker restarted.
            self.producer = None;
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_the_record_and_the_key_column() {
        let r = serde_json::json!({"seq": 3, "partition": 1, "row": {"ID": 7, "NAME": "x"}});
        let m = message(&r, Some("name")).unwrap();
        assert_eq!(m.key.as_deref(), Some(&b"x"[..]));
        let back: serde_json::Value = serde_json::from_slice(m.value.as_deref().unwrap()).unwrap();
        assert_eq!(back, r);
        assert_eq!(message(&r, Some("ID")).unwrap().key.as_deref(), Some(&b"7"[..]));
        assert_eq!(message(&r, None).unwrap().key, None);
    }

    #[test]
    fn settings_are_checked() {
        let s = |brokers: &str, acks: Option<&str>, batch: Option<usize>| {
            KafkaSettings::parse("k", Some(brokers.into()), Some("t".into()), None, acks.map(String::from), batch, None)
        };
        let ok = s("a:1, b:2", None, None).unwrap();
        assert_eq!(ok.brokers, ["a:1", "b:2"]);
        assert_eq!(ok.batch_rows, KAFKA_BATCH_ROWS_DEFAULT);
        assert!(s("a:1", Some("ALL"), None).is_ok());
        assert!(s("a:1", Some("0"), None).unwrap_err().contains("acks"));
        assert!(s("a", None, None).unwrap_err().contains("port"));
        assert!(s("", None, None).unwrap_err().contains("brokers"));
        assert!(s("a:1", None, Some(0)).unwrap_err().contains("batch_size"));
        assert!(KafkaSettings::parse("k", Some("a:1".into()), None, None, None, None, None).unwrap_err().contains("topic"));
    }
}
