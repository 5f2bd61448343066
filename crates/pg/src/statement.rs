//! What one statement sent over the PostgreSQL protocol asks for: SQL for the engine, a
//! procedure call (`CALL P(args)`, `SELECT * FROM P(args)`), a session setting (`SET`,
//! `SHOW`, `RESET`), or a transaction command (`BEGIN`, `COMMIT`, `ROLLBACK`).

use lockstep_core::{value::parse_hex, Error, Value};

use crate::copy::CopyIn;

/// Most arguments a `CALL` may pass, and the highest `$n` (VoltDB's limit on a procedure's
/// parameters).
pub const CALL_ARGS_MAX: usize = 1025;

/// One statement, classified.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    Empty,
    Begin,
    Commit,
    Rollback,
    /// `SET name = value` (None: `RESET name`); `SET TRANSACTION …` and the like have no name.
    Set {
        name: Option<String>,
        value: Option<String>,
    },
    ResetAll,
    Show(String),
    /// A stored procedure; `select` when spelled `SELECT * FROM P(args)`.
    Call {
        procedure: String,
        args: Vec<Arg>,
        select: bool,
    },
    /// `COPY table FROM STDIN`: rows follow in the copy stream.
    Copy(CopyIn),
    /// A query of PostgreSQL's catalog (`pg_catalog.…`): only psql's `\d` ones are answered.
    Catalog(String),
    /// Schema changes, run through the coordinator.
    Ddl(String),
    /// Any other SQL: given to the engine as ad-hoc SQL, `$n` parameters and all.
    Sql(String),
}

/// One argument of a `CALL`: a literal, or the client's parameter `$n` (counted from 1).
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    Value(Value),
    Param(usize),
}

/// What the words of a statement tell: the words upper-cased, as far as classification
/// needs them.
pub fn classify(sql: &str, is_procedure: impl Fn(&str) -> bool) -> Result<Command, Error> {
    let toks = lex(sql)?;
    let word = |i: usize| toks.get(i).and_then(Tok::word);
    let Some(first) = word(0) else {
        return Ok(if toks.is_empty() { Command::Empty } else { Command::Sql(sql.to_string()) });
    };
    let txn_tail_ok = |from: usize| toks[from..].iter().all(|t| t.word().is_some_and(|w| matches!(w.as_str(), "WORK" | "TRANSACTION")));
    Ok(match first.as_str() {
        "BEGIN" | "START" if txn_block_start(&toks) => Command::Begin,
        "COMMIT" | "END" if txn_tail_ok(1) => Command::Commit,
        "ROLLBACK" | "ABORT" if txn_tail_ok(1) => Command::Rollback,
        "SET" => parse_set(sql, &toks),
        "RESET" if word(1).as_deref() == Some("ALL") => Command::ResetAll,
        "RESET" => Command::Set { name: toks.get(1).map(Tok::name), value: None },
        "DISCARD" => Command::ResetAll,
        "SHOW" => Command::Show(show_name(&toks)),
        "CALL" => parse_call(&toks, 1, false)?,
        "COPY" => Command::Copy(parse_copy(&toks)?),
        "SELECT" if is_select_from_procedure(&toks, &is_procedure) => parse_call(&toks, 3, true)?,
        "SELECT" if sql.to_ascii_lowercase().contains("pg_catalog.") => Command::Catalog(sql.to_string()),
        _ if lockstep_sql::is_ddl(sql) => Command::Ddl(sql.to_string()),
        _ => Command::Sql(sql.to_string()),
    })
}

/// `BEGIN [WORK|TRANSACTION] [isolation …]` or `START TRANSACTION …` (the modes are accepted
/// and ignored: every statement runs serializably anyway).
fn txn_block_start(toks: &[Tok]) -> bool {
    match toks.first().and_then(Tok::word).as_deref() {
        Some("START") => toks.get(1).and_then(Tok::word).as_deref() == Some("TRANSACTION"),
        // `BEGIN` of a procedure body never starts a statement.
        Some("BEGIN") => true,
        _ => false,
    }
}

/// The parameter `SHOW` names, lower-cased (`SHOW TRANSACTION ISOLATION LEVEL` is
/// `transaction_isolation`, `SHOW TIME ZONE` is `timezone`).
fn show_name(toks: &[Tok]) -> String {
    let words: Vec<String> = toks[1..].iter().map(Tok::name).collect();
    match words.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["transaction", "isolation", "level"] => "transaction_isolation".into(),
        ["time", "zone"] => "timezone".into(),
        _ => words.concat(),
    }
}

