//! The library functions procedures reach, metered (see `meter.rs`): installed in the
//! state's real library tables before the sandbox copies them.
//!
//! - `string.find`, `match`, `gmatch`, `gsub`: Rust ports charging every step (`pattern.rs`).
//! - `table.insert`, `remove`, `concat`, `sort`: Rust ports charging every element moved,
//!   read or compared. Their loops are bounded only by a length `__len` or a sparse table
//!   can make huge (`table.insert(t, 1, x)` with `#t` 2^40 moves nothing for hours).
//!   `sort` also chooses its pivots deterministically where Lua's uses the clock, so the
//!   order of equal elements is the same in every run of a call.
//! - Others keep Lua's C function behind a wrapper charging, before it runs, what its
//!   arguments ask for (`string.rep("", 2^62)` loops without producing anything, so the
//!   request is what is charged) and, after it, what it returned.
//!
//! Every function here follows the rule of `raw_stmt.rs`: a frame that may raise a Lua
//! error owns nothing that needs dropping.

use std::ffi::{c_int, c_void, CStr};
use std::rc::Rc;

use mlua::{ffi, Lua};

use crate::meter::{self, units_for_bytes, Meter, UTF8_BYTES_PER_INSTRUCTION};
use crate::pattern::{self, arg_error};
use crate::shared::Shared;

/// What `checktab` asks of a table-like argument (ltablib.c's TAB_R, TAB_W, TAB_L).
const TAB_R: c_int = 1;
const TAB_W: c_int = 2;
const TAB_L: c_int = 4;
const TAB_RW: c_int = TAB_R | TAB_W;
/// Below this many elements `sort` always takes the middle element as pivot (RANLIMIT).
const SORT_RANDOM_PIVOT_MIN: u32 = 100;

type CFunction = unsafe extern "C-unwind" fn(*mut ffi::lua_State) -> c_int;

/// Installs the metered functions into the `string`, `table` and `utf8` tables and the
/// global `tonumber` of `lua`, each with a light pointer to `shared` as first upvalue.
pub(crate) fn install(lua: &Lua, shared: &Rc<Shared>) -> mlua::Result<()> {
    let shared = Rc::as_ptr(shared).cast_mut().cast::<c_void>();
    // SAFETY: pushes, calls to library functions and sets; a Lua error unwinds into
    // exec_raw's protected call.
    unsafe { lua.exec_raw::<()>((), |l| install_raw(l, shared)) }
}

unsafe fn install_raw(l: *mut ffi::lua_State, shared: *mut c_void) {
    ffi::lua_getglobal(l, c"string".as_ptr());
    for (name, f) in
        [(c"find", pattern::find as CFunction), (c"match", pattern::match_), (c"gmatch", pattern::gmatch), (c"gsub", pattern::gsub)]
    {
        set_closure(l, shared, name, f);
    }
    for (name, f) in [
        (c"rep", rep as CFunction),
        (c"format", format),
        (c"byte", values_out),
        (c"char", values_in),
        (c"upper", bytes_in),
        (c"lower", bytes_in),
        (c"reverse", bytes_in),
        (c"sub", bytes_out),
        (c"pack", format),
        (c"packsize", bytes_in),
        (c"unpack", unpacked),
    ] {
        wrap(l, shared, name, f);
    }
    ffi::lua_pop(l, 1);

    ffi::lua_getglobal(l, c"table".as_ptr());
    for (name, f) in [(c"insert", insert as CFunction), (c"remove", remove), (c"concat", concat), (c"sort", sort)] {
        set_closure(l, shared, name, f);
    }
    for (name, f) in [(c"move", move_ as CFunction), (c"pack", values_in), (c"unpack", values_out)] {
        wrap(l, shared, name, f);
    }
    ffi::lua_pop(l, 1);

    ffi::lua_getglobal(l, c"utf8".as_ptr());
    for (name, f) in [(c"char", values_in as CFunction), (c"codepoint", values_out), (c"len", utf8_len), (c"offset", utf8_offset)] {
        wrap(l, shared, name, f);
    }
    wrap_codes(l, shared);
    ffi::lua_pop(l, 1);

    ffi::lua_pushglobaltable(l);
    wrap(l, shared, c"tonumber", bytes_in);
    ffi::lua_pop(l, 1);
}

