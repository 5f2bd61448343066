//! Reads the binary chunks `string.dump` makes (Lua 5.4's format, as `ldump.c` writes it)
//! far enough to find a function that assigns to one of its upvalues.
//!
//! Once a module has loaded, the upvalues of the functions it keeps are its module-level
//! variables, and a call must not change them (see `freeze` in sandbox.lua). Only the
//! `SETUPVAL` instruction writes an upvalue; a nested function writes its parent's
//! upvalue `i` when one of its own upvalues is `i` of the parent (`instack` 0) and it writes
//! that. An upvalue that refers to a local of the enclosing function (`instack` 1) is a
//! fresh variable on every call of that function, so writes to it are allowed.

/// `OP_SETUPVAL` (`UpValue[B] := R[A]`) in Lua 5.4's opcode list (lopcodes.h).
const OP_SETUPVAL: u32 = 10;
/// Instruction layout of Lua 5.4: a 7-bit opcode, then A (8 bits), k (1 bit), B (8 bits).
const OPCODE_MASK: u32 = 0x7f;
const ARG_B_SHIFT: u32 = 16;
const ARG_B_MASK: u32 = 0xff;
/// Marks an instruction whose line is in `abslineinfo` (ldebug.h).
const ABSLINEINFO: i8 = -0x80;
/// At most this many instructions between two absolute line entries (ldebug.h).
const MAXIWTHABS: usize = 128;
/// The header `string.dump` writes before the first function (lundump.h): signature,
/// version 5.4, official format, the conversion check bytes, then the sizes of an
/// instruction, an integer and a number; then 0x5678 and 370.5 as native integer and number.
const HEADER_PREFIX: &[u8] = b"\x1bLua\x54\x00\x19\x93\r\n\x1a\n\x04\x08\x08";
const HEADER_INT: i64 = 0x5678;
const HEADER_NUM: f64 = 370.5;
/// How deep functions may nest in a dump (the parser allows 200 nested C calls).
const NESTING_MAX: usize = 250;
/// Characters of a source text `[string "..."]` quotes.
const SOURCE_QUOTE_MAX_CHARS: usize = 40;

/// Constant tags (lobject.h: type | variant << 4).
const TAG_NIL: u8 = 0;
const TAG_FALSE: u8 = 1;
const TAG_TRUE: u8 = 1 | (1 << 4);
const TAG_INT: u8 = 3;
const TAG_FLOAT: u8 = 3 | (1 << 4);
const TAG_SHORT_STRING: u8 = 4;
const TAG_LONG_STRING: u8 = 4 | (1 << 4);

/// A write to an upvalue of the dumped function, where the first one is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct UpvalueWrite {
    /// "file:line" of the assignment.
    pub(crate) at: String,
    /// The variable's name ("?" without debug information).
    pub(crate) name: String,
}

/// One function prototype, with what the search needs.
struct Proto {
    source: Option<Vec<u8>>,
    line_defined: i64,
    code: Vec<u32>,
    /// (instack, idx) of each upvalue.
    upvalues: Vec<(u8, u8)>,
    protos: Vec<Proto>,
    lineinfo: Vec<i8>,
    /// (pc, line) entries.
    abslineinfo: Vec<(i64, i64)>,
    upvalue_names: Vec<Vec<u8>>,
}

/// The first assignment, in the dumped function or a function nested in it, to one of the
/// dumped function's upvalues; None when there is none. An error when `dump` is not a
/// Lua 5.4 binary chunk.
pub(crate) fn first_upvalue_write(dump: &[u8]) -> Result<Option<UpvalueWrite>, &'static str> {
    let mut r = Reader { bytes: dump, at: 0 };
    r.header()?;
    r.byte()?; // the main function's upvalue count, repeated in the function
    let top = r.function(None, 0)?;
    for i in 0..top.upvalues.len() {
        if let Some((source, line)) = written(&top, i, top.source.as_deref()) {
            let name = top.upvalue_names.get(i).map(|n| String::from_utf8_lossy(n).into_owned()).unwrap_or_else(|| "?".into());
            return Ok(Some(UpvalueWrite { at: format!("{}:{line}", short_source(source.unwrap_or(b"?"))), name }));
        }
    }
    Ok(None)
}

