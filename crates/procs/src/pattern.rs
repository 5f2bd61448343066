//! Lua 5.4's pattern functions (`string.find`, `match`, `gmatch`, `gsub`) with every step
//! charged to the call's instruction budget.
//!
//! Lua's own matcher (lstrlib.c) backtracks: "(.-)(.-)(.-)(.-)x" over a few thousand
//! characters takes time growing as n⁴, all inside one C call where no hook runs. This is
//! a port of that matcher, statement for statement, so its results and error messages are
//! Lua's (differential.rs compares them against the real library on many patterns, random
//! ones included), with a `Meter` counting each step: a pathological pattern ends with the
//! budget error, or with the watchdog's stop, like a Lua loop.
//!
//! The matcher itself is plain Rust returning `Result`. The C functions around it follow
//! the rule of `raw_stmt.rs`: a frame that may raise a Lua error (`longjmp`) owns nothing
//! that needs dropping; the match state is plain data, and results are built in Lua's own
//! buffer.

use std::ffi::{c_char, c_int};

use mlua::ffi;

use crate::meter::{self, units_for_bytes, Meter, Stop};
use crate::shared::Shared;

/// Most captures in one pattern (LUA_MAXCAPTURES).
pub(crate) const CAPTURES_MAX: usize = 32;
/// Deepest recursion of the matcher (lstrlib.c's MAXCCALLS): "pattern too complex" beyond.
const MATCH_DEPTH_MAX: u32 = 200;
/// The characters that make a pattern more than a plain string (lstrlib.c's SPECIALS).
const SPECIALS: &[u8] = b"^$*+?.([%-";
const ESC: u8 = b'%';

/// A capture's length before it is closed, and the length of a position capture `()`.
const CAP_UNFINISHED: isize = -1;
const CAP_POSITION: isize = -2;

#[derive(Clone, Copy)]
struct Capture {
    init: usize,
    len: isize,
}

/// Why a match stopped without an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PatternError {
    Stop(Stop),
    EndsWithEscape,
    MissingBracket,
    MissingBalanceArguments,
    MissingFrontierBracket,
    /// The 1-based index Lua's message names.
    InvalidCaptureIndex(i32),
    InvalidPatternCapture,
    TooManyCaptures,
    TooComplex,
    /// A bug in this module (a panic), reported rather than unwound through C.
    Internal,
}

impl From<Stop> for PatternError {
    fn from(s: Stop) -> Self {
        PatternError::Stop(s)
    }
}

type Step<T> = Result<T, PatternError>;

/// The state of one match (lstrlib.c's MatchState): the subject, the pattern (its anchor
/// removed) and the captures, by index into the subject.
pub(crate) struct Matcher<'a> {
    src: &'a [u8],
    pat: &'a [u8],
    depth: u32,
    level: usize,
    capture: [Capture; CAPTURES_MAX],
    meter: Meter<'a>,
}

impl<'a> Matcher<'a> {
    pub(crate) fn new(src: &'a [u8], pat: &'a [u8], shared: &'a Shared) -> Self {
        Matcher {
            src,
            pat,
            depth: MATCH_DEPTH_MAX,
            level: 0,
            capture: [Capture { init: 0, len: 0 }; CAPTURES_MAX],
            meter: Meter::new(shared),
        }
    }

    /// Resets the state for a match at a new position (`reprepstate`).
    fn reset(&mut self) {
        self.depth = MATCH_DEPTH_MAX;
        self.level = 0;
    }