fn parse_set(sql: &str, toks: &[Tok]) -> Command {
    let mut i = 1;
    if toks.get(i).and_then(Tok::word).is_some_and(|w| w == "SESSION" || w == "LOCAL") {
        i += 1;
    }
    let w = toks.get(i).and_then(Tok::word);
    // `SET TRANSACTION …`, `SET SESSION CHARACTERISTICS AS TRANSACTION …`: accepted, no effect.
    if matches!(w.as_deref(), Some("TRANSACTION" | "CHARACTERISTICS")) || w.is_none() {
        return Command::Set { name: None, value: None };
    }
    let (name, mut next) = if w.as_deref() == Some("TIME") && toks.get(i + 1).and_then(Tok::word).as_deref() == Some("ZONE") {
        ("timezone".to_string(), i + 2)
    } else {
        // A dotted name (`a.b`) is one parameter.
        let mut name = toks[i].name();
        let mut j = i + 1;
        while toks.get(j).is_some_and(|t| t.is_punct('.')) && toks.get(j + 1).is_some() {
            name.push('.');
            name.push_str(&toks[j + 1].name());
            j += 2;
        }
        (name, j)
    };
    if toks.get(next).is_some_and(|t| t.is_punct('=') || t.word().as_deref() == Some("TO")) {
        next += 1;
    }
    let value = match toks.get(next..) {
        Some([Tok { kind: Kind::Str(s), .. }]) => s.clone(),
        Some([t, ..]) if t.word().as_deref() == Some("DEFAULT") && toks.len() == next + 1 => {
            return Command::Set { name: Some(name), value: None }
        }
        Some([first, .., last]) => sql[first.start..last.end].to_string(),
        Some([one]) => sql[one.start..one.end].to_string(),
        _ => String::new(),
    };
    Command::Set { name: Some(name), value: Some(value) }
}

/// `SELECT * FROM name(…)` where `name` is a procedure.
fn is_select_from_procedure(toks: &[Tok], is_procedure: impl Fn(&str) -> bool) -> bool {
    toks.len() >= 5
        && toks[1].is_punct('*')
        && toks[2].word().as_deref() == Some("FROM")
        && procedure_name(toks, 3).is_some_and(|(name, after)| toks.get(after).is_some_and(|t| t.is_punct('(')) && is_procedure(&name))
}

/// A procedure's name at `i` (`Name`, `T.insert`, `"Quoted"`): the name and the index after it.
fn procedure_name(toks: &[Tok], mut i: usize) -> Option<(String, usize)> {
    let mut name = toks.get(i)?.ident()?;
    i += 1;
    while toks.get(i).is_some_and(|t| t.is_punct('.')) {
        name.push('.');
        name.push_str(&toks.get(i + 1)?.ident()?);
        i += 2;
    }
    Some((name, i))
}

/// `name(arg, …)` from token `at`: literals and `$n` parameters only.
fn parse_call(toks: &[Tok], at: usize, select: bool) -> Result<Command, Error> {
    let usage = || {
        Error::sql(
            "expected CALL procedure(arguments) with literal arguments (numbers, 'strings', NULL, TRUE, FALSE, X'hex') or $n parameters",
        )
    };
    let (procedure, mut i) = procedure_name(toks, at).ok_or_else(usage)?;
    if !toks.get(i).is_some_and(|t| t.is_punct('(')) {
        return Err(usage());
    }
    i += 1;
    let mut args = Vec::new();
    if toks.get(i).is_some_and(|t| t.is_punct(')')) {
        i += 1;
    } else {
        loop {
            let (arg, next) = parse_arg(toks, i).ok_or_else(usage)?;
            args.push(arg);
            if args.len() > CALL_ARGS_MAX {
                return Err(Error::sql(format!("a CALL may pass at most {CALL_ARGS_MAX} arguments")));
            }
            match toks.get(next) {
                Some(t) if t.is_punct(',') => i = next + 1,
                Some(t) if t.is_punct(')') => {
                    i = next + 1;
                    break;
                }
                _ => return Err(usage()),
            }
        }
    }
    if select {
        i = after_alias(toks, i);
    }
    if i != toks.len() {
        return Err(usage());
    }
    Ok(Command::Call { procedure, args, select })
}

