//! The records of the command log and their byte encoding (the body inside a frame).
//!
//! A body is a kind byte then the fields, big-endian; parameters use the VoltDB wire
//! encoding of `lockstep_wire::encode_params`, so anything a client can send can be logged.

use std::sync::Arc;

use lockstep_core::{Error, Result, Value};
use lockstep_wire::codec::{put_i64, put_i8, put_string, put_varbinary, Reader};
use lockstep_wire::{decode_params, encode_params};

const KIND_SP: i8 = 1;
const KIND_ADHOC_SP: i8 = 2;
const KIND_MP_MARKER: i8 = 3;
const KIND_MP: i8 = 4;
const KIND_SNAPSHOT_TAKEN: i8 = 5;
const KIND_MP_SHARE: i8 = 6;
const KIND_MP_DECIDE: i8 = 7;

/// One command log record.
#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    /// A single-partition procedure call, logged by its site before it runs.
    Sp {
        txn_id: i64,
        partition: u32,
        /// Shared with the call that was routed: logging a call copies no name.
        procedure: Arc<str>,
        params: Vec<Value>,
    },
    /// A single-partition ad-hoc statement.
    AdHocSp { txn_id: i64, partition: u32, sql: String, params: Vec<Value> },
    /// Site `partition` entered multi-partition transaction `mp_txn_id` here in its order.
    MpMarker { partition: u32, mp_txn_id: i64 },
    /// A multi-partition transaction: a procedure, "@AdHoc" (SQL as parameter 0) or "@DDL".
    Mp { txn_id: i64, procedure: String, params: Vec<Value> },
    /// A snapshot of the state at this point of the log was taken.
    SnapshotTaken { txn_id: i64, snapshot_id: u64 },
    /// In a cluster: partition `partition`'s share of multi-partition transaction `txn_id`,
    /// the fragments that ran on it (`specs`: their encoding, as replicated), at its place in
    /// the partition's order, prepared: it takes effect only with an `MpDecide` that commits.
    /// `participants`: every partition with a share of the transaction.
    MpShare { txn_id: i64, partition: u32, participants: Vec<u32>, specs: Vec<u8> },
    /// The outcome of the share of `txn_id` prepared just before on `partition`.
    MpDecide { txn_id: i64, partition: u32, commit: bool },
}

/// The most partitions a logged share may name (far above any cluster's partition count).
const PARTICIPANTS_MAX: u32 = 1 << 16;

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

impl Record {
    /// The one partition whose data the record changes; None when it may change any.
    pub fn partition(&self) -> Option<u32> {
        match self {
            Record::Sp { partition, .. }
            | Record::AdHocSp { partition, .. }
            | Record::MpShare { partition, .. }
            | Record::MpDecide { partition, .. } => Some(*partition),
            Record::MpMarker { .. } | Record::Mp { .. } | Record::SnapshotTaken { .. } => None,
        }
    }