/// Sets field `name` of the table on top to C closure `f` with upvalue `shared`.
unsafe fn set_closure(l: *mut ffi::lua_State, shared: *mut c_void, name: &CStr, f: CFunction) {
    ffi::lua_pushlightuserdata(l, shared);
    ffi::lua_pushcclosure(l, f, 1);
    ffi::lua_setfield(l, -2, name.as_ptr());
}

/// Replaces field `name` of the table on top by `wrapper`, with upvalues `shared` and the
/// function it wraps.
unsafe fn wrap(l: *mut ffi::lua_State, shared: *mut c_void, name: &CStr, wrapper: CFunction) {
    ffi::lua_pushlightuserdata(l, shared);
    ffi::lua_getfield(l, -2, name.as_ptr());
    ffi::lua_pushcclosure(l, wrapper, 2);
    ffi::lua_setfield(l, -2, name.as_ptr());
}

/// Runs the wrapped library function (upvalue 2) on the wrapper's own arguments.
unsafe fn call_wrapped(l: *mut ffi::lua_State) -> c_int {
    match ffi::lua_tocfunction(l, ffi::lua_upvalueindex(2)) {
        Some(f) => f(l),
        None => 0,
    }
}

/// The length of string argument `arg` (converting a number, as the wrapped function would).
unsafe fn arg_len(l: *mut ffi::lua_State, arg: c_int) -> u64 {
    let mut len = 0usize;
    ffi::luaL_checklstring(l, arg, &mut len);
    len as u64
}

/// The bytes of the string (or number) at `idx`, for a charge; 0 for other values.
unsafe fn len_at(l: *mut ffi::lua_State, idx: c_int) -> u64 {
    match ffi::lua_type(l, idx) {
        ffi::LUA_TSTRING => ffi::lua_rawlen(l, idx) as u64,
        _ => 0,
    }
}

/// `string.rep(s, n, [sep])`: charges the `n` rounds and the bytes they copy before any.
unsafe extern "C-unwind" fn rep(l: *mut ffi::lua_State) -> c_int {
    let len = arg_len(l, 1);
    let n = ffi::luaL_checkinteger(l, 2);
    let mut sep = 0usize;
    ffi::luaL_optlstring(l, 3, c"".as_ptr(), &mut sep);
    if let Ok(n) = u64::try_from(n) {
        meter::charge(l, n.saturating_add(units_for_bytes((len + sep as u64).saturating_mul(n))));
    }
    call_wrapped(l)
}

/// `string.format` and `string.pack`: the format's bytes before, the result's after.
unsafe extern "C-unwind" fn format(l: *mut ffi::lua_State) -> c_int {
    meter::charge(l, units_for_bytes(arg_len(l, 1)));
    let n = call_wrapped(l);
    meter::charge(l, units_for_bytes(len_at(l, -1)));
    n
}

/// Functions scanning their first argument (`upper`, `lower`, `reverse`, `packsize`,
/// `tonumber`): its bytes, before.
unsafe extern "C-unwind" fn bytes_in(l: *mut ffi::lua_State) -> c_int {
    meter::charge(l, units_for_bytes(len_at(l, 1)));
    call_wrapped(l)
}

/// `string.sub`: the bytes of the result, after.
unsafe extern "C-unwind" fn bytes_out(l: *mut ffi::lua_State) -> c_int {
    let n = call_wrapped(l);
    meter::charge(l, units_for_bytes(len_at(l, -1)));
    n
}

/// Functions taking any number of arguments (`string.char`, `table.pack`, `utf8.char`):
/// one instruction each, before.
unsafe extern "C-unwind" fn values_in(l: *mut ffi::lua_State) -> c_int {
    meter::charge(l, meter::units_for_values(ffi::lua_gettop(l)));
    call_wrapped(l)
}

/// Functions returning many values (`string.byte`, `table.unpack`, `utf8.codepoint`, at
/// most the stack's limit): one instruction each, after.
unsafe extern "C-unwind" fn values_out(l: *mut ffi::lua_State) -> c_int {
    let n = call_wrapped(l);
    meter::charge(l, meter::units_for_values(n));
    n
}