/// Where `p` (or a function nested in it) assigns to `p`'s upvalue `i`: its source and line.
fn written<'a>(p: &'a Proto, i: usize, source: Option<&'a [u8]>) -> Option<(Option<&'a [u8]>, i64)> {
    let source = p.source.as_deref().or(source);
    for (pc, &ins) in p.code.iter().enumerate() {
        if ins & OPCODE_MASK == OP_SETUPVAL && ((ins >> ARG_B_SHIFT) & ARG_B_MASK) as usize == i {
            return Some((source, line_of(p, pc)));
        }
    }
    for child in &p.protos {
        for (j, &(instack, idx)) in child.upvalues.iter().enumerate() {
            if instack == 0 && usize::from(idx) == i {
                if let Some(found) = written(child, j, source) {
                    return Some(found);
                }
            }
        }
    }
    None
}

/// The line of instruction `pc`, as `luaG_getfuncline` finds it.
fn line_of(p: &Proto, pc: usize) -> i64 {
    if p.lineinfo.is_empty() {
        return -1;
    }
    let (mut basepc, mut line) = match p.abslineinfo.first() {
        Some(&(first, _)) if (pc as i64) >= first => {
            let mut i = (pc / MAXIWTHABS).saturating_sub(1);
            while i + 1 < p.abslineinfo.len() && pc as i64 >= p.abslineinfo[i + 1].0 {
                i += 1;
            }
            (p.abslineinfo[i].0, p.abslineinfo[i].1)
        }
        _ => (-1, p.line_defined),
    };
    while basepc < pc as i64 {
        basepc += 1;
        match p.lineinfo.get(basepc as usize) {
            Some(&d) if d != ABSLINEINFO => line += i64::from(d),
            _ => break,
        }
    }
    line
}

