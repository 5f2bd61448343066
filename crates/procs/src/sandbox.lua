-- Builds the sandbox procedures run in. Runs once per runtime, in the real global table,
-- which no procedure can reach afterwards. Receives Rust helpers; returns the shared base
-- table (read through by every procedure environment), a function making a fresh
-- procedure environment, and `freeze`, which makes a loaded module's state read-only.
local is_fatal, ctx_random, ctx_field, raw = ...

local G = _G
local error, next, rawget, rawlen, rawset, select, setmetatable, getmetatable, tostring, type =
  error, next, rawget, rawlen, rawset, select, setmetatable, getmetatable, tostring, type
local real_pcall, real_xpcall, real_load, dump = pcall, xpcall, load, G.string.dump

local function deny_global(_, key)
  error("cannot set global '" .. tostring(key) .. "': procedures cannot create or change "
    .. "global variables (declare it local)", 2)
end

-- A read-only view of `real`: reads and pairs() go through, writes fail, and the real table
-- can never be obtained (no metatable access, pairs() hands out only a closure).
local function readonly(name, real)
  local function deny(_, key)
    error("cannot change " .. name .. "." .. tostring(key) .. ": it is read-only", 2)
  end
  return setmetatable({}, {
    __index = real,
    __newindex = deny,
    __metatable = false,
    __len = function() return #real end,
    __pairs = function()
      local key
      return function()
        local value
        key, value = next(real, key)
        return key, value
      end
    end,
  })
end

-- pcall/xpcall that cannot swallow abort(), a failed statement, the instruction budget or
-- running out of memory: those end the transaction whatever the procedure does.
local function pass(ok, ...)
  if not ok and is_fatal((...)) then error((...), 0) end
  return ok, ...
end

-- Module-level tables frozen by `freeze` are proxies: `frozen_real` maps a proxy to the
-- table holding its contents, `proxy_of` the other way. Both are weak (an entry goes with
-- its proxy), and neither is reachable from procedures.
local frozen_real = setmetatable({}, { __mode = "k" })
local proxy_of = setmetatable({}, { __mode = "k" })
-- Everything the sandbox itself made (and the environments it hands out): `freeze` leaves
-- it alone. Weak, so that a dropped procedure's environment can go.
local owned = setmetatable({}, { __mode = "k" })

-- Metatables whose finalizers (__gc) would run outside any hook, so outside the instruction
-- budget and the time limit (Lua disables hooks in finalizers: a looping one would hang the
-- site), and weak tables (__mode), whose contents depend on when the collector ran (a call
-- replayed after a restart could see other contents), are refused. __gc added to a
-- metatable after setmetatable marks nothing (Lua 5.4 marks an object for finalization
-- only in setmetatable), so checking here is enough.
local function check_metatable(mt)
  if rawget(mt, "__gc") ~= nil then
    error("setmetatable: a metatable with __gc (a finalizer) is not allowed in procedures: "
      .. "finalizers run outside the instruction budget; release resources explicitly", 3)
  end
  if rawget(mt, "__mode") ~= nil then
    error("setmetatable: weak tables (__mode) are not allowed in procedures: what they keep "
      .. "depends on when the garbage collector runs, so a call run again could see other "
      .. "contents; use an ordinary table", 3)
  end
end

local base = {}
for _, name in G.ipairs({ "assert", "error", "ipairs", "pairs", "select", "tonumber",
    "tostring", "type", "rawequal", "_VERSION" }) do
  base[name] = G[name]
end
base.print = function() end
base.pcall = function(f, ...) return pass(real_pcall(f, ...)) end
base.xpcall = function(f, handler, ...)
  return pass(real_xpcall(f, function(e)
    if is_fatal(e) then return e end
    return handler(e)
  end, ...))
end
-- A metatable made during a call is copied when set: a field added to it afterwards does
-- not reach the objects already given it. Lua reads __mode from the metatable at every
-- collection, so without the copy `mt.__mode = "k"` after setmetatable would still make a
-- weak table. The copy is kept, and reused while the table has the same fields;
-- getmetatable gives back the table itself. (A module-level table cannot change: it is
-- used as it is.)
local copy_of = setmetatable({}, { __mode = "k" })
local original_of = setmetatable({}, { __mode = "k" })

local function same_fields(a, b)
  local n = 0
  for k, v in next, a do
    if rawget(b, k) ~= v then return false end
    n = n + 1
  end
  for _ in next, b do n = n - 1 end
  return n == 0
end

local function snapshot(mt)
  local copy = copy_of[mt]
  if copy and same_fields(mt, copy) then return copy end
  copy = {}
  for k, v in next, mt do copy[k] = v end
  copy_of[mt], original_of[copy] = copy, mt
  return copy
end