/// `string.unpack`: the format's bytes before; the values and their bytes after.
unsafe extern "C-unwind" fn unpacked(l: *mut ffi::lua_State) -> c_int {
    meter::charge(l, units_for_bytes(arg_len(l, 1)));
    let n = call_wrapped(l);
    let bytes: u64 = (1..=n).map(|i| len_at(l, -i)).sum();
    meter::charge(l, meter::units_for_values(n).saturating_add(units_for_bytes(bytes)));
    n
}

/// `table.move(a1, f, e, t, [a2])`: the elements to move, before.
unsafe extern "C-unwind" fn move_(l: *mut ffi::lua_State) -> c_int {
    let f = ffi::luaL_checkinteger(l, 2);
    let e = ffi::luaL_checkinteger(l, 3);
    // Past Lua's own checks only (it refuses the rest with its errors).
    if e >= f && (f > 0 || e < ffi::lua_Integer::MAX + f) {
        let n = i128::from(e) - i128::from(f) + 1;
        meter::charge(l, u64::try_from(n).unwrap_or(u64::MAX));
    }
    call_wrapped(l)
}

/// A string position argument as `utf8`'s `u_posrelat` turns it into a 1-based one.
fn utf8_position(pos: ffi::lua_Integer, len: usize) -> i64 {
    if pos >= 0 {
        pos
    } else if pos.unsigned_abs() > len as u64 {
        0
    } else {
        len as i64 + pos + 1
    }
}

/// `utf8.len(s, [i, [j]])`: the bytes it decodes, before.
unsafe extern "C-unwind" fn utf8_len(l: *mut ffi::lua_State) -> c_int {
    let len = arg_len(l, 1) as usize;
    let i = utf8_position(ffi::luaL_optinteger(l, 2, 1), len);
    let j = utf8_position(ffi::luaL_optinteger(l, 3, -1), len);
    let bytes = u64::try_from(j.saturating_sub(i).saturating_add(1)).unwrap_or(0);
    meter::charge(l, bytes / UTF8_BYTES_PER_INSTRUCTION);
    call_wrapped(l)
}

/// `utf8.offset(s, n, [i])`: the bytes it stepped over (to the end when it found
/// nothing), after.
unsafe extern "C-unwind" fn utf8_offset(l: *mut ffi::lua_State) -> c_int {
    let len = arg_len(l, 1) as usize;
    let n = ffi::luaL_checkinteger(l, 2);
    let default = if n >= 0 { 1 } else { len as ffi::lua_Integer + 1 };
    let from = utf8_position(ffi::luaL_optinteger(l, 3, default), len);
    let results = call_wrapped(l);
    let moved = if ffi::lua_isinteger(l, -1) != 0 { ffi::lua_tointegerx(l, -1, std::ptr::null_mut()).abs_diff(from) } else { len as u64 };
    meter::charge(l, moved / UTF8_BYTES_PER_INSTRUCTION);
    results
}

/// Wraps `utf8.codes` so that the iterators it returns are metered too: a step skips any
/// run of continuation bytes, which a caller may make as long as the string.
unsafe fn wrap_codes(l: *mut ffi::lua_State, shared: *mut c_void) {
    ffi::lua_pushlightuserdata(l, shared);
    ffi::lua_getfield(l, -2, c"codes".as_ptr());
    let library_codes = ffi::lua_gettop(l);
    for lax in [false, true] {
        // The library's iterator, from a call on an empty string, wrapped.
        ffi::lua_pushvalue(l, library_codes);
        ffi::lua_pushstring(l, c"".as_ptr());
        ffi::lua_pushboolean(l, c_int::from(lax));
        ffi::lua_call(l, 2, 1);
        ffi::lua_pushlightuserdata(l, shared);
        ffi::lua_insert(l, -2);
        ffi::lua_pushcclosure(l, codes_step, 2);
    }
    ffi::lua_pushcclosure(l, codes, 4);
    ffi::lua_setfield(l, -2, c"codes".as_ptr());
}

/// `utf8.codes(s, [lax])`: Lua's, returning the metered iterator (upvalue 3 strict, 4 lax).
unsafe extern "C-unwind" fn codes(l: *mut ffi::lua_State) -> c_int {
    let lax = ffi::lua_toboolean(l, 2) != 0;
    let n = call_wrapped(l);
    if n == 3 {
        ffi::lua_pushvalue(l, ffi::lua_upvalueindex(if lax { 4 } else { 3 }));
        ffi::lua_replace(l, -4);
    }
    n
}