    /// A match from `s` (the whole pattern), for the C functions: a panic (a bug) becomes an
    /// error here rather than unwinding into Lua's C frames.
    fn match_at(&mut self, s: usize) -> Step<Option<usize>> {
        self.reset();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.do_match(s, 0))).unwrap_or(Err(PatternError::Internal))
    }

    /// Charges the steps not charged yet.
    fn settle(&mut self) -> Step<()> {
        Ok(self.meter.settle()?)
    }

    /// The pattern byte at `i`, or 0 past its end (the C code reads the terminating NUL).
    fn pat_at(&self, i: usize) -> u8 {
        self.pat.get(i).copied().unwrap_or(0)
    }

    /// The subject byte at `i`, or 0 past its end.
    fn src_at(&self, i: usize) -> u8 {
        self.src.get(i).copied().unwrap_or(0)
    }

    /// Where the single-character class at `p` ends (`classend`).
    fn class_end(&mut self, mut p: usize) -> Step<usize> {
        let c = self.pat_at(p);
        p += 1;
        match c {
            ESC => {
                if p >= self.pat.len() {
                    return Err(PatternError::EndsWithEscape);
                }
                Ok(p + 1)
            }
            b'[' => {
                if self.pat_at(p) == b'^' {
                    p += 1;
                }
                loop {
                    self.meter.add(1)?;
                    if p >= self.pat.len() {
                        return Err(PatternError::MissingBracket);
                    }
                    let c = self.pat[p];
                    p += 1;
                    if c == ESC && p < self.pat.len() {
                        p += 1;
                    }
                    if self.pat_at(p) == b']' {
                        return Ok(p + 1);
                    }
                }
            }
            _ => Ok(p),
        }
    }

    /// Whether `c` is in the set `[...]` from `p` (its '[') to `ec` (its ']').
    fn bracket_class(&mut self, c: u8, mut p: usize, ec: usize) -> Step<bool> {
        let mut sig = true;
        if self.pat_at(p + 1) == b'^' {
            sig = false;
            p += 1;
        }
        loop {
            p += 1;
            if p >= ec {
                return Ok(!sig);
            }
            self.meter.add(1)?;
            if self.pat[p] == ESC {
                p += 1;
                if class_matches(c, self.pat_at(p)) {
                    return Ok(sig);
                }
            } else if self.pat_at(p + 1) == b'-' && p + 2 < ec {
                p += 2;
                if self.pat[p - 2] <= c && c <= self.pat[p] {
                    return Ok(sig);
                }
            } else if self.pat[p] == c {
                return Ok(sig);
            }
        }
    }

    /// Whether the subject byte at `s` matches the class from `p` to `ep` (`singlematch`).
    fn single_match(&mut self, s: usize, p: usize, ep: usize) -> Step<bool> {
        let Some(&c) = self.src.get(s) else {
            return Ok(false);
        };
        Ok(match self.pat[p] {
            b'.' => true,
            ESC => class_matches(c, self.pat_at(p + 1)),
            b'[' => self.bracket_class(c, p, ep - 1)?,
            pc => pc == c,
        })
    }

    /// `%bxy` at `p` (the x) against the subject from `s` (`matchbalance`).
    fn match_balance(&mut self, s: usize, p: usize) -> Step<Option<usize>> {
        if p + 1 >= self.pat.len() {
            return Err(PatternError::MissingBalanceArguments);
        }
        if self.src_at(s) != self.pat[p] {
            return Ok(None);
        }
        let (open, close) = (self.pat[p], self.pat[p + 1]);
        let mut depth = 1;
        let mut s = s;
        loop {
            s += 1;
            if s >= self.src.len() {
                return Ok(None);
            }
            self.meter.add(1)?;
            let c = self.src[s];
            if c == close {
                depth -= 1;
                if depth == 0 {
                    return Ok(Some(s + 1));
                }
            } else if c == open {
                depth += 1;
            }
        }
    }

    /// `*` and `+`: the longest run first (`max_expand`).
    fn max_expand(&mut self, s: usize, p: usize, ep: usize) -> Step<Option<usize>> {
        let mut i = 0;
        while self.single_match(s + i, p, ep)? {
            self.meter.add(1)?;
            i += 1;
        }
        loop {
            if let Some(r) = self.do_match(s + i, ep + 1)? {
                return Ok(Some(r));
            }
            if i == 0 {
                return Ok(None);
            }
            i -= 1;
        }
    }

    /// `-`: the shortest run first (`min_expand`).
    fn min_expand(&mut self, mut s: usize, p: usize, ep: usize) -> Step<Option<usize>> {
        loop {
            if let Some(r) = self.do_match(s, ep + 1)? {
                return Ok(Some(r));
            }
            if self.single_match(s, p, ep)? {
                s += 1;
            } else {
                return Ok(None);
            }
        }
    }

    fn start_capture(&mut self, s: usize, p: usize, what: isize) -> Step<Option<usize>> {
        if self.level >= CAPTURES_MAX {
            return Err(PatternError::TooManyCaptures);
        }
        self.capture[self.level] = Capture { init: s, len: what };
        self.level += 1;
        let res = self.do_match(s, p)?;
        if res.is_none() {
            self.level -= 1;
        }
        Ok(res)
    }

    fn end_capture(&mut self, s: usize, p: usize) -> Step<Option<usize>> {
        let l = self.capture_to_close()?;
        self.capture[l].len = (s - self.capture[l].init) as isize;
        let res = self.do_match(s, p)?;
        if res.is_none() {
            self.capture[l].len = CAP_UNFINISHED;
        }
        Ok(res)
    }

    fn capture_to_close(&self) -> Step<usize> {
        (0..self.level).rev().find(|&l| self.capture[l].len == CAP_UNFINISHED).ok_or(PatternError::InvalidPatternCapture)
    }

    /// `%1`..`%9` (and `%0`, always invalid): the capture's text again (`match_capture`).
    fn match_capture(&mut self, s: usize, digit: u8) -> Step<Option<usize>> {
        let l = i32::from(digit) - i32::from(b'1');
        let cap = match usize::try_from(l) {
            Ok(i) if i < self.level && self.capture[i].len != CAP_UNFINISHED => self.capture[i],
            _ => return Err(PatternError::InvalidCaptureIndex(l + 1)),
        };
        // A position capture's length is negative: it never matches text.
        let Ok(len) = usize::try_from(cap.len) else {
            return Ok(None);
        };
        self.meter.add(1 + units_for_bytes(len as u64))?;
        let matches = self.src.len() - s >= len && self.src[cap.init..cap.init + len] == self.src[s..s + len];
        Ok(matches.then_some(s + len))
    }

    /// Matches the pattern from `p` against the subject from `s`: the end of the match, or
    /// None (lstrlib.c's `match`, its `goto init` a loop).
    pub(crate) fn do_match(&mut self, mut s: usize, mut p: usize) -> Step<Option<usize>> {
        if self.depth == 0 {
            return Err(PatternError::TooComplex);
        }
        self.depth -= 1;
        let result = loop {
            self.meter.add(1)?;
            if p >= self.pat.len() {
                break Some(s);
            }
            match self.pat[p] {
                b'(' => {
                    break if self.pat_at(p + 1) == b')' {
                        self.start_capture(s, p + 2, CAP_POSITION)?
                    } else {
                        self.start_capture(s, p + 1, CAP_UNFINISHED)?
                    };
                }
                b')' => break self.end_capture(s, p + 1)?,
                b'$' if p + 1 == self.pat.len() => break (s == self.src.len()).then_some(s),
                ESC if self.pat_at(p + 1) == b'b' => match self.match_balance(s, p + 2)? {
                    Some(next) => {
                        s = next;
                        p += 4;
                    }
                    None => break None,
                },
                ESC if self.pat_at(p + 1) == b'f' => {
                    p += 2;
                    if self.pat_at(p) != b'[' {
                        return Err(PatternError::MissingFrontierBracket);
                    }
                    let ep = self.class_end(p)?;
                    let previous = if s == 0 { 0 } else { self.src[s - 1] };
                    let current = self.src_at(s);
                    if !self.bracket_class(previous, p, ep - 1)? && self.bracket_class(current, p, ep - 1)? {
                        p = ep;
                    } else {
                        break None;
                    }
                }
                ESC if self.pat_at(p + 1).is_ascii_digit() => match self.match_capture(s, self.pat[p + 1])? {
                    Some(next) => {
                        s = next;
                        p += 2;
                    }
                    None => break None,
                },
                _ => {
                    // A single-character class with an optional suffix.
                    let ep = self.class_end(p)?;
                    let suffix = self.pat_at(ep);
                    if !self.single_match(s, p, ep)? {
                        if matches!(suffix, b'*' | b'?' | b'-') {
                            p = ep + 1;
                            continue;
                        }
                        break None;
                    }
                    match suffix {
                        b'?' => match self.do_match(s + 1, ep + 1)? {
                            Some(r) => break Some(r),
                            None => p = ep + 1,
                        },
                        b'+' => break self.max_expand(s + 1, p, ep)?,
                        b'*' => break self.max_expand(s, p, ep)?,
                        b'-' => break self.min_expand(s, p, ep)?,
                        _ => {
                            s += 1;
                            p = ep;
                        }
                    }
                }
            }
        };
        self.depth += 1;
        Ok(result)
    }
}