/// Past an alias after `SELECT * FROM P(…)` (`AS result`, `result`), which names nothing
/// Lockstep uses; JDBC writes `{call P(?)}` as `select * from P($1) as result`.
fn after_alias(toks: &[Tok], i: usize) -> usize {
    let start = if toks.get(i).and_then(Tok::word).as_deref() == Some("AS") { i + 1 } else { i };
    if toks.get(start).and_then(Tok::ident).is_some() && start + 1 == toks.len() {
        start + 1
    } else {
        i
    }
}

fn parse_arg(toks: &[Tok], i: usize) -> Option<(Arg, usize)> {
    let t = toks.get(i)?;
    let negative = t.is_punct('-');
    let t = if negative { toks.get(i + 1)? } else { t };
    let next = if negative { i + 2 } else { i + 1 };
    let value = match &t.kind {
        Kind::Number(n) => number(n, negative)?,
        _ if negative => return None,
        Kind::Param(n) => return Some((Arg::Param(*n), next)),
        Kind::Str(s) => Value::Str(s.as_str().into()),
        Kind::Word(w) if w.eq_ignore_ascii_case("NULL") => Value::Null,
        Kind::Word(w) if w.eq_ignore_ascii_case("TRUE") => Value::Bool(true),
        Kind::Word(w) if w.eq_ignore_ascii_case("FALSE") => Value::Bool(false),
        Kind::Word(w) if w.eq_ignore_ascii_case("X") => match toks.get(next) {
            Some(Tok { kind: Kind::Str(hex), start, .. }) if *start == t.end => {
                return Some((Arg::Value(Value::Bytes(parse_hex(hex)?.into())), next + 1))
            }
            _ => return None,
        },
        _ => return None,
    };
    Some((Arg::Value(value), next))
}

/// `COPY name [(columns)] FROM STDIN [[WITH] (options) | legacy options]`.
fn parse_copy(toks: &[Tok]) -> Result<CopyIn, Error> {
    let usage = || Error::sql("expected COPY table [(columns)] FROM STDIN [WITH (FORMAT text|csv, DELIMITER 'c', NULL 'text', HEADER)]");
    let (table, mut i) = procedure_name(toks, 1).ok_or_else(usage)?;
    let mut columns = None;
    if toks.get(i).is_some_and(|t| t.is_punct('(')) {
        let mut names = Vec::new();
        i += 1;
        loop {
            names.push(toks.get(i).and_then(Tok::ident).ok_or_else(usage)?);
            match toks.get(i + 1) {
                Some(t) if t.is_punct(',') => i += 2,
                Some(t) if t.is_punct(')') => break,
                _ => return Err(usage()),
            }
        }
        i += 2;
        columns = Some(names);
    }
    match (toks.get(i).and_then(Tok::word).as_deref(), toks.get(i + 1).and_then(Tok::word).as_deref()) {
        (Some("FROM"), Some("STDIN")) => i += 2,
        (Some("TO"), _) => return Err(Error::sql("COPY … TO is not supported yet: read the rows with SELECT")),
        (Some("FROM"), _) => {
            return Err(Error::sql(
                "COPY FROM a file on the server is not supported: use COPY … FROM STDIN (psql's \\copy sends a local file that way)",
            ))
        }
        _ => return Err(usage()),
    }
    let mut spec = CopyIn::new(table, columns);
    if toks.get(i).and_then(Tok::word).as_deref() == Some("WITH") {
        i += 1;
    }
    let parenthesized = toks.get(i).is_some_and(|t| t.is_punct('('));
    if parenthesized {
        i += 1;
    }
    while let Some(t) = toks.get(i) {
        if t.is_punct(')') && parenthesized {
            i += 1;
            break;
        }
        if t.is_punct(',') {
            i += 1;
            continue;
        }
        let name = t.word().ok_or_else(usage)?;
        i += 1;
        if toks.get(i).and_then(Tok::word).as_deref() == Some("AS") {
            i += 1;
        }
        // The legacy spellings' CSV and HEADER take no value (a word after them is the next option).
        let takes_value = match name.as_str() {
            "CSV" | "BINARY" => false,
            "HEADER" => parenthesized,
            _ => true,
        };
        let value = match toks.get(i).map(|t| &t.kind) {
            Some(Kind::Str(v) | Kind::Word(v)) if takes_value => {
                i += 1;
                Some(v.clone())
            }
            _ => None,
        };
        spec.option(&name, value.as_deref())?;
    }
    if i != toks.len() {
        return Err(usage());
    }
    Ok(spec)
}