/// One step of a `utf8.codes` loop: charges the continuation bytes it will skip, then runs
/// Lua's step.
unsafe extern "C-unwind" fn codes_step(l: *mut ffi::lua_State) -> c_int {
    let mut len = 0usize;
    let s = ffi::luaL_checklstring(l, 1, &mut len);
    let bytes = std::slice::from_raw_parts(s.cast::<u8>(), len);
    let from = ffi::lua_tointegerx(l, 2, std::ptr::null_mut()) as u64;
    if let Ok(from) = usize::try_from(from) {
        let skipped = bytes.get(from..).map_or(0, |rest| rest.iter().take_while(|&&b| b & 0xC0 == 0x80).count());
        meter::charge(l, skipped as u64 / UTF8_BYTES_PER_INSTRUCTION);
    }
    call_wrapped(l)
}

/// Checks that argument `arg` is a table, or has the metamethods `what` needs (`checktab`).
unsafe fn check_table(l: *mut ffi::lua_State, arg: c_int, what: c_int) {
    if ffi::lua_type(l, arg) == ffi::LUA_TTABLE {
        return;
    }
    let mut n = 1;
    let mut ok = ffi::lua_getmetatable(l, arg) != 0;
    for (flag, field) in [(TAB_R, c"__index"), (TAB_W, c"__newindex"), (TAB_L, c"__len")] {
        if ok && what & flag != 0 {
            n += 1;
            ffi::lua_pushstring(l, field.as_ptr());
            ok = ffi::lua_rawget(l, -n) != ffi::LUA_TNIL;
        }
    }
    if ok {
        ffi::lua_pop(l, n);
    } else {
        ffi::luaL_checktype(l, arg, ffi::LUA_TTABLE);
    }
}

/// `#t` of a table-like argument (`aux_getn`).
unsafe fn length_of(l: *mut ffi::lua_State, arg: c_int, what: c_int) -> ffi::lua_Integer {
    check_table(l, arg, what | TAB_L);
    ffi::luaL_len(l, arg)
}

/// Raises `msg` with the caller's location, as `luaL_error` does.
unsafe fn error(l: *mut ffi::lua_State, msg: &CStr) -> ! {
    ffi::luaL_where(l, 1);
    ffi::lua_pushstring(l, msg.as_ptr());
    ffi::lua_concat(l, 2);
    ffi::lua_error(l)
}

/// Counts one element operation of a table function; raises once the budget is spent or
/// the call was stopped.
unsafe fn step(l: *mut ffi::lua_State, m: &mut Meter, units: u64) {
    if let Err(stop) = m.add(units) {
        meter::raise(l, meter::shared_of(l), stop);
    }
}

unsafe fn settle(l: *mut ffi::lua_State, m: &mut Meter) {
    if let Err(stop) = m.settle() {
        meter::raise(l, meter::shared_of(l), stop);
    }
}

/// `table.insert(t, [pos,] v)` (`tinsert`), charging each element moved up.
unsafe extern "C-unwind" fn insert(l: *mut ffi::lua_State) -> c_int {
    let e = length_of(l, 1, TAB_RW).wrapping_add(1);
    let pos = match ffi::lua_gettop(l) {
        2 => e,
        3 => {
            let pos = ffi::luaL_checkinteger(l, 2);
            if (pos as u64).wrapping_sub(1) >= e as u64 {
                arg_error(l, 2, c"position out of bounds".as_ptr());
            }
            let mut m = Meter::new(meter::shared_of(l));
            let mut i = e;
            while i > pos {
                step(l, &mut m, 1);
                ffi::lua_geti(l, 1, i - 1);
                ffi::lua_seti(l, 1, i);
                i -= 1;
            }
            settle(l, &mut m);
            pos
        }
        _ => error(l, c"wrong number of arguments to 'insert'"),
    };
    ffi::lua_seti(l, 1, pos);
    0
}