/// Whether byte `c` is in class `%cl` (`match_class`, in the C locale: ASCII only).
fn class_matches(c: u8, cl: u8) -> bool {
    let res = match cl.to_ascii_lowercase() {
        b'a' => c.is_ascii_alphabetic(),
        b'c' => c.is_ascii_control(),
        b'd' => c.is_ascii_digit(),
        b'g' => c.is_ascii_graphic(),
        b'l' => c.is_ascii_lowercase(),
        b'p' => c.is_ascii_punctuation(),
        // C's isspace also takes the vertical tab, which Rust's whitespace does not.
        b's' => c == b' ' || (b'\t'..=b'\r').contains(&c),
        b'u' => c.is_ascii_uppercase(),
        b'w' => c.is_ascii_alphanumeric(),
        b'x' => c.is_ascii_hexdigit(),
        b'z' => c == 0,
        _ => return cl == c,
    };
    if cl.is_ascii_lowercase() {
        res
    } else {
        !res
    }
}

/// Whether the pattern has none of the special characters (then `find` searches plainly).
fn no_specials(pat: &[u8]) -> bool {
    !pat.iter().any(|c| SPECIALS.contains(c))
}

/// Where `needle` first occurs in `hay` (`lmemfind`), charging each place tried.
fn plain_find(hay: &[u8], needle: &[u8], meter: &mut Meter) -> Result<Option<usize>, Stop> {
    let Some((&first, rest)) = needle.split_first() else {
        return Ok(Some(0));
    };
    if needle.len() > hay.len() {
        return Ok(None);
    }
    let last_start = hay.len() - needle.len();
    let mut from = 0;
    while from <= last_start {
        let Some(off) = hay[from..=last_start].iter().position(|&c| c == first) else {
            meter.add(units_for_bytes((last_start + 1 - from) as u64))?;
            return Ok(None);
        };
        let at = from + off;
        meter.add(1 + units_for_bytes((off + rest.len()) as u64))?;
        if &hay[at + 1..at + needle.len()] == rest {
            return Ok(Some(at));
        }
        from = at + 1;
    }
    Ok(None)
}