    /// The record's body bytes.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(64);
        self.encode_into(&mut out)?;
        Ok(out)
    }

    /// Appends the record's body bytes; fails only for parameters that cannot be encoded.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<()> {
        match self {
            Record::Sp { txn_id, partition, procedure, params } => {
                put_i8(out, KIND_SP);
                put_i64(out, *txn_id);
                put_u32(out, *partition);
                put_string(out, procedure);
                encode_params(params, out)?;
            }
            Record::AdHocSp { txn_id, partition, sql, params } => {
                put_i8(out, KIND_ADHOC_SP);
                put_i64(out, *txn_id);
                put_u32(out, *partition);
                put_string(out, sql);
                encode_params(params, out)?;
            }
            Record::MpMarker { partition, mp_txn_id } => {
                put_i8(out, KIND_MP_MARKER);
                put_u32(out, *partition);
                put_i64(out, *mp_txn_id);
            }
            Record::Mp { txn_id, procedure, params } => {
                put_i8(out, KIND_MP);
                put_i64(out, *txn_id);
                put_string(out, procedure);
                encode_params(params, out)?;
            }
            Record::SnapshotTaken { txn_id, snapshot_id } => {
                put_i8(out, KIND_SNAPSHOT_TAKEN);
                put_i64(out, *txn_id);
                put_i64(out, *snapshot_id as i64);
            }
            Record::MpShare { txn_id, partition, participants, specs } => {
                put_i8(out, KIND_MP_SHARE);
                put_i64(out, *txn_id);
                put_u32(out, *partition);
                put_u32(out, participants.len() as u32);
                for p in participants {
                    put_u32(out, *p);
                }
                put_varbinary(out, specs);
            }
            Record::MpDecide { txn_id, partition, commit } => {
                put_i8(out, KIND_MP_DECIDE);
                put_i64(out, *txn_id);
                put_u32(out, *partition);
                put_i8(out, i8::from(*commit));
            }
        }
        Ok(())
    }

    /// Whether an encoded body is a `SnapshotTaken` record (judged by its kind alone).
    pub fn is_snapshot_taken(body: &[u8]) -> bool {
        body.first() == Some(&(KIND_SNAPSHOT_TAKEN as u8))
    }

    /// Decodes a body; every byte must be used.
    pub fn decode(body: &[u8]) -> Result<Record> {
        let mut r = Reader::new(body);
        let kind = r.i8("record kind")?;
        let record = match kind {
            KIND_SP => Record::Sp {
                txn_id: r.i64("transaction id")?,
                partition: r.i32("partition")? as u32,
                procedure: r.required_str("procedure name")?.into(),
                params: decode_params(&mut r)?,
            },
            KIND_ADHOC_SP => Record::AdHocSp {
                txn_id: r.i64("transaction id")?,
                partition: r.i32("partition")? as u32,
                sql: r.required_string("SQL text")?,
                params: decode_params(&mut r)?,
            },
            KIND_MP_MARKER => Record::MpMarker { partition: r.i32("partition")? as u32, mp_txn_id: r.i64("transaction id")? },
            KIND_MP => Record::Mp {
                txn_id: r.i64("transaction id")?,
                procedure: r.required_string("procedure name")?,
                params: decode_params(&mut r)?,
            },
            KIND_SNAPSHOT_TAKEN => Record::SnapshotTaken { txn_id: r.i64("transaction id")?, snapshot_id: r.i64("snapshot id")? as u64 },
            KIND_MP_SHARE => {
                let txn_id = r.i64("transaction id")?;
                let partition = r.i32("partition")? as u32;
                let count = r.i32("participant count")? as u32;
                if count > PARTICIPANTS_MAX {
                    return Err(Error::unexpected(format!(
                        "a logged share names {count} participants, over the limit of {PARTICIPANTS_MAX}"
                    )));
                }
                let participants = (0..count).map(|_| r.i32("participant").map(|p| p as u32)).collect::<Result<Vec<u32>>>()?;
                let specs = r.varbinary("fragments")?.ok_or_else(|| Error::unexpected("a logged share has no fragments"))?.to_vec();
                Record::MpShare { txn_id, partition, participants, specs }
            }
            KIND_MP_DECIDE => {
                Record::MpDecide { txn_id: r.i64("transaction id")?, partition: r.i32("partition")? as u32, commit: r.i8("outcome")? != 0 }
            }
            other => return Err(Error::unexpected(format!("command log record has unknown kind {other} (written by a newer version?)"))),
        };
        r.expect_end("command log record")?;
        Ok(record)
    }

    /// The transaction id the record belongs to.
    pub fn txn_id(&self) -> i64 {
        match self {
            Record::Sp { txn_id, .. }
            | Record::AdHocSp { txn_id, .. }
            | Record::Mp { txn_id, .. }
            | Record::MpShare { txn_id, .. }
            | Record::MpDecide { txn_id, .. }
            | Record::SnapshotTaken { txn_id, .. } => *txn_id,
            Record::MpMarker { mp_txn_id, .. } => *mp_txn_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Values that survive the wire encoding unchanged (its NULL sentinels excluded).
    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            (i64::MIN + 1..=i64::MAX).prop_map(Value::Int),
            (-1.0e300..1.0e300f64).prop_map(Value::Float),
            (i128::MIN + 1..=i128::MAX).prop_map(|d| Value::Decimal(d.into())),
            ".{0,20}".prop_map(Value::from),
            proptest::collection::vec(any::<u8>(), 0..20).prop_map(|b| Value::Bytes(b.into())),
            (i64::MIN + 1..=i64::MAX).prop_map(Value::Timestamp),
            any::<bool>().prop_map(Value::Bool),
            proptest::collection::vec(i64::MIN + 1..=i64::MAX, 0..5).prop_map(|v| Value::Array(v.into_iter().map(Value::Int).collect())),
        ]
    }

    fn record() -> impl Strategy<Value = Record> {
        let params = || proptest::collection::vec(value(), 0..6);
        prop_oneof![
            (any::<i64>(), any::<u32>(), ".{0,12}", params()).prop_map(|(txn_id, partition, procedure, params)| Record::Sp {
                txn_id,
                partition,
                procedure: procedure.into(),
                params
            }),
            (any::<i64>(), any::<u32>(), ".{0,30}", params()).prop_map(|(txn_id, partition, sql, params)| Record::AdHocSp {
                txn_id,
                partition,
                sql,
                params
            }),
            (any::<u32>(), any::<i64>()).prop_map(|(partition, mp_txn_id)| Record::MpMarker { partition, mp_txn_id }),
            (any::<i64>(), ".{0,12}", params()).prop_map(|(txn_id, procedure, params)| { Record::Mp { txn_id, procedure, params } }),
            (any::<i64>(), any::<u64>()).prop_map(|(txn_id, snapshot_id)| Record::SnapshotTaken { txn_id, snapshot_id }),
            (any::<i64>(), any::<u32>(), proptest::collection::vec(any::<u32>(), 0..5), proptest::collection::vec(any::<u8>(), 0..40))
                .prop_map(|(txn_id, partition, participants, specs)| Record::MpShare { txn_id, partition, participants, specs }),
            (any::<i64>(), any::<u32>(), any::<bool>()).prop_map(|(txn_id, partition, commit)| Record::MpDecide {
                txn_id,
                partition,
                commit
            }),
        ]
    }

    proptest! {
        #[test]
        fn records_round_trip(r in record()) {
            let body = r.encode().unwrap();
            prop_assert_eq!(Record::decode(&body).unwrap(), r);
        }

        #[test]
        fn truncated_bodies_are_errors_not_panics(r in record(), cut in 0usize..64) {
            let body = r.encode().unwrap();
            let cut = cut.min(body.len().saturating_sub(1));
            prop_assert!(Record::decode(&body[..cut]).is_err());
        }
    }

    #[test]
    fn an_sp_record_has_this_exact_encoding() {
        let r = Record::Sp { txn_id: 7, partition: 2, procedure: "Vote".into(), params: vec![Value::Int(5)] };
        let mut expected = vec![1, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 2, 0, 0, 0, 4];
        expected.extend_from_slice(b"Vote");
        expected.extend_from_slice(&[0, 1, 6, 0, 0, 0, 0, 0, 0, 0, 5]);
        assert_eq!(r.encode().unwrap(), expected);
        assert_eq!(r.txn_id(), 7);
    }

    #[test]
    fn unknown_kinds_and_trailing_bytes_are_refused() {
        assert!(Record::decode(&[9]).unwrap_err().message.contains("unknown kind 9"));
        let mut body = Record::MpMarker { partition: 1, mp_txn_id: 2 }.encode().unwrap();
        body.push(0);
        assert!(Record::decode(&body).unwrap_err().message.contains("unexpected bytes"));
    }
}