/// A chunk's name as Lua's messages show it (`luaO_chunkid`, shortened).
fn short_source(source: &[u8]) -> String {
    match source.split_first() {
        Some((b'@' | b'=', rest)) => String::from_utf8_lossy(rest).into_owned(),
        _ => {
            let text = String::from_utf8_lossy(source);
            let first = text.lines().next().unwrap_or("");
            let quoted: String = first.chars().take(SOURCE_QUOTE_MAX_CHARS).collect();
            let more = quoted.len() < text.len();
            format!("[string \"{quoted}{}\"]", if more { "..." } else { "" })
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

const TRUNCATED: &str = "truncated binary chunk";

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len()).ok_or(TRUNCATED)?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn byte(&mut self) -> Result<u8, &'static str> {
        Ok(self.take(1)?[0])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], &'static str> {
        self.take(N)?.try_into().map_err(|_| TRUNCATED)
    }

    /// `loadSize`: 7 bits a byte, most significant first; the last byte has bit 7 set.
    fn size(&mut self) -> Result<usize, &'static str> {
        let mut x: usize = 0;
        loop {
            let b = self.byte()?;
            x = x.checked_mul(128).ok_or("size overflow in binary chunk")? | usize::from(b & 0x7f);
            if b & 0x80 != 0 {
                return Ok(x);
            }
        }
    }

    fn int(&mut self) -> Result<i64, &'static str> {
        i64::try_from(self.size()?).map_err(|_| "size overflow in binary chunk")
    }

    /// A count of items, each at least `min_item_bytes` long, checked against what is left
    /// (so a corrupt count cannot make a huge allocation).
    fn count(&mut self, min_item_bytes: usize) -> Result<usize, &'static str> {
        let n = self.size()?;
        if n.saturating_mul(min_item_bytes) > self.bytes.len() - self.at {
            return Err(TRUNCATED);
        }
        Ok(n)
    }

    fn string(&mut self) -> Result<Option<Vec<u8>>, &'static str> {
        match self.size()? {
            0 => Ok(None),
            n => Ok(Some(self.take(n - 1)?.to_vec())),
        }
    }

    fn header(&mut self) -> Result<(), &'static str> {
        const NOT_A_CHUNK: &str = "not a Lua 5.4 binary chunk of this build";
        if self.take(HEADER_PREFIX.len())? != HEADER_PREFIX {
            return Err(NOT_A_CHUNK);
        }
        if i64::from_ne_bytes(self.array()?) != HEADER_INT || f64::from_ne_bytes(self.array()?) != HEADER_NUM {
            return Err(NOT_A_CHUNK);
        }
        Ok(())
    }

    fn function(&mut self, parent_source: Option<&[u8]>, depth: usize) -> Result<Proto, &'static str> {
        if depth > NESTING_MAX {
            return Err("functions nest too deep in binary chunk");
        }
        let source = self.string()?.or_else(|| parent_source.map(<[u8]>::to_vec));
        let line_defined = self.int()?;
        self.int()?; // last line defined
        self.take(3)?; // numparams, is_vararg, maxstacksize
        let ncode = self.count(4)?;
        let code = (0..ncode).map(|_| self.array().map(u32::from_ne_bytes)).collect::<Result<Vec<_>, _>>()?;
        let nconst = self.count(1)?;
        for _ in 0..nconst {
            match self.byte()? {
                TAG_NIL | TAG_FALSE | TAG_TRUE => {}
                TAG_INT | TAG_FLOAT => {
                    self.take(8)?;
                }
                TAG_SHORT_STRING | TAG_LONG_STRING => {
                    self.string()?;
                }
                _ => return Err("unknown constant in binary chunk"),
            }
        }
        let nup = self.count(3)?;
        let upvalues = (0..nup)
            .map(|_| {
                let b = self.take(3)?;
                Ok((b[0], b[1]))
            })
            .collect::<Result<Vec<_>, &'static str>>()?;
        let nprotos = self.count(1)?;
        let mut protos = Vec::with_capacity(nprotos);
        for _ in 0..nprotos {
            protos.push(self.function(source.as_deref(), depth + 1)?);
        }
        let nline = self.count(1)?;
        let lineinfo = self.take(nline)?.iter().map(|&b| b as i8).collect();
        let nabs = self.count(2)?;
        let abslineinfo = (0..nabs).map(|_| Ok((self.int()?, self.int()?))).collect::<Result<Vec<_>, &'static str>>()?;
        let nloc = self.count(3)?;
        for _ in 0..nloc {
            self.string()?;
            self.int()?;
            self.int()?;
        }
        let nnames = self.count(1)?;
        let upvalue_names = (0..nnames).map(|_| Ok(self.string()?.unwrap_or_default())).collect::<Result<Vec<_>, &'static str>>()?;
        Ok(Proto { source, line_defined, code, upvalues, protos, lineinfo, abslineinfo, upvalue_names })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlua::{Function, Lua};

    /// The first upvalue write of the function `src` returns, loaded as chunk `@m.lua`.
    fn write_in(src: &str) -> Option<UpvalueWrite> {
        let lua = Lua::new();
        let f: Function = lua.load(src).set_name("@m.lua").eval().unwrap();
        first_upvalue_write(&f.dump(false)).unwrap()
    }

    fn at(line: u32, name: &str) -> Option<UpvalueWrite> {
        Some(UpvalueWrite { at: format!("m.lua:{line}"), name: name.into() })
    }

    #[test]
    fn finds_assignments_to_module_level_locals_with_their_line() {
        assert_eq!(write_in("local n = 0\nreturn function()\n  n = n + 1\n  return n\nend"), at(3, "n"));
        // In a function nested in the body, and through a helper kept by the body.
        assert_eq!(write_in("local a, b = 1, 2\nreturn function()\n  local function f()\n    b = 3\n  end\n  f()\nend"), at(4, "b"));
        // The environment is an upvalue too.
        assert_eq!(write_in("return function()\n  _ENV = nil\nend"), at(2, "_ENV"));
        // Line numbers stay right far into a long function (absolute line entries).
        let long: String = (0..400).map(|i| format!("  x = x + {i}\n")).collect();
        assert_eq!(write_in(&format!("local n = 0\nreturn function()\n  local x = 0\n{long}  n = 1\nend")), at(404, "n"));
    }

    #[test]
    fn per_call_variables_and_reads_are_allowed() {
        assert_eq!(write_in("local n = 5\nreturn function(x)\n  local c = 0\n  local function inc() c = c + n end\n  inc()\n  x = x + c\n  return x\nend"), None);
        assert_eq!(write_in("local t = {}\nreturn function(k) t[k] = 1 return #t end"), None);
    }

    #[test]
    fn refuses_what_is_not_a_dump() {
        assert!(first_upvalue_write(b"return 1").is_err());
        let lua = Lua::new();
        let f: Function = lua.load("local n return function() n = 1 end").eval().unwrap();
        let dump = f.dump(false);
        for cut in [20, dump.len() / 2, dump.len() - 1] {
            assert!(first_upvalue_write(&dump[..cut]).is_err(), "cut at {cut}");
        }
    }
}
