//! Bounds-checked big-endian reading and writing of the primitive wire encodings.
//!
//! Every read checks the bytes that remain, so a malformed message becomes an `Err` naming
//! the field, never a panic or an allocation sized by an untrusted length.

use lockstep_core::{Error, Result};

/// A protocol violation with a reason; the connection is normally dropped after one.
pub fn malformed(reason: impl std::fmt::Display) -> Error {
    Error::graceful(format!("wire protocol violation: {reason}"))
}

/// A cursor over one message's bytes.
#[derive(Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    /// The next `n` bytes, or an error naming `what` if the message is shorter.
    pub fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(malformed(format!("{what} needs {n} bytes but only {} remain", self.remaining())));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let b = self.bytes(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    pub fn i8(&mut self, what: &str) -> Result<i8> {
        Ok(i8::from_be_bytes(self.array(what)?))
    }
    pub fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(u8::from_be_bytes(self.array(what)?))
    }
    pub fn i16(&mut self, what: &str) -> Result<i16> {
        Ok(i16::from_be_bytes(self.array(what)?))
    }
    pub fn i32(&mut self, what: &str) -> Result<i32> {
        Ok(i32::from_be_bytes(self.array(what)?))
    }
    pub fn i64(&mut self, what: &str) -> Result<i64> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }
    pub fn i128(&mut self, what: &str) -> Result<i128> {
        Ok(i128::from_be_bytes(self.array(what)?))
    }
    pub fn f64(&mut self, what: &str) -> Result<f64> {
        Ok(f64::from_be_bytes(self.array(what)?))
    }

    /// int32 length + bytes; None for length −1 (NULL). The length is checked against the
    /// bytes left in the message before anything is allocated.
    pub fn varbinary(&mut self, what: &str) -> Result<Option<&'a [u8]>> {
        let len = self.i32(what)?;
        if len == -1 {
            return Ok(None);
        }
        if len < 0 {
            return Err(malformed(format!("{what} has negative length {len}")));
        }
        self.bytes(len as usize, what).map(Some)
    }

    /// A nullable UTF-8 string (int32 length + bytes).
    pub fn string(&mut self, what: &str) -> Result<Option<String>> {
        Ok(self.str(what)?.map(str::to_string))
    }

    /// `string`, borrowed from the message.
    pub fn str(&mut self, what: &str) -> Result<Option<&'a str>> {
        match self.varbinary(what)? {
            None => Ok(None),
            Some(b) => std::str::from_utf8(b).map(Some).map_err(|_| malformed(format!("{what} is not valid UTF-8"))),
        }
    }

    /// A string that must not be NULL.
    pub fn required_string(&mut self, what: &str) -> Result<String> {
        self.required_str(what).map(str::to_string)
    }

    /// `required_string`, borrowed from the message.
    pub fn required_str(&mut self, what: &str) -> Result<&'a str> {
        self.str(what)?.ok_or_else(|| malformed(format!("{what} is NULL")))
    }

    /// Fails unless every byte has been consumed.
    pub fn expect_end(&self, what: &str) -> Result<()> {
        if self.remaining() != 0 {
            return Err(malformed(format!("{} unexpected bytes after {what}", self.remaining())));
        }
        Ok(())
    }
}

pub fn put_i8(out: &mut Vec<u8>, v: i8) {
    out.push(v as u8);
}
pub fn put_i16(out: &mut Vec<u8>, v: i16) {
    out.extend_from_slice(&v.to_be_bytes());
}
pub fn put_i32(out: &mut Vec<u8>, v: i32) {
    out.extend_from_slice(&v.to_be_bytes());
}
pub fn put_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&v.to_be_bytes());
}
pub fn put_f64(out: &mut Vec<u8>, v: f64) {
    out.extend_from_slice(&v.to_be_bytes());
}
pub fn put_i128(out: &mut Vec<u8>, v: i128) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// int32 length + bytes. Lengths above i32::MAX cannot be framed anyway (frames are capped
/// far lower), so they are clamped and the frame check rejects the message.
pub fn put_varbinary(out: &mut Vec<u8>, b: &[u8]) {
    put_i32(out, i32::try_from(b.len()).unwrap_or(i32::MAX));
    out.extend_from_slice(b);
}

pub fn put_string(out: &mut Vec<u8>, s: &str) {
    put_varbinary(out, s.as_bytes());
}

pub fn put_null_string(out: &mut Vec<u8>) {
    put_i32(out, -1);
}

/// Reserves an int32 length slot and returns where it is, for `patch_len`.
pub fn begin_len(out: &mut Vec<u8>) -> usize {
    let at = out.len();
    put_i32(out, 0);
    at
}

/// Writes into the slot at `at` the number of bytes that follow the slot.
pub fn patch_len(out: &mut [u8], at: usize) {
    let len = out.len() - at - 4;
    let len = i32::try_from(len).unwrap_or(i32::MAX);
    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_reads_are_errors_naming_the_field() {
        let mut r = Reader::new(&[0, 0, 0, 9, b'a']);
        let err = r.varbinary("procedure name").unwrap_err();
        assert_eq!(err.message, "wire protocol violation: procedure name needs 9 bytes but only 1 remain");
    }

    #[test]
    fn null_and_negative_lengths() {
        assert_eq!(Reader::new(&[0xff, 0xff, 0xff, 0xff]).varbinary("x").unwrap(), None);
        assert!(Reader::new(&[0xff, 0xff, 0xff, 0xfe]).varbinary("x").is_err());
        assert!(Reader::new(&[0, 0, 0, 1, 0xff]).string("s").is_err());
    }

    #[test]
    fn patched_lengths_count_the_bytes_after_the_slot() {
        let mut out = vec![7u8];
        let at = begin_len(&mut out);
        out.extend_from_slice(&[1, 2, 3]);
        patch_len(&mut out, at);
        assert_eq!(out, vec![7, 0, 0, 0, 3, 1, 2, 3]);
    }
}