/// A string position argument as Lua's `posrelatI` turns it into a 1-based start.
fn start_position(pos: ffi::lua_Integer, len: usize) -> usize {
    if pos > 0 {
        usize::try_from(pos).unwrap_or(usize::MAX)
    } else if pos == 0 || pos.unsigned_abs() > len as u64 {
        1
    } else {
        len - pos.unsigned_abs() as usize + 1
    }
}

/// The bytes of the string argument `arg` (raising Lua's argument error if it is not one).
/// The slice lives as long as the value stays in its stack slot.
unsafe fn check_bytes<'a>(l: *mut ffi::lua_State, arg: c_int) -> &'a [u8] {
    let mut len = 0usize;
    let p = ffi::luaL_checklstring(l, arg, &mut len);
    std::slice::from_raw_parts(p.cast::<u8>(), len)
}

unsafe fn push_bytes(l: *mut ffi::lua_State, b: &[u8]) {
    ffi::lua_pushlstring(l, b.as_ptr().cast::<c_char>(), b.len());
}

/// Raises the message on top of the stack with the caller's location, as `luaL_error`.
unsafe fn raise_located(l: *mut ffi::lua_State) -> ! {
    ffi::luaL_where(l, 1);
    ffi::lua_insert(l, -2);
    ffi::lua_concat(l, 2);
    ffi::lua_error(l)
}