base.setmetatable = function(t, mt)
  if type(mt) == "table" then
    local real = frozen_real[mt]
    if real then
      -- A module-level table used as a metatable: its contents hold the metamethods.
      check_metatable(real)
      mt = real
    else
      check_metatable(mt)
      mt = snapshot(mt)
    end
  end
  return setmetatable(t, mt)
end
base.getmetatable = function(...)
  if select("#", ...) == 0 then
    error("bad argument #1 to 'getmetatable' (value expected)", 2)
  end
  local mt = getmetatable((...))
  return proxy_of[mt] or original_of[mt] or mt
end
-- The raw functions see a frozen table's contents (its proxy holds none).
base.rawget = function(t, k) return rawget(frozen_real[t] or t, k) end
base.rawlen = function(t) return rawlen(frozen_real[t] or t) end
base.next = function(t, k) return next(frozen_real[t] or t, k) end

local env_meta = { __index = base, __newindex = deny_global, __metatable = false }
local function new_env()
  local env = setmetatable({}, env_meta)
  owned[env] = true
  return env
end
local load_env = new_env()
-- Text chunks only (binary chunks can crash the VM), in a sandboxed environment by default.
-- Parsing costs time outside the hooks: it is charged to the budget, by the byte.
base.load = function(chunk, name, _mode, env)
  if type(chunk) == "string" then
    raw.charge_bytes(#chunk)
  elseif type(chunk) == "function" then
    local read = chunk
    chunk = function()
      local piece = read()
      if type(piece) == "string" then raw.charge_bytes(#piece) end
      return piece
    end
  end
  return real_load(chunk, name, "t", env or load_env)
end

local math_safe = {}
for k, v in next, G.math do math_safe[k] = v end
local function no_random()
  error("math.random is not available in procedures: use ctx.random(), which is "
    .. "deterministic per transaction", 2)
end
math_safe.random, math_safe.randomseed = no_random, no_random

base.math = readonly("math", math_safe)
-- string.dump would turn functions into binary chunks; drop it, also from the methods
-- strings reach through their metatable.
local string_safe = {}
for k, v in next, G.string do string_safe[k] = v end
string_safe.dump = nil
base.string = readonly("string", string_safe)
base.table = readonly("table", G.table)
base.utf8 = readonly("utf8", G.utf8)
-- Strings index the string library through their metatable: point it at the safe copy and
-- hide the metatable so getmetatable("").__index cannot reach the copy to change it.
local string_meta = G.getmetatable("")
string_meta.__index = string_safe
string_meta.__metatable = false

-- ctx.txn_id, ctx.timestamp and ctx.partition are the running call's, fetched when read: a
-- call then sets nothing in Lua before it starts.
local ctx_fields = { txn_id = true, timestamp = true, partition = true }
base.ctx = setmetatable({}, {
  __index = function(_, key)
    if key == "random" then return ctx_random end
    if ctx_fields[key] then return ctx_field(key) end
  end,
  __newindex = function(_, key)
    error("cannot change ctx." .. tostring(key) .. ": it is read-only", 2)
  end,
  __metatable = false,
  __len = function() return 0 end,
  __pairs = function()
    local now = { random = ctx_random }
    for key in next, ctx_fields do now[key] = ctx_field(key) end
    return next, now, nil
  end,
})
base._G = readonly("_G", base)

-- {======================================================================================
-- Freezing a module. A call may run more than once (a watched call that ran too long runs
-- again; a replay after a crash runs it again), so it must not change anything but the
-- database: once a module has loaded, what its body can reach is made read-only.
--  * Tables: each table reachable from the body becomes a proxy whose reads, `#`, pairs()
--    and ipairs() go to the original and whose writes fail. Every reference (upvalues,
--    keys and values of other tables) is pointed at the proxy, so identities still agree.
--  * Variables: a function that assigns to a module-level local (an upvalue that outlives
--    the load) is refused, naming the variable and the line (`raw.upvalue_write` reads the
--    compiled function).
-- ======================================================================================}

-- The metamethods a proxy passes on from its table's own metatable. Not __gc or __mode
-- (refused), nor those the proxy implements itself.
local passed_on = {}
for _, e in G.ipairs({ "__add", "__sub", "__mul", "__div", "__mod", "__pow", "__unm",
    "__idiv", "__band", "__bor", "__bxor", "__shl", "__shr", "__bnot", "__concat", "__eq",
    "__lt", "__le", "__call", "__tostring", "__name", "__close" }) do
  passed_on[e] = true
end

local STATE_ADVICE = "module-level state is read-only once the module has loaded (a call "
  .. "may run again, after a restart or in a replay, and must do the same each time): keep "
  .. "changing state in the database"

local function deny_module_write(_, key)
  error("cannot change field '" .. tostring(key) .. "' of a module-level table: "
    .. STATE_ADVICE .. ", or build the table inside the function", 2)
end

-- Calls `visit` on every table and function reachable from `root` through upvalues, table
-- keys, values and metatables, once each, skipping what the sandbox owns.
local function walk(root, visit)
  local seen, stack = {}, {}
  -- Only tables and functions are stacked: the stack stays as small as their count.
  local function push(v)
    local tv = type(v)
    if (tv == "table" or tv == "function") and not seen[v] and not owned[v] then
      seen[v] = true
      stack[#stack + 1] = v
    end
  end
  push(root)
  while stack[1] ~= nil do
    local v = stack[#stack]
    stack[#stack] = nil
    local tv = type(v)
    visit(v, tv)
    if tv == "table" then
      for k, x in next, v do
        push(k)
        push(x)
      end
      push(raw.getmetatable(v))
    elseif raw.function_kind(v) == "lua" then
      local i = 1
      while true do
        local name, x = raw.upvalue(v, i)
        if name == nil then break end
        push(x)
        i = i + 1
      end
    end
  end
end

-- `#` and pairs() of a proxy, shared by all: they find the contents through frozen_real.
local function proxy_len(self) return rawlen(frozen_real[self]) end
local function proxy_next(self, k) return next(frozen_real[self], k) end
local function proxy_pairs(self) return proxy_next, self, nil end

-- The metatable of the proxy of `t`, whose own metatable is `mt` (or nil).
local function proxy_meta(t, mt, proxy)
  local fm = {}
  if mt then
    for k, x in next, mt do
      if passed_on[k] then fm[k] = x end
    end
  end
  local index = mt and rawget(mt, "__index")
  if index == nil then
    fm.__index = t
  else
    -- The table first, then its own __index, called with the proxy (never the table, which
    -- must stay out of reach).
    fm.__index = function(self, k)
      local v = rawget(t, k)
      if v ~= nil then return v end
      if type(index) == "function" then return index(self, k) end
      return index[k]
    end
  end
  fm.__newindex = deny_module_write
  fm.__len = (mt and rawget(mt, "__len")) or proxy_len
  fm.__pairs = (mt and rawget(mt, "__pairs")) or proxy_pairs
  local protect = mt and rawget(mt, "__metatable")
  if protect == nil then
    -- What getmetatable gave for `t` during the load (the table given to setmetatable,
    -- not its copy), as the module now sees it.
    protect = (mt and (proxy[original_of[mt]] or proxy[mt])) or false
  end
  fm.__metatable = protect
  fm[raw.frozen_key] = t
  return fm
end

-- Makes everything `body` reaches read-only (see above); raises an error naming the file
-- and line of anything that cannot be.
local function freeze(body)
  local tables, funcs = {}, {}
  walk(body, function(v, tv)
    if tv == "table" then
      tables[#tables + 1] = v
    else
      local kind = raw.function_kind(v)
      if kind == "lua" then
        funcs[#funcs + 1] = v
      elseif kind == "iterator" then
        error("the module keeps a string.gmatch iterator, which changes as it is called: "
          .. STATE_ADVICE .. ", or call string.gmatch inside the function", 0)
      end
    end
  end)
  for _, f in G.ipairs(funcs) do
    local where, name = raw.upvalue_write(dump(f))
    if where then
      error(where .. ": assigns to '" .. name .. "', a variable of the module's top level: "
        .. STATE_ADVICE .. ", or declare the variable inside the function", 0)
    end
  end
  local proxy = {}
  for _, t in G.ipairs(tables) do proxy[t] = {} end
  for _, f in G.ipairs(funcs) do
    local i = 1
    while true do
      local name, x = raw.upvalue(f, i)
      if name == nil then break end
      local p = proxy[x]
      if p then raw.set_upvalue(f, i, p) end
      i = i + 1
    end
  end
  for _, t in G.ipairs(tables) do
    local rekeyed
    for k, x in next, t do
      if proxy[k] then
        rekeyed = rekeyed or {}
        rekeyed[#rekeyed + 1] = k
      elseif proxy[x] then
        rawset(t, k, proxy[x])
      end
    end
    if rekeyed then
      for _, k in G.ipairs(rekeyed) do
        local x = rawget(t, k)
        rawset(t, k, nil)
        rawset(t, proxy[k], proxy[x] or x)
      end
    end
  end
  for _, t in G.ipairs(tables) do
    local p = proxy[t]
    raw.setmetatable(p, proxy_meta(t, raw.getmetatable(t), proxy))
    frozen_real[p] = t
    proxy_of[t] = p
  end
end

-- What the sandbox made stays as it is: its tables are read-only views already.
walk(base, function(v) owned[v] = true end)
owned[base] = true

return base, new_env, freeze
