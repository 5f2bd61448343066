//! Procedure invocations (§1.3): versions 0, 1 and 2 decoded, version 2 encoded.

use lockstep_core::{Error, Result, Value};

use crate::codec::{begin_len, malformed, patch_len, put_i32, put_i64, put_i8, put_string, Reader};
use crate::params::{decode_params_into, encode_params_typed};
use crate::types::WireType;

/// Most extensions in one invocation (the real server rejects more).
pub const EXTENSION_COUNT_MAX: u8 = 30;
/// Longest procedure name we accept.
pub const PROCEDURE_NAME_MAX_BYTES: usize = 1024;
/// Largest extension length code: 2^(16−1) = 32 KiB of value, far more than any known one.
const EXTENSION_LEN_CODE_MAX: u8 = 16;

const EXT_BATCH_TIMEOUT: u8 = 1;
const EXT_ALL_PARTITION: u8 = 2;
const EXT_PARTITION_DESTINATION: u8 = 3;
/// Length code of a 4-byte extension value.
const LEN_CODE_4_BYTES: u8 = 3;
/// Frame length, version, name length, handle, extensions and parameter count, at most.
const INVOCATION_HEADER_BYTES_MAX: usize = 4 + 1 + 4 + 8 + 1 + 14 + 2;
/// A type byte and an 8-byte value: most parameters fit, longer strings grow the buffer.
const PARAM_BYTES_TYPICAL: usize = 9;

/// One call of a procedure.
#[derive(Clone, Debug, PartialEq)]
pub struct Invocation {
    pub procedure: String,
    /// Opaque client handle, echoed in the response.
    pub handle: i64,
    /// Batch timeout override in ms (0 = infinite); None when not given.
    pub timeout_ms: Option<i32>,
    /// Set by `callAllPartitionProcedure` calls.
    pub all_partition: bool,
    /// The partition the call must run at.
    pub partition_destination: Option<i32>,
    pub params: Vec<Value>,
}

impl Invocation {
    /// A plain call with no extensions.
    pub fn new(procedure: impl Into<String>, handle: i64, params: Vec<Value>) -> Self {
        Invocation { procedure: procedure.into(), handle, timeout_ms: None, all_partition: false, partition_destination: None, params }
    }
}

/// Decodes an invocation frame's payload.
pub fn decode_invocation(payload: &[u8]) -> Result<Invocation> {
    decode_invocation_into(payload, None)
}

/// Decodes an invocation and also returns each parameter's wire type code (so a server can
/// tell an INTEGER parameter from a BIGINT one).
pub fn decode_invocation_typed(payload: &[u8]) -> Result<(Invocation, Vec<WireType>)> {
    let mut codes = Vec::new();
    let inv = decode_invocation_into(payload, Some(&mut codes))?;
    Ok((inv, codes))
}

fn decode_invocation_into(payload: &[u8], codes: Option<&mut Vec<WireType>>) -> Result<Invocation> {
    let mut r = Reader::new(payload);
    let version = r.i8("invocation version")?;
    let mut timeout_ms = None;
    match version {
        0 => {}
        1 => match r.i8("timeout flag")? {
            -1 => {}
            // -1 means no timeout, as in version 2's extension (the fuzzer found the two
            // versions disagreeing, so a logged call could change on its way back).
            1 => timeout_ms = Some(r.i32("batch timeout")?).filter(|ms| *ms != -1),
            other => return Err(malformed(format!("invalid timeout flag {other}"))),
        },
        2 => {}
        other => return Err(malformed(format!("unknown invocation version {other}"))),
    }
    let procedure = r.string("procedure name")?.unwrap_or_default();
    if procedure.is_empty() {
        return Err(malformed("procedure name is empty"));
    }
    if procedure.len() > PROCEDURE_NAME_MAX_BYTES {
        return Err(malformed(format!("procedure name longer than {PROCEDURE_NAME_MAX_BYTES} bytes")));
    }
    let handle = r.i64("client handle")?;
    let mut inv = Invocation::new(procedure, handle, Vec::new());
    inv.timeout_ms = timeout_ms;
    if version == 2 {
        read_extensions(&mut r, &mut inv)?;
    }
    inv.params = decode_params_into(&mut r, codes)?;
    r.expect_end("the parameters")?;
    Ok(inv)
}

fn read_extensions(r: &mut Reader, inv: &mut Invocation) -> Result<()> {
    let count = r.i8("extension count")?;
    if count < 0 || count as u8 > EXTENSION_COUNT_MAX {
        return Err(malformed(format!("extension count {count} is outside 0..={EXTENSION_COUNT_MAX}")));
    }
    for _ in 0..count {
        let ty = r.u8("extension type")?;
        let len_code = r.u8("extension length")?;
        if len_code > EXTENSION_LEN_CODE_MAX {
            return Err(malformed(format!("extension length code {len_code} is too large")));
        }
        let len = if len_code == 0 { 0 } else { 1usize << (len_code - 1) };
        let value = r.bytes(len, "extension value")?;
        let as_i32 = |name: &str| -> Result<i32> {
            let b: [u8; 4] = value.try_into().map_err(|_| malformed(format!("{name} extension must be 4 bytes, not {len}")))?;
            Ok(i32::from_be_bytes(b))
        };
        match ty {
            EXT_BATCH_TIMEOUT => {
                let ms = as_i32("batch timeout")?;
                inv.timeout_ms = (ms != -1).then_some(ms);
            }
            EXT_ALL_PARTITION => inv.all_partition = true,
            EXT_PARTITION_DESTINATION => inv.partition_destination = Some(as_i32("partition destination")?),
            _ => {} // unknown extensions are skipped by their length
        }
    }
    Ok(())
}

