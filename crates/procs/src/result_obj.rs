//! The result object procedures see (from `stmt:query`, `batch` and `result_table`): a full
//! userdata owning a Rust `ResultTable`, made and read with the Lua C API.
//!
//! An mlua userdata cost about 1,500 instructions to make (callgrind), more than the point
//! read behind it. This one is a block holding one pointer, to a boxed `Held`, with a
//! metatable kept in the registry: `#res`, `res[i]`, `res:rows()` and `res:columns()` are
//! C functions, and `__gc` frees the box. Taking the table for the call's output leaves the
//! pointer null; a later use of the object is an error.
//!
//! `Shared::results` holds the address of every object that still holds its table, so the
//! output tells a returned result from any other userdata by its address alone.
//!
//! The rules of `raw_stmt.rs` hold here: a function that can raise a Lua error owns
//! nothing, and rows are built under `lua_pcall`.

use std::cell::OnceCell;
use std::ffi::{c_int, c_void, CStr};
use std::rc::Rc;
use std::sync::Arc;

use lockstep_core::ResultTable;
use mlua::{ffi, AnyUserData, Lua};

use crate::raw_stmt::{push_protected, push_row, Keys};
use crate::shared::{Fatal, LiveResults, Shared};

/// What a result object owns.
pub(crate) struct Held {
    table: ResultTable,
    /// Lower-case column names, made on first row access.
    keys: OnceCell<Vec<(Arc<str>, Box<[u8]>)>>,
    /// The set this object's address is in while it holds its table.
    live: Rc<LiveResults>,
}