/// `table.remove(t, [pos])` (`tremove`), charging each element moved down.
unsafe extern "C-unwind" fn remove(l: *mut ffi::lua_State) -> c_int {
    let size = length_of(l, 1, TAB_RW);
    let mut pos = ffi::luaL_optinteger(l, 2, size);
    if pos != size && (pos as u64).wrapping_sub(1) > size as u64 {
        arg_error(l, 2, c"position out of bounds".as_ptr());
    }
    ffi::lua_geti(l, 1, pos);
    let mut m = Meter::new(meter::shared_of(l));
    while pos < size {
        step(l, &mut m, 1);
        ffi::lua_geti(l, 1, pos + 1);
        ffi::lua_seti(l, 1, pos);
        pos += 1;
    }
    settle(l, &mut m);
    ffi::lua_pushnil(l);
    ffi::lua_seti(l, 1, pos);
    1
}

/// `table.concat(t, [sep, [i, [j]]])` (`tconcat`), charging each element and its bytes.
unsafe extern "C-unwind" fn concat(l: *mut ffi::lua_State) -> c_int {
    let last = length_of(l, 1, TAB_R);
    let mut sep_len = 0usize;
    let sep = ffi::luaL_optlstring(l, 2, c"".as_ptr(), &mut sep_len);
    let mut i = ffi::luaL_optinteger(l, 3, 1);
    let last = ffi::luaL_optinteger(l, 4, last);
    let mut b: ffi::luaL_Buffer = std::mem::zeroed();
    ffi::luaL_buffinit(l, &mut b);
    let mut m = Meter::new(meter::shared_of(l));
    while i < last {
        add_field(l, &mut m, &mut b, i, sep_len);
        ffi::luaL_addlstring(&mut b, sep, sep_len);
        i += 1;
    }
    if i == last {
        add_field(l, &mut m, &mut b, i, 0);
    }
    settle(l, &mut m);
    ffi::luaL_pushresult(&mut b);
    1
}

/// Adds `t[i]` to `concat`'s buffer (`addfield`), charging it and the `sep_bytes` that
/// follow it.
unsafe fn add_field(l: *mut ffi::lua_State, m: &mut Meter, b: &mut ffi::luaL_Buffer, i: ffi::lua_Integer, sep_bytes: usize) {
    ffi::lua_geti(l, 1, i);
    if ffi::lua_isstring(l, -1) == 0 {
        let type_name = ffi::luaL_typename(l, -1);
        ffi::luaL_where(l, 1);
        ffi::lua_pushfstring(l, c"invalid value (%s) at index %I in table for 'concat'".as_ptr(), type_name, i);
        ffi::lua_concat(l, 2);
        ffi::lua_error(l);
    }
    let mut len = 0usize;
    ffi::lua_tolstring(l, -1, &mut len);
    step(l, m, 1 + units_for_bytes((len + sep_bytes) as u64));
    ffi::luaL_addvalue(b);
}

/// `table.sort(t, [comp])` (ltablib.c's quicksort), charging each element read, written
/// and compared. Pivots are chosen deterministically (see the module comment).
unsafe extern "C-unwind" fn sort(l: *mut ffi::lua_State) -> c_int {
    let n = length_of(l, 1, TAB_RW);
    if n > 1 {
        if n >= ffi::lua_Integer::from(c_int::MAX) {
            arg_error(l, 1, c"array too big".as_ptr());
        }
        if ffi::lua_isnoneornil(l, 2) == 0 {
            ffi::luaL_checktype(l, 2, ffi::LUA_TFUNCTION);
        }
        ffi::lua_settop(l, 2);
        let mut m = Meter::new(meter::shared_of(l));
        aux_sort(l, &mut m, 1, n as u32, 0);
        settle(l, &mut m);
    }
    0
}

unsafe fn get(l: *mut ffi::lua_State, m: &mut Meter, i: u32) {
    step(l, m, 1);
    ffi::lua_geti(l, 1, ffi::lua_Integer::from(i));
}

/// `t[i] = top; t[j] = next` (`set2`).
unsafe fn set2(l: *mut ffi::lua_State, m: &mut Meter, i: u32, j: u32) {
    step(l, m, 2);
    ffi::lua_seti(l, 1, ffi::lua_Integer::from(i));
    ffi::lua_seti(l, 1, ffi::lua_Integer::from(j));
}