/// Appends a version-2 invocation frame. Fails when the parameters cannot be encoded.
pub fn encode_invocation(inv: &Invocation, out: &mut Vec<u8>) -> Result<()> {
    encode_invocation_typed(inv, &[], out)
}

/// `encode_invocation` with integer wire-type hints per parameter (see `encode_params_typed`).
pub fn encode_invocation_typed(inv: &Invocation, hints: &[WireType], out: &mut Vec<u8>) -> Result<()> {
    if inv.procedure.is_empty() || inv.procedure.len() > PROCEDURE_NAME_MAX_BYTES {
        return Err(Error::graceful(format!("procedure name must be 1 to {PROCEDURE_NAME_MAX_BYTES} bytes")));
    }
    // Room for the header and typical parameters at once, instead of growing step by step.
    out.reserve(INVOCATION_HEADER_BYTES_MAX + inv.procedure.len() + PARAM_BYTES_TYPICAL * inv.params.len());
    let start = out.len();
    let at = begin_len(out);
    put_i8(out, 2);
    put_string(out, &inv.procedure);
    put_i64(out, inv.handle);
    let count = inv.timeout_ms.is_some() as i8 + inv.all_partition as i8 + inv.partition_destination.is_some() as i8;
    put_i8(out, count);
    if let Some(ms) = inv.timeout_ms {
        put_i8(out, EXT_BATCH_TIMEOUT as i8);
        put_i8(out, LEN_CODE_4_BYTES as i8);
        put_i32(out, ms);
    }
    // The Java client (and ours: `call_all_partitions`) sends ALL_PARTITION together with the
    // destination. It is written only when the call carries it: it makes the server drop the
    // first parameter, so a call with a destination alone must not gain it on the way.
    if inv.all_partition {
        put_i8(out, EXT_ALL_PARTITION as i8);
        put_i8(out, 0);
    }
    if let Some(p) = inv.partition_destination {
        put_i8(out, EXT_PARTITION_DESTINATION as i8);
        put_i8(out, LEN_CODE_4_BYTES as i8);
        put_i32(out, p);
    }
    if let Err(e) = encode_params_typed(&inv.params, hints, out) {
        out.truncate(start);
        return Err(e);
    }
    patch_len(out, at);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_0_and_1_decode() {
        let mut v0 = vec![0, 0, 0, 0, 1, b'P', 0, 0, 0, 0, 0, 0, 0, 5, 0, 1, 5, 0, 0, 0, 7];
        let inv = decode_invocation(&v0).unwrap();
        assert_eq!(inv, Invocation::new("P", 5, vec![Value::Int(7)]));
        let mut v1 = vec![1, 1, 0, 0, 0x13, 0x88];
        v1.extend_from_slice(&v0[1..]);
        assert_eq!(decode_invocation(&v1).unwrap().timeout_ms, Some(5000));
        let mut v1_none = vec![1, 0xff];
        v1_none.extend_from_slice(&v0[1..]);
        assert_eq!(decode_invocation(&v1_none).unwrap().timeout_ms, None);
        // Version 1 with the flag set and -1 also means none, as version 2 says it.
        let mut v1_minus_one = vec![1u8, 1, 0xff, 0xff, 0xff, 0xff];
        v1_minus_one.extend_from_slice(&v1_none[2..]);
        assert_eq!(decode_invocation(&v1_minus_one).unwrap().timeout_ms, None);
        v0.push(0);
        assert!(decode_invocation(&v0).unwrap_err().message.contains("1 unexpected bytes"));
    }

    #[test]
    fn unknown_extensions_are_skipped_and_bad_counts_refused() {
        // name "P", handle 1, 2 extensions: type 9 with 8 bytes, ALL_PARTITION; no params.
        let mut b = vec![2, 0, 0, 0, 1, b'P', 0, 0, 0, 0, 0, 0, 0, 1, 2, 9, 4, 1, 2, 3, 4, 5, 6, 7, 8, 2, 0, 0, 0];
        let inv = decode_invocation(&b).unwrap();
        assert!(inv.all_partition);
        assert_eq!(inv.partition_destination, None);
        b[14] = 31;
        assert!(decode_invocation(&b).unwrap_err().message.contains("extension count 31"));
        b[14] = 0xff;
        assert!(decode_invocation(&b).is_err());
    }

    /// Found by the fuzzer (fuzz/regressions/wire/invocation-destination-without-all-partition):
    /// a destination without ALL_PARTITION came back from the encoder with it added.
    #[test]
    fn extensions_are_encoded_as_the_call_carries_them() {
        for (all_partition, destination) in [(false, Some(3)), (true, None), (true, Some(4)), (false, None)] {
            let mut inv = Invocation::new("P", 1, vec![Value::Int(1)]);
            inv.all_partition = all_partition;
            inv.partition_destination = destination;
            let mut out = Vec::new();
            encode_invocation(&inv, &mut out).unwrap();
            assert_eq!(decode_invocation(&out[4..]).unwrap(), inv);
        }
    }

    #[test]
    fn empty_procedure_name_is_refused() {
        let b = [2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0];
        assert!(decode_invocation(&b).unwrap_err().message.contains("procedure name is empty"));
        let mut out = Vec::new();
        assert!(encode_invocation(&Invocation::new("", 1, vec![]), &mut out).is_err());
    }
}
