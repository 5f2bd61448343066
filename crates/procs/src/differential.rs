//! Differential tests: the metered library functions (`pattern.rs`, `libs.rs`) against
//! Lua's own, in two plain Lua states: one with the stock libraries, one with ours
//! installed. Every call must give the same results, or the same error message.

use std::rc::Rc;

use mlua::{Function, Lua, MultiValue, Table, Value as LuaValue};
use proptest::prelude::*;

use crate::errors::lua_message;
use crate::shared::Shared;

/// Calls `_G[lib][name](args...)` from a Lua chunk (not as a tail call, so that errors carry
/// the chunk's location as they would in a procedure) and describes what came back.
const CALLER: &str = r##"
local lib, name, n = ...
local f = _G[lib][name]
local args = {select(4, ...)}
local count, results = (function(...) return select("#", ...), {...} end)(f(table.unpack(args, 1, n)))
return count, results
"##;

/// Collects every match of `string.gmatch(s, p, init)`, up to a bound.
const GMATCH: &str = r#"
local s, p, init = ...
local out = {}
for a, b, c in string.gmatch(s, p, init) do
  out[#out + 1] = tostring(a) .. "|" .. tostring(b) .. "|" .. tostring(c)
  if #out > 200 then break end
end
return table.concat(out, ";")
"#;

struct Pair {
    stock: Lua,
    ours: Lua,
    _shared: Rc<Shared>,
}

fn pair() -> Pair {
    let stock = Lua::new();
    let ours = Lua::new();
    let shared = Rc::new(Shared::new(u64::MAX, 0));
    crate::libs::install(&ours, &shared).unwrap();
    Pair { stock, ours, _shared: shared }
}

fn describe(v: &LuaValue) -> String {
    match v {
        LuaValue::String(s) => format!("{:?}", s.as_bytes().to_vec()),
        LuaValue::Integer(i) => format!("int {i}"),
        LuaValue::Number(f) => format!("num {f:?}"),
        LuaValue::Boolean(b) => format!("{b}"),
        LuaValue::Nil => "nil".into(),
        other => other.type_name().to_string(),
    }
}

/// What one state answers to `lib.name(args)`: its results or its error message.
fn answer(lua: &Lua, lib: &str, name: &str, args: &[LuaValue]) -> String {
    let caller: Function = lua.load(CALLER).set_name("=cmp").into_function().unwrap();
    let mut call_args = MultiValue::new();
    call_args.push_back(LuaValue::String(lua.create_string(lib).unwrap()));
    call_args.push_back(LuaValue::String(lua.create_string(name).unwrap()));
    call_args.push_back(LuaValue::Integer(args.len() as i64));
    for a in args {
        call_args.push_back(a.clone());
    }
    match caller.call::<(i64, Table)>(call_args) {
        Ok((n, results)) => (1..=n).map(|i| describe(&results.raw_get::<LuaValue>(i).unwrap())).collect::<Vec<_>>().join(", "),
        Err(e) => format!("error: {}", lua_message(&e)),
    }
}

/// A value made in `lua` from Lua source (a function or table for gsub's replacement).
fn value(lua: &Lua, src: &str) -> LuaValue {
    lua.load(format!("return {src}")).eval().unwrap()
}

fn bytes(lua: &Lua, b: &[u8]) -> LuaValue {
    LuaValue::String(lua.create_string(b).unwrap())
}

/// Arguments given as Lua source, evaluated in each state.
fn same_answer(p: &Pair, lib: &str, name: &str, args_src: &str) {
    let eval = |lua: &Lua| -> Vec<LuaValue> {
        let list: Table = lua.load(format!("return table.pack({args_src})")).eval().unwrap();
        let n: i64 = list.raw_get("n").unwrap();
        (1..=n).map(|i| list.raw_get(i).unwrap()).collect()
    };
    let stock = answer(&p.stock, lib, name, &eval(&p.stock));
    let ours = answer(&p.ours, lib, name, &eval(&p.ours));
    assert_eq!(ours, stock, "{lib}.{name}({args_src})");
}

fn same_gmatch(p: &Pair, s: &[u8], pat: &[u8], init: Option<i64>) {
    let run = |lua: &Lua| {
        let f: Function = lua.load(GMATCH).set_name("=gm").into_function().unwrap();
        let init = init.map_or(LuaValue::Nil, LuaValue::Integer);
        match f.call::<LuaValue>((bytes(lua, s), bytes(lua, pat), init)) {
            Ok(v) => describe(&v),
            Err(e) => format!("error: {}", lua_message(&e)),
        }
    };
    assert_eq!(run(&p.ours), run(&p.stock), "gmatch({:?}, {:?}, {init:?})", String::from_utf8_lossy(s), String::from_utf8_lossy(pat));
}

/// find, match, gsub (with a string, a table and a function) and gmatch of one case.
fn same_everywhere(p: &Pair, s: &[u8], pat: &[u8], init: Option<i64>) {
    for name in ["find", "match"] {
        for plain in [None, Some(true)] {
            let args = |lua: &Lua| {
                let mut a = vec![bytes(lua, s), bytes(lua, pat)];
                if init.is_some() || plain.is_some() {
                    a.push(init.map_or(LuaValue::Nil, LuaValue::Integer));
                }
                if let Some(plain) = plain {
                    a.push(LuaValue::Boolean(plain));
                }
                a
            };
            let stock = answer(&p.stock, "string", name, &args(&p.stock));
            let ours = answer(&p.ours, "string", name, &args(&p.ours));
            assert_eq!(ours, stock, "{name}({:?}, {:?}, {init:?}, {plain:?})", String::from_utf8_lossy(s), String::from_utf8_lossy(pat));
        }
    }
    for repl in [
        "'<%0|%1>'",
        "'x%%y'",
        "{a = 'A', b = false}",
        "function(a, b) if a == 'a' then return nil end return tostring(a) .. tostring(b) end",
    ] {
        for max in [None, Some(1)] {
            let args = |lua: &Lua| {
                let mut a = vec![bytes(lua, s), bytes(lua, pat), value(lua, repl)];
                if let Some(m) = max {
                    a.push(LuaValue::Integer(m));
                }
                a
            };
            let stock = answer(&p.stock, "string", "gsub", &args(&p.stock));
            let ours = answer(&p.ours, "string", "gsub", &args(&p.ours));
            assert_eq!(ours, stock, "gsub({:?}, {:?}, {repl}, {max:?})", String::from_utf8_lossy(s), String::from_utf8_lossy(pat));
        }
    }
    same_gmatch(p, s, pat, init);
}

#[test]
fn patterns_match_as_lua_matches_them() {
    let p = pair();
    let subjects: &[&[u8]] = &[
        b"",
        b"hello world",
        b"  key = value ; other=2  ",
        b"THE (quick) fox [jumps] over {the} lazy dog",
        b"a,b,,c,",
        b"f(a(b)c)d((e)",
        b"THE_(quick)%fox\0with\tcontrol\x7f\xffbytes",
        b"aaaaaaaaab",
        b"0x1F 077 -12.5e3 \x0b\x0c\r\n",
        b"abcabcabc",
    ];
    let patterns: &[&[u8]] = &[
        b"",
        b".",
        b"o",
        b"world",
        b"^hello",
        b"world$",
        b"^$",
        b"$",
        b"l+",
        b"l*",
        b"l-",
        b"l?o",
        b"x*",
        b"%a+",
        b"%A+",
        b"%c",
        b"%C+",
        b"%d+",
        b"%D",
        b"%g+",
        b"%G",
        b"%l+",
        b"%L",
        b"%p+",
        b"%P",
        b"%s+",
        b"%S+",
        b"%u+",
        b"%U",
        b"%w+",
        b"%W",
        b"%x+",
        b"%X",
        b"%z",
        b"%Z",
        b"%.",
        b"%%",
        b"[aeiou]+",
        b"[^aeiou ]+",
        b"[a-f]+",
        b"[%a_]+",
        b"[]]",
        b"[^]]+",
        b"[a-]",
        b"[-a]",
        b"[%]]",
        b"[%d%.eE+-]+",
        b"(%w+)%s*=%s*(%w+)",
        b"()ll()",
        b"(h)(e)(l)(l)(o)",
        b"((a)(b))",
        b"%b()",
        b"%b[]",
        b"%b{}",
        b"%f[%a]%a+",
        b"%f[%A]",
        b"%f[%z]",
        b"(a+)%1",
        b"(.)%1",
        b"([abc])(.-)%1",
        b"^(%s*)(.-)(%s*)$",
        b"(.-),",
        b"[^,]*",
        b"a-b",
        b".-b",
        b"(a*(.)%w(%s*))",
        b"%",
        b"[a",
        b"[",
        b"[^",
        b"%b",
        b"%b(",
        b"%f",
        b"%fa",
        b"(",
        b"(()",
        b")",
        b"a)",
        b"%1",
        b"(a)%2",
        b"%0",
        b"(a%1)",
        b"x%9",
        b"[%",
        b"[a-%",
        b"%g%",
        b"^(.-)$",
        b"\0",
        b"%z+",
        b"[\0-\x1f]+",
        b"[\x80-\xff]",
        b"^^",
        b"$$",
        b"a$b",
        b"%$",
        b"%^",
    ];
    for s in subjects {
        for pat in patterns {
            same_everywhere(&p, s, pat, None);
        }
        for init in [-100, -3, -1, 0, 1, 2, 5, 40, 1000] {
            for pat in [&b"o"[..], b"l+", b"^.", b"()", b"", b"%a"] {
                same_everywhere(&p, s, pat, Some(init));
            }
        }
    }
}

#[test]
fn limits_and_argument_errors_match_lua() {
    let p = pair();
    for (name, args) in [
        ("find", "string.rep('a', 40), string.rep('(a)', 33)"),
        ("match", "string.rep('a', 40), string.rep('(a)', 32)"),
        ("find", "string.rep('a', 300), string.rep('a?', 300) .. string.rep('a', 300)"),
        ("match", "string.rep('x', 250), string.rep('(x', 10) .. string.rep(')', 10)"),
        ("find", ""),
        ("find", "'a'"),
        ("find", "nil, 'a'"),
        ("find", "{}, 'a'"),
        ("find", "12345, 3"),
        ("find", "'abc', 'b', 'x'"),
        ("find", "'abc', 'b', 1.5"),
        ("match", "'abc', '(b)', math.mininteger"),
        ("find", "'a.b', '.', 1, true"),
        ("find", "'a.b', '.', 1, false"),
        ("gmatch", "nil, 'a'"),
        ("gsub", "'abc', 'b'"),
        ("gsub", "'abc', 'b', true"),
        ("gsub", "'abc', 'b', 1.5"),
        ("gsub", "'abc', 'b', 7"),
        ("gsub", "'abc', 'b', '%'"),
        ("gsub", "'abc', 'b', '%2'"),
        ("gsub", "'abc', '(b)', '%2'"),
        ("gsub", "'abc', '(b)', '%x'"),
        ("gsub", "'abc', '()b', '[%1]'"),
        ("gsub", "'abc', '(b', '%1'"),
        ("gsub", "'abc', 'b', {b = {}}"),
        ("gsub", "'abc', 'b', function() return {} end"),
        ("gsub", "'abc', 'b', function() return 12 end"),
        ("gsub", "'abc', '', '-'"),
        ("gsub", "'abc', '', '-', -1"),
        ("gsub", "'abc', '^', '-'"),
        ("gsub", "'hello world', '%w+', '%0 %0', 1"),
        ("gsub", "'abc', 'b', '%1'"),
        ("gsub", "'abc', 'b', setmetatable({}, {__index = function(_, k) return k:upper() end})"),
        ("gsub", "'abc', '.', {a = 1, b = 2.5}"),
    ] {
        same_answer(&p, "string", name, args);
    }
}

/// The other metered functions behave as Lua's.
#[test]
fn metered_library_functions_answer_as_lua_does() {
    let p = pair();
    for (lib, name, args) in [
        ("string", "rep", "'ab', 3, ','"),
        ("string", "rep", "'ab', 0"),
        ("string", "rep", "'ab', -1"),
        ("string", "rep", "''"),
        ("string", "rep", "'x', 1e100"),
        ("string", "rep", "'xy', math.maxinteger"),
        ("string", "format", "'%d %s %q %5.2f', 3, 'x', 'a\\nb', 1.5"),
        ("string", "format", "'%d', 'x'"),
        ("string", "byte", "'hello', 1, -1"),
        ("string", "byte", "'hello', 10"),
        ("string", "char", "104, 105"),
        ("string", "char", "256"),
        ("string", "upper", "'MiXeD 123'"),
        ("string", "lower", "nil"),
        ("string", "reverse", "'abc'"),
        ("string", "sub", "'hello', 2, -2"),
        ("string", "pack", "'>i4s1', 7, 'ab'"),
        ("string", "packsize", "'i4i8'"),
        ("string", "packsize", "'s'"),
        ("string", "unpack", "'>i4s1z', string.pack('>i4s1z', 7, 'ab', 'cd')"),
        ("string", "unpack", "'z', 'abc'"),
        ("table", "concat", "{1, 'b', 3.5}, ', '"),
        ("table", "concat", "{1, 2, 3}, '-', 2, 3"),
        ("table", "concat", "{1, {}, 3}"),
        ("table", "concat", "{}, 'x', 1, 0"),
        ("table", "concat", "nil"),
        ("table", "concat", "setmetatable({}, {__index = function(_, i) return i * 2 end, __len = function() return 3 end})"),
        ("table", "insert", "{1, 2, 3}, 1, 'x'"),
        ("table", "insert", "{1, 2, 3}, 5, 'x'"),
        ("table", "insert", "{1, 2, 3}"),
        ("table", "insert", "{1, 2}, 1, 2, 3"),
        ("table", "insert", "nil, 1"),
        ("table", "remove", "{1, 2, 3}, 1"),
        ("table", "remove", "{1, 2, 3}"),
        ("table", "remove", "{}"),
        ("table", "remove", "{1, 2, 3}, 7"),
        ("table", "move", "{1, 2, 3}, 1, 3, 2"),
        ("table", "move", "{1, 2, 3}, 1, math.maxinteger, 2"),
        ("table", "pack", "1, nil, 3"),
        ("table", "unpack", "{1, 2, 3}, 2"),
        ("table", "unpack", "{}, 1, 1e8"),
        ("utf8", "char", "72, 228, 8364, 128512"),
        ("utf8", "codepoint", "'häll€', 1, -1"),
        ("utf8", "codepoint", "'\\xff'"),
        ("utf8", "len", "'häll€'"),
        ("utf8", "len", "'h\\xffa'"),
        ("utf8", "len", "'abc', 5"),
        ("utf8", "offset", "'häll€', 3"),
        ("utf8", "offset", "'häll€', -1"),
        ("utf8", "offset", "'häll€', 10"),
        ("utf8", "offset", "'häll€', 1, 3"),
        ("_G", "tonumber", "' 0x1F '"),
        ("_G", "tonumber", "'z', 36"),
        ("_G", "tonumber", "'12', 99"),
    ] {
        same_answer(&p, lib, name, args);
    }
    // The table functions change their table as Lua's do.
    for code in [
        "local t = {5, 2, 8, 1, 9, 3} table.sort(t) return table.concat(t, ',')",
        "local t = {5, 2, 8, 1, 9, 3} table.sort(t, function(a, b) return a > b end) return table.concat(t, ',')",
        "local t = {'b', 'a', 'c', 'a'} table.sort(t) return table.concat(t, ',')",
        "local t = {} for i = 1, 90 do t[i] = {k = i % 7, id = i} end table.sort(t, function(a, b) return a.k < b.k end) local o = {} for i, v in ipairs(t) do o[i] = v.id end return table.concat(o, ',')",
        "local t = {3, 1, 2} return pcall(table.sort, t, function(a, b) return true end)",
        "local t = {3, 'a', 2} return pcall(table.sort, t)",
        "return pcall(table.sort, {1, 2}, 3)",
        "local t = {1, 2, 3, 4} table.insert(t, 2, 'x') table.remove(t, 1) table.remove(t) return table.concat(t, ',')",
        "local t = {} for c in utf8.codes('häll€') do t[#t + 1] = c end return table.concat(t, ',')",
        "local t = {} for p, c in utf8.codes('ab', true) do t[#t + 1] = p .. ':' .. c end return table.concat(t, ',')",
        "return pcall(function() for p, c in utf8.codes('a\\xffb') do end end)",
    ] {
        let run = |lua: &Lua| match lua.load(code).set_name("=t").eval::<MultiValue>() {
            Ok(v) => v.iter().map(describe).collect::<Vec<_>>().join(", "),
            Err(e) => format!("error: {}", lua_message(&e)),
        };
        assert_eq!(run(&p.ours), run(&p.stock), "{code}");
    }
}

/// Pattern pieces random patterns are built from: single characters of the subject's
/// alphabet, classes, sets, captures, anchors and quantifiers, including malformed ones.
fn token() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "a", "b", "c", ".", "%a", "%d", "%s", "%w", "%p", "%A", "[ab]", "[^a]", "[a-c]", "[%d]", "(", ")", "()", "%1", "%2", "*", "+", "-",
        "?", "^", "$", "%b()", "%f[%a]", "%", "[", "]", "1", " ", "(a", "%bab",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, .. ProptestConfig::default() })]

    #[test]
    fn random_patterns_match_as_lua_matches_them(
        subject in prop::collection::vec(prop::sample::select(b"abc1 ()[]%.".to_vec()), 0..12),
        tokens in prop::collection::vec(token(), 0..7),
        init in prop::option::of(-14i64..14),
    ) {
        thread_local! {
            static PAIR: Pair = pair();
        }
        let pat: String = tokens.concat();
        PAIR.with(|p| same_everywhere(p, &subject, pat.as_bytes(), init));
    }
}