/// A number literal (see `types::literal`).
fn number(text: &str, negative: bool) -> Option<Value> {
    let signed = if negative { format!("-{text}") } else { text.to_string() };
    match crate::types::literal(&signed) {
        Value::Str(_) => None,
        v => Some(v),
    }
}

/// The first keyword of a statement that changes data, for the transaction rules.
pub fn writes(sql: &str) -> bool {
    let first = lex(sql).ok().and_then(|t| t.first().and_then(Tok::word));
    matches!(first.as_deref(), Some("INSERT" | "UPSERT" | "UPDATE" | "DELETE" | "TRUNCATE" | "MERGE"))
}

/// The command tag PostgreSQL gives a statement of this kind, from its first words.
pub fn command_tag(sql: &str) -> String {
    let toks = lex(sql).unwrap_or_default();
    let words: Vec<String> = toks.iter().take(4).filter_map(Tok::word).collect();
    let w = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
    match w(0) {
        "CREATE" | "DROP" | "ALTER" => {
            // `CREATE UNIQUE INDEX`, `CREATE OR REPLACE VIEW`: the object is the last word before the name.
            let object = words[1..].iter().map(String::as_str).find(|x| !matches!(*x, "UNIQUE" | "ASSUMEUNIQUE" | "OR" | "REPLACE"));
            format!("{} {}", w(0), object.unwrap_or(""))
        }
        "" => "SELECT".into(),
        other => other.to_string(),
    }
}

/// A token of the small lexer classification needs.
#[derive(Clone, Debug)]
struct Tok {
    kind: Kind,
    start: usize,
    end: usize,
}

#[derive(Clone, Debug, PartialEq)]
enum Kind {
    Word(String),
    QuotedIdent(String),
    Str(String),
    Number(String),
    Param(usize),
    Punct(char),
}

impl Tok {
    /// A bare word, upper-cased.
    fn word(&self) -> Option<String> {
        match &self.kind {
            Kind::Word(w) => Some(w.to_ascii_uppercase()),
            _ => None,
        }
    }
    /// A name as written: a bare word lower-cased, a quoted one as is.
    fn name(&self) -> String {
        match &self.kind {
            Kind::Word(w) => w.to_ascii_lowercase(),
            Kind::QuotedIdent(s) | Kind::Str(s) | Kind::Number(s) => s.clone(),
            Kind::Param(n) => format!("${n}"),
            Kind::Punct(c) => c.to_string(),
        }
    }
    /// An identifier as the catalog spells it (bare words keep their case: procedure
    /// names are looked up ignoring it).
    fn ident(&self) -> Option<String> {
        match &self.kind {
            Kind::Word(w) | Kind::QuotedIdent(w) => Some(w.clone()),
            _ => None,
        }
    }
    fn is_punct(&self, c: char) -> bool {
        self.kind == Kind::Punct(c)
    }
}

/// Splits one statement into tokens, skipping comments.
fn lex(sql: &str) -> Result<Vec<Tok>, Error> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if sql[i..].starts_with("--") {
            i = sql[i..].find('\n').map_or(b.len(), |n| i + n + 1);
            continue;
        }
        if sql[i..].starts_with("/*") {
            i = sql[i + 2..].find("*/").map(|n| i + 2 + n + 2).ok_or_else(|| Error::sql("SQL syntax error: unterminated /* comment"))?;
            continue;
        }
        let kind = if c == b'\'' || c == b'"' {
            let (text, end) = quoted(sql, i, c as char)?;
            i = end;
            if c == b'\'' {
                Kind::Str(text)
            } else {
                Kind::QuotedIdent(text)
            }
        } else if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] >= 0x80) {
                i += 1;
            }
            Kind::Word(sql[start..i].to_string())
        } else if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            i = number_end(b, i);
            Kind::Number(sql[start..i].to_string())
        } else if let Some((body, end)) = dollar_quoted(sql, i) {
            i = end;
            Kind::Str(body)
        } else if c == b'$' && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
            i += 1;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            let bad = || Error::sql(format!("bad parameter {}: parameters are $1 to ${CALL_ARGS_MAX}", &sql[start..i]));
            let n: usize = sql[start + 1..i].parse().map_err(|_| bad())?;
            if n == 0 || n > CALL_ARGS_MAX {
                return Err(bad());
            }
            Kind::Param(n)
        } else {
            let ch = sql[i..].chars().next().unwrap_or(' ');
            i += ch.len_utf8();
            Kind::Punct(ch)
        };
        out.push(Tok { kind, start, end: i });
    }
    Ok(out)
}