#[cfg(test)]
thread_local! {
    /// Result objects alive on this thread (tests check that `__gc` frees them).
    pub(crate) static HELD_COUNT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
impl Drop for Held {
    fn drop(&mut self) {
        HELD_COUNT.with(|n| n.set(n.get() - 1));
    }
}

impl Held {
    pub(crate) fn new(table: ResultTable, shared: &Shared) -> Box<Held> {
        #[cfg(test)]
        HELD_COUNT.with(|n| n.set(n.get() + 1));
        Box::new(Held { table, keys: OnceCell::new(), live: shared.results.clone() })
    }

    fn keys(&self) -> &Keys {
        self.keys.get_or_init(|| {
            let lower = |name: &str| name.to_ascii_lowercase().into_bytes().into_boxed_slice();
            self.table.columns.iter().map(|c| (c.name.clone(), lower(&c.name))).collect()
        })
    }
}

/// Registry keys (their addresses; one static serves every Lua state): the metatable, and
/// a light pointer to the runtime's `Shared`.
static META_KEY: u8 = 0;
static SHARED_KEY: u8 = 0;

fn meta_key() -> *const c_void {
    std::ptr::addr_of!(META_KEY).cast()
}

/// The runtime's `Shared`, for C functions. Lua code runs only inside the runtime's calls
/// and loads, and the runtime owns its `Shared` throughout.
pub(crate) unsafe fn shared<'a>(l: *mut ffi::lua_State) -> Option<&'a Shared> {
    ffi::lua_rawgetp(l, ffi::LUA_REGISTRYINDEX, std::ptr::addr_of!(SHARED_KEY).cast());
    let p = ffi::lua_touserdata(l, -1).cast_const().cast::<Shared>();
    ffi::lua_pop(l, 1);
    p.as_ref()
}

const NAME: &CStr = c"result";

/// Makes the metatable of result objects and keeps the pointer to `shared`; once per Lua
/// state, before any result is made.
pub(crate) fn register(lua: &Lua, shared: &Rc<Shared>) -> mlua::Result<()> {
    let shared = Rc::as_ptr(shared).cast_mut().cast::<c_void>();
    // SAFETY: pushes and sets only; a memory error unwinds into exec_raw's protected call.
    unsafe {
        lua.exec_raw::<()>((), |l| {
            ffi::lua_pushlightuserdata(l, shared);
            ffi::lua_rawsetp(l, ffi::LUA_REGISTRYINDEX, std::ptr::addr_of!(SHARED_KEY).cast());
            ffi::lua_createtable(l, 0, 5);
            ffi::lua_pushcfunction(l, index);
            ffi::lua_setfield(l, -2, c"__index".as_ptr());
            ffi::lua_pushcfunction(l, len);
            ffi::lua_setfield(l, -2, c"__len".as_ptr());
            ffi::lua_pushcfunction(l, gc);
            ffi::lua_setfield(l, -2, c"__gc".as_ptr());
            // Lua's own errors name the type; `__metatable` hides the metatable.
            ffi::lua_pushstring(l, NAME.as_ptr());
            ffi::lua_setfield(l, -2, c"__name".as_ptr());
            ffi::lua_pushstring(l, NAME.as_ptr());
            ffi::lua_setfield(l, -2, c"__metatable".as_ptr());
            ffi::lua_rawsetp(l, ffi::LUA_REGISTRYINDEX, meta_key());
        })
    }
}

/// A result object owning `held`, made from Rust.
pub(crate) fn make(lua: &Lua, held: Box<Held>) -> mlua::Result<AnyUserData> {
    let mut slot = Some(held);
    // SAFETY: `push_new` raises only before it moves `slot`'s box, and `slot` lives here.
    unsafe { lua.exec_raw::<AnyUserData>((), |l| push_new(l, &mut slot)) }
}

/// Pushes a result object owning `slot`'s box, made from a C function: under `lua_pcall`,
/// so running out of memory comes back as a status (the box then stays in `slot`).
pub(crate) unsafe fn push_made(l: *mut ffi::lua_State, slot: &mut Option<Box<Held>>) -> c_int {
    ffi::lua_pushcfunction(l, push_job);
    ffi::lua_pushlightuserdata(l, (slot as *mut Option<Box<Held>>).cast());
    ffi::lua_pcall(l, 1, 1, 0)
}

unsafe extern "C-unwind" fn push_job(l: *mut ffi::lua_State) -> c_int {
    let slot = &mut *ffi::lua_touserdata(l, 1).cast::<Option<Box<Held>>>();
    push_new(l, slot);
    1
}

/// Pushes a new result object and moves `slot`'s box into it. Only the allocation raises,
/// before the box is moved.
unsafe fn push_new(l: *mut ffi::lua_State, slot: &mut Option<Box<Held>>) {
    let block = ffi::lua_newuserdatauv(l, std::mem::size_of::<*mut Held>(), 0).cast::<*mut Held>();
    block.write(std::ptr::null_mut());
    ffi::lua_rawgetp(l, ffi::LUA_REGISTRYINDEX, meta_key());
    ffi::lua_setmetatable(l, -2);
    if let Some(held) = slot.take() {
        held.live.borrow_mut().insert(block as usize);
        block.write(Box::into_raw(held));
    }
}

/// Takes the box out of a result object's block, and its address out of the set.
unsafe fn take_held(block: *mut *mut Held) -> Option<Box<Held>> {
    let held = std::ptr::replace(block, std::ptr::null_mut());
    if held.is_null() {
        return None;
    }
    let held = Box::from_raw(held);
    held.live.borrow_mut().remove(&(block as usize));
    Some(held)
}

/// The pointer slot of the result object at `idx`, if it is one. Never raises.
unsafe fn slot_at(l: *mut ffi::lua_State, idx: c_int) -> Option<*mut *mut Held> {
    if ffi::lua_type(l, idx) != ffi::LUA_TUSERDATA || ffi::lua_getmetatable(l, idx) == 0 {
        return None;
    }
    ffi::lua_rawgetp(l, ffi::LUA_REGISTRYINDEX, meta_key());
    let ours = ffi::lua_rawequal(l, -1, -2) != 0;
    ffi::lua_pop(l, 2);
    ours.then(|| ffi::lua_touserdata(l, idx).cast::<*mut Held>())
}

/// The table of the result object at `idx`: None when it is not one, Some(None) when its
/// table was already taken.
unsafe fn held_at<'a>(l: *mut ffi::lua_State, idx: c_int) -> Option<Option<&'a Held>> {
    slot_at(l, idx).map(|slot| (*slot).cast_const().as_ref())
}

/// Whether `block` is the block of a result object that still holds its table.
pub(crate) fn is_live(shared: &Shared, block: *mut c_void) -> bool {
    shared.results.borrow().contains(&(block as usize))
}

/// Moves the table out of the result object whose block is `block`, which `is_live` said
/// still holds one.
pub(crate) unsafe fn take_live(block: *mut c_void) -> Option<ResultTable> {
    take_held(block.cast::<*mut Held>()).map(|mut held| std::mem::take(&mut held.table))
}

/// What the call's output makes of a returned userdata.
pub(crate) enum Taken {
    NotAResult,
    Table(ResultTable),
    /// A result whose table an earlier call already returned.
    Gone,
}

/// Moves the table out of the result object `ud` (for the call's output).
pub(crate) fn take(shared: &Shared, ud: &AnyUserData) -> Taken {
    let block = ud.to_pointer().cast_mut();
    if !is_live(shared, block) {
        // Every userdata of mlua's has a type; a result object has none.
        return match ud.type_id() {
            None => Taken::Gone,
            Some(_) => Taken::NotAResult,
        };
    }
    // SAFETY: the address is that of a live result object's block (see `Shared::results`),
    // and `to_pointer` gives a userdata's block.
    match unsafe { take_live(block) } {
        Some(table) => Taken::Table(table),
        None => Taken::Gone,
    }
}

/// What a metamethod does once its inner part has returned (owning nothing from then on).
enum Next {
    Return(c_int),
    /// Raise the error message.
    Fail(&'static CStr),
    /// Raise: the real error (out of memory) is recorded as the call's fatal error.
    Raise,
}

unsafe fn finish(l: *mut ffi::lua_State, next: Next) -> c_int {
    match next {
        Next::Return(n) => n,
        Next::Fail(msg) => {
            ffi::lua_pushstring(l, msg.as_ptr());
            ffi::lua_error(l)
        }
        Next::Raise => {
            ffi::lua_pushnil(l);
            ffi::lua_error(l)
        }
    }
}

const TAKEN: &CStr = c"this result was already returned by an earlier call";
const NOT_A_RESULT: &CStr = c"expected a result";

/// The held table of argument `idx`, or why not.
unsafe fn arg<'a>(l: *mut ffi::lua_State, idx: c_int) -> Result<&'a Held, Next> {
    match held_at(l, idx) {
        Some(Some(held)) => Ok(held),
        Some(None) => Err(Next::Fail(TAKEN)),
        None => Err(Next::Fail(NOT_A_RESULT)),
    }
}

/// Pushes row `i` (0-based) of `held` as a table, or nil past the end.
unsafe fn push_row_at(l: *mut ffi::lua_State, held: &Held, i: usize) -> Next {
    let Some(row) = held.table.rows.get(i) else {
        ffi::lua_pushnil(l);
        return Next::Return(1);
    };
    match push_protected(l, push_row, row, held.keys(), 1) {
        Ok(n) => Next::Return(n),
        Err(_) => {
            ffi::lua_pop(l, 1);
            if let Some(shared) = shared(l) {
                shared.set_fatal(Fatal::Memory);
            }
            Next::Raise
        }
    }
}

/// `res[i]`: row `i` (1-based); `res.rows` and `res.columns`: the methods.
unsafe extern "C-unwind" fn index(l: *mut ffi::lua_State) -> c_int {
    let next = index_inner(l);
    finish(l, next)
}

unsafe fn index_inner(l: *mut ffi::lua_State) -> Next {
    let held = match arg(l, 1) {
        Ok(h) => h,
        Err(next) => return next,
    };
    if ffi::lua_type(l, 2) == ffi::LUA_TNUMBER && ffi::lua_isinteger(l, 2) != 0 {
        let i = ffi::lua_tointegerx(l, 2, std::ptr::null_mut());
        if i < 1 {
            ffi::lua_pushnil(l);
            return Next::Return(1);
        }
        return push_row_at(l, held, (i - 1) as usize);
    }
    let method: Option<ffi::lua_CFunction> = match string_arg(l, 2) {
        Some(b"rows") => Some(rows),
        Some(b"columns") => Some(columns),
        _ => None,
    };
    match method {
        Some(f) => ffi::lua_pushcfunction(l, f),
        None => ffi::lua_pushnil(l),
    }
    Next::Return(1)
}

unsafe fn string_arg<'a>(l: *mut ffi::lua_State, idx: c_int) -> Option<&'a [u8]> {
    if ffi::lua_type(l, idx) != ffi::LUA_TSTRING {
        return None;
    }
    let mut n = 0usize;
    let p = ffi::lua_tolstring(l, idx, &mut n);
    (!p.is_null()).then(|| std::slice::from_raw_parts(p.cast::<u8>(), n))
}

/// `#res`: the row count.
unsafe extern "C-unwind" fn len(l: *mut ffi::lua_State) -> c_int {
    let next = match arg(l, 1) {
        Ok(held) => {
            ffi::lua_pushinteger(l, held.table.rows.len() as ffi::lua_Integer);
            Next::Return(1)
        }
        Err(next) => next,
    };
    finish(l, next)
}

/// `res:columns()`: the lower-case column names, in order.
unsafe extern "C-unwind" fn columns(l: *mut ffi::lua_State) -> c_int {
    let held = match arg(l, 1) {
        Ok(held) => held,
        Err(next) => return finish(l, next),
    };
    // Raising here (out of memory) is safe: this frame owns nothing.
    let keys = held.keys();
    ffi::lua_createtable(l, keys.len().min(c_int::MAX as usize) as c_int, 0);
    for (i, (_, key)) in keys.iter().enumerate() {
        ffi::lua_pushlstring(l, key.as_ptr().cast(), key.len());
        ffi::lua_rawseti(l, -2, i as ffi::lua_Integer + 1);
    }
    1
}

/// `res:rows()`: an iterator over the rows; it holds the result, which lives as long as
/// the loop.
unsafe extern "C-unwind" fn rows(l: *mut ffi::lua_State) -> c_int {
    if let Err(next) = arg(l, 1) {
        return finish(l, next);
    }
    ffi::lua_pushvalue(l, 1);
    ffi::lua_pushinteger(l, 0);
    ffi::lua_pushcclosure(l, next_row, 2);
    1
}

/// The iterator of `rows`: upvalue 1 is the result, upvalue 2 the rows already given.
unsafe extern "C-unwind" fn next_row(l: *mut ffi::lua_State) -> c_int {
    let next = next_row_inner(l);
    finish(l, next)
}

unsafe fn next_row_inner(l: *mut ffi::lua_State) -> Next {
    let held = match arg(l, ffi::lua_upvalueindex(1)) {
        Ok(h) => h,
        Err(next) => return next,
    };
    let given = ffi::lua_tointegerx(l, ffi::lua_upvalueindex(2), std::ptr::null_mut()).max(0);
    ffi::lua_pushinteger(l, given + 1);
    ffi::lua_replace(l, ffi::lua_upvalueindex(2));
    push_row_at(l, held, given as usize)
}

/// `__gc`: frees the table (unless the output took it).
unsafe extern "C-unwind" fn gc(l: *mut ffi::lua_State) -> c_int {
    if let Some(block) = slot_at(l, 1) {
        drop(take_held(block));
    }
    0
}