/// Raises `e` as Lua's pattern functions word it.
unsafe fn raise(l: *mut ffi::lua_State, shared: &Shared, e: PatternError) -> ! {
    let msg = match e {
        PatternError::Stop(stop) => meter::raise(l, shared, stop),
        PatternError::EndsWithEscape => c"malformed pattern (ends with '%')",
        PatternError::MissingBracket => c"malformed pattern (missing ']')",
        PatternError::MissingBalanceArguments => c"malformed pattern (missing arguments to '%b')",
        PatternError::MissingFrontierBracket => c"missing '[' after '%f' in pattern",
        PatternError::InvalidCaptureIndex(i) => {
            ffi::lua_pushfstring(l, c"invalid capture index %%%d".as_ptr(), i as c_int);
            raise_located(l)
        }
        PatternError::InvalidPatternCapture => c"invalid pattern capture",
        PatternError::TooManyCaptures => c"too many captures",
        PatternError::TooComplex => c"pattern too complex",
        PatternError::Internal => c"internal error in pattern matching",
    };
    ffi::lua_pushstring(l, msg.as_ptr());
    raise_located(l)
}

/// Pushes capture `i` (`push_onecapture`); `s..e` is the whole match, used when there are
/// no captures. Raises for an invalid or unfinished capture.
unsafe fn push_capture(l: *mut ffi::lua_State, m: &Matcher, i: usize, s: usize, e: usize) {
    if i >= m.level {
        if i != 0 {
            ffi::lua_pushfstring(l, c"invalid capture index %%%d".as_ptr(), (i + 1) as c_int);
            raise_located(l);
        }
        push_bytes(l, &m.src[s..e]);
        return;
    }
    let cap = m.capture[i];
    match cap.len {
        CAP_UNFINISHED => {
            ffi::lua_pushstring(l, c"unfinished capture".as_ptr());
            raise_located(l)
        }
        CAP_POSITION => ffi::lua_pushinteger(l, cap.init as ffi::lua_Integer + 1),
        len => push_bytes(l, &m.src[cap.init..cap.init + len as usize]),
    }
}

/// Pushes the captures (the whole match `s..e` when there are none and `s` is given), and
/// returns how many (`push_captures`).
unsafe fn push_captures(l: *mut ffi::lua_State, m: &Matcher, s: Option<usize>, e: usize) -> c_int {
    let n = if m.level == 0 && s.is_some() { 1 } else { m.level };
    ffi::luaL_checkstack(l, n as c_int, c"too many captures".as_ptr());
    for i in 0..n {
        push_capture(l, m, i, s.unwrap_or(0), e);
    }
    n as c_int
}

/// `string.find(s, pattern, [init, [plain]])`.
pub(crate) unsafe extern "C-unwind" fn find(l: *mut ffi::lua_State) -> c_int {
    find_aux(l, true)
}

/// `string.match(s, pattern, [init])`.
pub(crate) unsafe extern "C-unwind" fn match_(l: *mut ffi::lua_State) -> c_int {
    find_aux(l, false)
}

