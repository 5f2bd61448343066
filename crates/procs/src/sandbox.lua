-- Builds the sandbox procedures run in. Runs once per runtime, in the real global table,
-- which no procedure can reach afterwards. Receives Rust helpers; returns the shared base
-- table (read through by every procedure environment) and a function making a fresh
-- procedure environment.
local is_fatal, ctx_random, ctx_field = ...

local G = _G
local error, next, setmetatable, tostring, type = error, next, setmetatable, tostring, type
local real_pcall, real_xpcall, real_load = pcall, xpcall, load

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

local base = {}
for _, name in G.ipairs({ "assert", "error", "ipairs", "next", "pairs", "select", "tonumber",
    "tostring", "type", "rawequal", "rawget", "rawlen", "setmetatable", "getmetatable",
    "_VERSION" }) do
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

local env_meta = { __index = base, __newindex = deny_global, __metatable = false }
local function new_env() return setmetatable({}, env_meta) end
local load_env = new_env()
-- Text chunks only (binary chunks can crash the VM), in a sandboxed environment by default.
base.load = function(chunk, name, _mode, env)
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

return base, new_env