/// A `$tag$…$tag$` string at `start` (a procedure's inline Lua source, say): its body and
/// the index past it; None if there is none there.
fn dollar_quoted(sql: &str, start: usize) -> Option<(String, usize)> {
    let rest = sql.get(start..)?.strip_prefix('$')?;
    let tag_len = rest.find('$')?;
    let tag = &rest[..tag_len];
    if !tag.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') || tag.bytes().next().is_some_and(|b| b.is_ascii_digit()) {
        return None;
    }
    let delimiter = &sql[start..start + tag_len + 2];
    let body_start = start + delimiter.len();
    let body_len = sql[body_start..].find(delimiter)?;
    Some((sql[body_start..body_start + body_len].to_string(), body_start + body_len + delimiter.len()))
}

fn number_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
        i += 1;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        if j < b.len() && b[j].is_ascii_digit() {
            i = j;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
        }
    }
    i
}

/// A quoted string or identifier from `start`, with the doubled quote unescaped; its text and the index past it.
fn quoted(sql: &str, start: usize, q: char) -> Result<(String, usize), Error> {
    let mut text = String::new();
    let mut chars = sql[start + 1..].char_indices().peekable();
    while let Some((k, ch)) = chars.next() {
        if ch == q {
            if chars.peek().is_some_and(|&(_, n)| n == q) {
                chars.next();
                text.push(q);
                continue;
            }
            return Ok((text, start + 1 + k + 1));
        }
        text.push(ch);
    }
    Err(Error::sql(format!("SQL syntax error: unterminated {q}quoted{q} text")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_core::decimal;

    fn c(sql: &str) -> Command {
        classify(sql, |name| name.eq_ignore_ascii_case("Vote") || name == "KV.insert").unwrap()
    }

    #[test]
    fn transaction_commands_are_recognised_in_their_spellings() {
        for s in ["BEGIN", "begin work", "START TRANSACTION ISOLATION LEVEL SERIALIZABLE", "BEGIN TRANSACTION"] {
            assert_eq!(c(s), Command::Begin, "{s}");
        }
        for s in ["COMMIT", "end", "commit work"] {
            assert_eq!(c(s), Command::Commit, "{s}");
        }
        for s in ["ROLLBACK", "abort", "rollback transaction"] {
            assert_eq!(c(s), Command::Rollback, "{s}");
        }
    }

    #[test]
    fn set_and_show_take_the_forms_drivers_send() {
        let set = |n: &str, v: &str| Command::Set { name: Some(n.into()), value: Some(v.into()) };
        assert_eq!(c("SET extra_float_digits = 3"), set("extra_float_digits", "3"));
        assert_eq!(c("SET application_name = 'my app'"), set("application_name", "my app"));
        assert_eq!(c("set session DateStyle to ISO, MDY"), set("datestyle", "ISO, MDY"));
        assert_eq!(c("SET TIME ZONE 'UTC'"), set("timezone", "UTC"));
        assert_eq!(
            c("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED"),
            Command::Set { name: None, value: None }
        );
        assert_eq!(c("SET search_path TO DEFAULT"), Command::Set { name: Some("search_path".into()), value: None });
        assert_eq!(c("RESET ALL"), Command::ResetAll);
        assert_eq!(c("SHOW server_version"), Command::Show("server_version".into()));
        assert_eq!(c("show transaction isolation level"), Command::Show("transaction_isolation".into()));
    }

    #[test]
    fn calls_take_literals_and_parameters() {
        assert_eq!(
            c("CALL Vote(5551234567, 'Ohio', -2, 1.5, 1e3, NULL, TRUE, X'0aff', $2)"),
            Command::Call {
                procedure: "Vote".into(),
                args: vec![
                    Arg::Value(Value::Int(5_551_234_567)),
                    Arg::Value(Value::Str("Ohio".into())),
                    Arg::Value(Value::Int(-2)),
                    Arg::Value(Value::Decimal(decimal::parse("1.5").unwrap().into())),
                    Arg::Value(Value::Float(1000.0)),
                    Arg::Value(Value::Null),
                    Arg::Value(Value::Bool(true)),
                    Arg::Value(Value::Bytes(vec![0x0a, 0xff].into())),
                    Arg::Param(2),
                ],
                select: false,
            }
        );
        assert_eq!(c("call KV.insert()"), Command::Call { procedure: "KV.insert".into(), args: vec![], select: false });
        assert_eq!(c("SELECT * FROM vote($1)"), Command::Call { procedure: "vote".into(), args: vec![Arg::Param(1)], select: true });
        let aliased = Command::Call { procedure: "vote".into(), args: vec![Arg::Param(1)], select: true };
        assert_eq!(c("select * from vote($1) as result"), aliased);
        assert_eq!(c("SELECT * FROM vote($1) r"), aliased);
        assert!(classify("SELECT * FROM vote($1) AS", |_| true).is_err());
        assert!(classify("SELECT * FROM vote($1) AS a b", |_| true).is_err());
        assert!(classify("CALL vote($1) AS a", |_| true).is_err());
        // A table function that is not a procedure stays SQL.
        assert!(matches!(c("SELECT * FROM other(1)"), Command::Sql(_)));
        assert!(classify("CALL Vote(1 + 2)", |_| true).is_err());
        assert!(classify("CALL Vote($0)", |_| true).is_err());
        assert!(classify("CALL Vote($99999999999)", |_| true).is_err());
        assert!(classify("CALL Vote($1026)", |_| true).is_err());
        assert!(classify("CALL Vote(1", |_| true).is_err());
    }

    #[test]
    fn copy_takes_its_options_in_both_spellings() {
        let Command::Copy(c1) = c("COPY t (a, \"B\") FROM STDIN WITH (FORMAT csv, HEADER true, NULL 'nil', DELIMITER ';')") else {
            panic!()
        };
        assert_eq!((c1.table.as_str(), c1.columns.clone()), ("t", Some(vec!["a".to_string(), "B".to_string()])));
        assert_eq!((c1.format, c1.header, c1.null.as_str(), c1.delimiter), (crate::copy::Format::Csv, true, "nil", ';'));
        let Command::Copy(c2) = c("copy t from stdin csv header delimiter as '|'") else { panic!() };
        assert_eq!((c2.format, c2.header, c2.delimiter, c2.columns), (crate::copy::Format::Csv, true, '|', None));
        let Command::Copy(c3) = c("COPY t FROM STDIN") else { panic!() };
        assert_eq!((c3.format, c3.delimiter, c3.null.as_str()), (crate::copy::Format::Text, '\t', "\\N"));
        assert!(classify("COPY t TO STDOUT", |_| false).is_err());
        assert!(classify("COPY t FROM '/etc/passwd'", |_| false).is_err());
        assert!(classify("COPY t FROM STDIN (FORMAT binary)", |_| false).is_err());
    }

    #[test]
    fn sql_ddl_and_empty_statements_are_told_apart() {
        assert!(matches!(c("CREATE TABLE t (a INTEGER)"), Command::Ddl(_)));
        assert!(matches!(c("select 1"), Command::Sql(_)));
        let inline = "CREATE PROCEDURE P FROM FILE 'p.lua' SOURCE $lua$ return function() return \"it's\" end $lua$";
        assert_eq!(c(inline), Command::Ddl(inline.into()));
        assert_eq!(
            c("CALL Vote($$a 'b$$, $1)"),
            Command::Call { procedure: "Vote".into(), args: vec![Arg::Value(Value::Str("a 'b".into())), Arg::Param(1)], select: false }
        );
        assert_eq!(c("  -- nothing\n"), Command::Empty);
        assert!(writes("insert into t values (1)") && writes("/* x */ UPSERT INTO t VALUES (1)") && !writes("select 1"));
        assert_eq!(command_tag("create unique index i on t (a)"), "CREATE INDEX");
        assert_eq!(command_tag("DROP TABLE t"), "DROP TABLE");
        assert_eq!(command_tag("partition table t on column a"), "PARTITION");
    }
}