/// lstrlib.c's `str_find_aux`.
unsafe fn find_aux(l: *mut ffi::lua_State, find: bool) -> c_int {
    let shared = meter::shared_of(l);
    let src = check_bytes(l, 1);
    let pat = check_bytes(l, 2);
    let init = start_position(ffi::luaL_optinteger(l, 3, 1), src.len()) - 1;
    if init > src.len() {
        ffi::lua_pushnil(l);
        return 1;
    }
    if find && (ffi::lua_toboolean(l, 4) != 0 || no_specials(pat)) {
        let mut meter = Meter::new(shared);
        let found = plain_find(&src[init..], pat, &mut meter).and_then(|f| meter.settle().map(|()| f));
        match found {
            Ok(Some(at)) => {
                ffi::lua_pushinteger(l, (init + at + 1) as ffi::lua_Integer);
                ffi::lua_pushinteger(l, (init + at + pat.len()) as ffi::lua_Integer);
                return 2;
            }
            Ok(None) => {}
            Err(stop) => meter::raise(l, shared, stop),
        }
    } else {
        let anchor = pat.first() == Some(&b'^');
        let mut m = Matcher::new(src, if anchor { &pat[1..] } else { pat }, shared);
        let mut s1 = init;
        loop {
            match m.match_at(s1).and_then(|r| if r.is_some() { m.settle().map(|()| r) } else { Ok(r) }) {
                Err(e) => raise(l, shared, e),
                Ok(Some(end)) if find => {
                    ffi::lua_pushinteger(l, (s1 + 1) as ffi::lua_Integer);
                    ffi::lua_pushinteger(l, end as ffi::lua_Integer);
                    return push_captures(l, &m, None, 0) + 2;
                }
                Ok(Some(end)) => return push_captures(l, &m, Some(s1), end),
                Ok(None) => {}
            }
            if s1 >= src.len() || anchor {
                break;
            }
            s1 += 1;
        }
        if let Err(e) = m.settle() {
            raise(l, shared, e);
        }
    }
    ffi::lua_pushnil(l);
    1
}

/// What a `gmatch` iterator keeps between calls (lstrlib.c's GMatchState, by index).
#[derive(Clone, Copy)]
struct GmatchState {
    src: usize,
    /// The end of the last match, or `usize::MAX` before the first.
    last_match: usize,
}

/// `string.gmatch(s, pattern, [init])`: an iterator over the matches.
pub(crate) unsafe extern "C-unwind" fn gmatch(l: *mut ffi::lua_State) -> c_int {
    let len = check_bytes(l, 1).len();
    check_bytes(l, 2);
    let init = start_position(ffi::luaL_optinteger(l, 3, 1), len) - 1;
    ffi::lua_settop(l, 2);
    let state = ffi::lua_newuserdatauv(l, std::mem::size_of::<GmatchState>(), 0).cast::<GmatchState>();
    state.write(GmatchState { src: init.min(len + 1), last_match: usize::MAX });
    ffi::lua_pushvalue(l, ffi::lua_upvalueindex(1));
    ffi::lua_pushcclosure(l, gmatch_step, 4);
    1
}

/// Whether `f` is the iterator `string.gmatch` returns: a C function with state, which a
/// module must not keep (see `freeze`).
pub(crate) fn is_gmatch_iterator(f: Option<ffi::lua_CFunction>) -> bool {
    f.is_some_and(|f| std::ptr::fn_addr_eq(f, gmatch_step as ffi::lua_CFunction))
}

/// One step of a `gmatch` iterator: upvalues are the subject, the pattern, the state and
/// the `Shared` pointer (`gmatch_aux`).
unsafe extern "C-unwind" fn gmatch_step(l: *mut ffi::lua_State) -> c_int {
    let mut len = 0usize;
    let s = ffi::lua_tolstring(l, ffi::lua_upvalueindex(1), &mut len);
    let src = std::slice::from_raw_parts(s.cast::<u8>(), len);
    let p = ffi::lua_tolstring(l, ffi::lua_upvalueindex(2), &mut len);
    let pat = std::slice::from_raw_parts(p.cast::<u8>(), len);
    let state = ffi::lua_touserdata(l, ffi::lua_upvalueindex(3)).cast::<GmatchState>();
    let shared = &*ffi::lua_touserdata(l, ffi::lua_upvalueindex(4)).cast_const().cast::<Shared>();
    let mut m = Matcher::new(src, pat, shared);
    let mut at = (*state).src;
    while at <= src.len() {
        match m.match_at(at) {
            Err(e) => raise(l, shared, e),
            Ok(Some(end)) if end != (*state).last_match => {
                if let Err(e) = m.settle() {
                    raise(l, shared, e);
                }
                (*state).src = end;
                (*state).last_match = end;
                return push_captures(l, &m, Some(at), end);
            }
            Ok(_) => {}
        }
        at += 1;
    }
    if let Err(e) = m.settle() {
        raise(l, shared, e);
    }
    0
}