/// Whether the value at `a` sorts before the one at `b` (`sort_comp`); comparing strings
/// costs their bytes.
unsafe fn sort_less(l: *mut ffi::lua_State, m: &mut Meter, a: c_int, b: c_int) -> bool {
    if ffi::lua_isnil(l, 2) != 0 {
        step(l, m, 1 + units_for_bytes(len_at(l, a).min(len_at(l, b))));
        return ffi::lua_compare(l, a, b, ffi::LUA_OPLT) != 0;
    }
    step(l, m, 1);
    ffi::lua_pushvalue(l, 2);
    ffi::lua_pushvalue(l, a - 1);
    ffi::lua_pushvalue(l, b - 2);
    ffi::lua_call(l, 2, 1);
    let less = ffi::lua_toboolean(l, -1) != 0;
    ffi::lua_pop(l, 1);
    less
}

/// Partitions `lo..=up` around the pivot on the stack, which is also at `up - 1`
/// (`partition`).
unsafe fn partition(l: *mut ffi::lua_State, m: &mut Meter, lo: u32, up: u32) -> u32 {
    let mut i = lo;
    let mut j = up.wrapping_sub(1);
    loop {
        loop {
            i = i.wrapping_add(1);
            get(l, m, i);
            if !sort_less(l, m, -1, -2) {
                break;
            }
            if i == up.wrapping_sub(1) {
                error(l, c"invalid order function for sorting");
            }
            ffi::lua_pop(l, 1);
        }
        loop {
            j = j.wrapping_sub(1);
            get(l, m, j);
            if !sort_less(l, m, -3, -1) {
                break;
            }
            if j < i {
                error(l, c"invalid order function for sorting");
            }
            ffi::lua_pop(l, 1);
        }
        if j < i {
            ffi::lua_pop(l, 1);
            set2(l, m, up.wrapping_sub(1), i);
            return i;
        }
        set2(l, m, i, j);
    }
}

/// A pivot between the first and last quarters of `lo..=up`, chosen by `rnd` (`choosePivot`).
fn choose_pivot(lo: u32, up: u32, rnd: u32) -> u32 {
    let r4 = (up - lo) / 4;
    rnd % (r4 * 2) + (lo + r4)
}

/// A pivot choice for a badly split interval. Lua draws it from the clock; this one comes
/// from the interval alone, so every run of a call sorts alike.
fn pivot_seed(lo: u32, up: u32) -> u32 {
    (lo.wrapping_mul(0x9E37_79B9) ^ up.rotate_left(16).wrapping_mul(0x85EB_CA6B)) | 1
}

/// Sorts `lo..=up` (`auxsort`), recursing on the smaller part.
unsafe fn aux_sort(l: *mut ffi::lua_State, m: &mut Meter, mut lo: u32, mut up: u32, mut rnd: u32) {
    while lo < up {
        get(l, m, lo);
        get(l, m, up);
        if sort_less(l, m, -1, -2) {
            set2(l, m, lo, up);
        } else {
            ffi::lua_pop(l, 2);
        }
        if up - lo == 1 {
            break;
        }
        // lo + up fits: both are below i32::MAX.
        let mut p = if up - lo < SORT_RANDOM_PIVOT_MIN || rnd == 0 { (lo + up) / 2 } else { choose_pivot(lo, up, rnd) };
        get(l, m, p);
        get(l, m, lo);
        if sort_less(l, m, -2, -1) {
            set2(l, m, p, lo);
        } else {
            ffi::lua_pop(l, 1);
            get(l, m, up);
            if sort_less(l, m, -1, -2) {
                set2(l, m, p, up);
            } else {
                ffi::lua_pop(l, 2);
            }
        }
        if up - lo == 2 {
            break;
        }
        get(l, m, p);
        ffi::lua_pushvalue(l, -1);
        get(l, m, up - 1);
        set2(l, m, p, up - 1);
        p = partition(l, m, lo, up);
        let smaller;
        if p - lo < up - p {
            aux_sort(l, m, lo, p.wrapping_sub(1), rnd);
            smaller = p - lo;
            lo = p + 1;
        } else {
            aux_sort(l, m, p + 1, up, rnd);
            smaller = up - p;
            up = p.wrapping_sub(1);
        }
        if up.wrapping_sub(lo) / 128 > smaller {
            rnd = pivot_seed(lo, up);
        }
    }
}