/// Raises Lua's "bad argument" error; `luaL_argerror` does not return.
pub(crate) unsafe fn arg_error(l: *mut ffi::lua_State, arg: c_int, msg: *const c_char) -> ! {
    ffi::luaL_argerror(l, arg, msg);
    std::process::abort()
}

/// Raises "`expected` expected, got <type>" for argument `arg` (`luaL_typeerror`).
pub(crate) unsafe fn type_error(l: *mut ffi::lua_State, arg: c_int, expected: &std::ffi::CStr) -> ! {
    let typearg = if ffi::luaL_getmetafield(l, arg, c"__name".as_ptr()) == ffi::LUA_TSTRING {
        ffi::lua_tostring(l, -1)
    } else if ffi::lua_type(l, arg) == ffi::LUA_TLIGHTUSERDATA {
        c"light userdata".as_ptr()
    } else {
        ffi::luaL_typename(l, arg)
    };
    let msg = ffi::lua_pushfstring(l, c"%s expected, got %s".as_ptr(), expected.as_ptr(), typearg);
    arg_error(l, arg, msg)
}

/// `string.gsub(s, pattern, repl, [n])` (`str_gsub`).
pub(crate) unsafe extern "C-unwind" fn gsub(l: *mut ffi::lua_State) -> c_int {
    let shared = meter::shared_of(l);
    let src = check_bytes(l, 1);
    let pat = check_bytes(l, 2);
    let tr = ffi::lua_type(l, 3);
    let max_s = ffi::luaL_optinteger(l, 4, src.len() as ffi::lua_Integer + 1);
    if !matches!(tr, ffi::LUA_TNUMBER | ffi::LUA_TSTRING | ffi::LUA_TFUNCTION | ffi::LUA_TTABLE) {
        type_error(l, 3, c"string/function/table");
    }
    let anchor = pat.first() == Some(&b'^');
    let mut b: ffi::luaL_Buffer = std::mem::zeroed();
    ffi::luaL_buffinit(l, &mut b);
    let mut m = Matcher::new(src, if anchor { &pat[1..] } else { pat }, shared);
    let mut s = 0;
    let mut last_match = usize::MAX;
    let mut n: ffi::lua_Integer = 0;
    let mut changed = false;
    while n < max_s {
        let end = match m.match_at(s) {
            Ok(end) => end,
            Err(e) => raise(l, shared, e),
        };
        match end {
            Some(e) if e != last_match => {
                n += 1;
                changed |= add_value(l, &mut m, &mut b, s, e, tr);
                s = e;
                last_match = e;
            }
            _ if s < src.len() => {
                ffi::luaL_addchar(&mut b, src[s] as c_char);
                s += 1;
            }
            _ => break,
        }
        if anchor {
            break;
        }
    }
    if let Err(stop) = m.meter.add(units_for_bytes((src.len() - s) as u64)).and_then(|()| m.meter.settle()) {
        meter::raise(l, shared, stop);
    }
    if changed {
        ffi::luaL_addlstring(&mut b, src[s..].as_ptr().cast::<c_char>(), src.len() - s);
        ffi::luaL_pushresult(&mut b);
    } else {
        ffi::lua_pushvalue(l, 1);
    }
    ffi::lua_pushinteger(l, n);
    2
}

/// Adds the replacement of the match `s..e` to `b`; whether the subject changed
/// (`add_value`).
unsafe fn add_value(l: *mut ffi::lua_State, m: &mut Matcher, b: &mut ffi::luaL_Buffer, s: usize, e: usize, tr: c_int) -> bool {
    match tr {
        ffi::LUA_TFUNCTION => {
            ffi::lua_pushvalue(l, 3);
            let n = push_captures(l, m, Some(s), e);
            ffi::lua_call(l, n, 1);
        }
        ffi::LUA_TTABLE => {
            push_capture(l, m, 0, s, e);
            ffi::lua_gettable(l, 3);
        }
        _ => {
            add_string(l, m, b, s, e);
            return true;
        }
    }
    if ffi::lua_toboolean(l, -1) == 0 {
        ffi::lua_pop(l, 1);
        charge_output(l, m, e - s);
        ffi::luaL_addlstring(b, m.src[s..e].as_ptr().cast::<c_char>(), e - s);
        return false;
    }
    if ffi::lua_isstring(l, -1) == 0 {
        ffi::lua_pushfstring(l, c"invalid replacement value (a %s)".as_ptr(), ffi::luaL_typename(l, -1));
        raise_located(l);
    }
    charge_output(l, m, ffi::lua_rawlen(l, -1));
    ffi::luaL_addvalue(b);
    true
}

/// Charges `bytes` added to gsub's result.
unsafe fn charge_output(l: *mut ffi::lua_State, m: &mut Matcher, bytes: usize) {
    if let Err(stop) = m.meter.add(1 + units_for_bytes(bytes as u64)) {
        meter::raise(l, meter::shared_of(l), stop);
    }
}

/// Adds the replacement string (argument 3) for the match `s..e`, with its `%0`-`%9` and
/// `%%` (`add_s`).
unsafe fn add_string(l: *mut ffi::lua_State, m: &mut Matcher, b: &mut ffi::luaL_Buffer, s: usize, e: usize) {
    let mut len = 0usize;
    let p = ffi::lua_tolstring(l, 3, &mut len);
    let repl = std::slice::from_raw_parts(p.cast::<u8>(), len);
    charge_output(l, m, repl.len());
    let mut rest = repl;
    while let Some(at) = rest.iter().position(|&c| c == ESC) {
        ffi::luaL_addlstring(b, rest.as_ptr().cast::<c_char>(), at);
        let c = rest.get(at + 1).copied().unwrap_or(0);
        match c {
            ESC => ffi::luaL_addchar(b, ESC as c_char),
            b'0' => {
                charge_output(l, m, e - s);
                ffi::luaL_addlstring(b, m.src[s..e].as_ptr().cast::<c_char>(), e - s);
            }
            b'1'..=b'9' => add_capture(l, m, b, usize::from(c - b'1'), s, e),
            _ => {
                ffi::lua_pushfstring(l, c"invalid use of '%c' in replacement string".as_ptr(), c_int::from(ESC));
                raise_located(l);
            }
        }
        rest = rest.get(at + 2..).unwrap_or_default();
    }
    ffi::luaL_addlstring(b, rest.as_ptr().cast::<c_char>(), rest.len());
}

/// Adds capture `i` of the match `s..e` to `b` (`get_onecapture` in `add_s`).
unsafe fn add_capture(l: *mut ffi::lua_State, m: &mut Matcher, b: &mut ffi::luaL_Buffer, i: usize, s: usize, e: usize) {
    if i < m.level && m.capture[i].len == CAP_POSITION {
        ffi::lua_pushinteger(l, m.capture[i].init as ffi::lua_Integer + 1);
        ffi::luaL_addvalue(b);
        return;
    }
    let (from, len) = if i >= m.level {
        if i != 0 {
            ffi::lua_pushfstring(l, c"invalid capture index %%%d".as_ptr(), (i + 1) as c_int);
            raise_located(l);
        }
        (s, e - s)
    } else {
        match m.capture[i].len {
            CAP_UNFINISHED => {
                ffi::lua_pushstring(l, c"unfinished capture".as_ptr());
                raise_located(l)
            }
            len => (m.capture[i].init, len as usize),
        }
    };
    charge_output(l, m, len);
    ffi::luaL_addlstring(b, m.src[from..from + len].as_ptr().cast::<c_char>(), len);
}
