//! The few `pg_catalog` queries `psql` sends for `\d`, `\dt`, `\dv`, `\dm`, `\d NAME`,
//! `\df` and `\dn`, answered from Lockstep's catalog. They are recognized by their shape
//! (psql 15's text), not run: Lockstep has no `pg_catalog` tables to run them against.

use std::sync::Arc;

use lockstep_core::{Catalog, DataType, ProcedureBody, ResultColumn, TableDef, TableKind, Value};

/// The object ids given to tables: Lockstep's table id plus this (PostgreSQL's first id for
/// user objects), so no table has an id of a built-in object.
const FIRST_USER_OID: u64 = 16_384;
/// The schema every Lockstep table is listed in.
const SCHEMA: &str = "public";
/// The owner listed for every table.
const OWNER: &str = "lockstep";

/// The rows answering a recognized catalog query, or None for any other.
pub fn answer(sql: &str, catalog: &Catalog) -> Option<(Arc<[ResultColumn]>, Vec<Vec<Value>>)> {
    let q = normalize(sql);
    if q.contains("pg_catalog.pg_get_userbyid(c.relowner) as \"owner\"") && q.contains("c.relkind in (") {
        return Some(relations(&q, catalog));
    }
    if q.contains("from pg_catalog.pg_proc p") && q.contains("p.proname as \"name\"") {
        return Some(procedures(&q, catalog));
    }
    if q.contains("from pg_catalog.pg_namespace n") && q.contains("pg_catalog.pg_get_userbyid(n.nspowner) as \"owner\"") {
        return Some((columns(&["Name", "Owner"]), vec![vec![s(SCHEMA), s(OWNER)]]));
    }
    if q.starts_with("select c.oid, n.nspname, c.relname from pg_catalog.pg_class c") {
        return Some(lookup(&q, catalog));
    }
    if q.starts_with("select c.relchecks, c.relkind, c.relhasindex") {
        return Some(table_info(&q, catalog));
    }
    if q.starts_with("select a.attname,") && q.contains("from pg_catalog.pg_attribute a") {
        return Some(attributes(&q, catalog));
    }
    // The rest of `\d NAME` asks about one table for what Lockstep does not have (row
    // policies, extended statistics, publications, inheritance): none.
    if names_a_table(&q, catalog) {
        return Some((columns(&[]), Vec::new()));
    }
    None
}

/// Whether the query names a table by its object id (`… = '16384'`).
fn names_a_table(q: &str, catalog: &Catalog) -> bool {
    q.split('\'').skip(1).step_by(2).any(|quoted| quoted.parse::<u64>().is_ok_and(|id| catalog.tables().any(|t| oid(t) == id)))
}

/// The text lower-cased with its whitespace runs made single spaces (psql indents its
/// queries), string literals kept as they are.
fn normalize(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quoted = false;
    let mut space = false;
    for c in sql.chars() {
        if c == '\'' {
            quoted = !quoted;
        }
        if !quoted && c.is_whitespace() {
            space = true;
            continue;
        }
        if space && !out.is_empty() {
            out.push(' ');
        }
        space = false;
        out.push(if quoted { c } else { c.to_ascii_lowercase() });
    }
    out
}

fn columns(names: &[&str]) -> Arc<[ResultColumn]> {
    names.iter().map(|n| ResultColumn { name: (*n).into(), ty: DataType::Varchar }).collect::<Vec<_>>().into()
}

fn s(v: &str) -> Value {
    Value::Str(v.into())
}

fn oid(t: &TableDef) -> u64 {
    FIRST_USER_OID + u64::from(t.id)
}

/// psql's relation kind letter: `r` a table, `m` a (materialized) view; streams are not
/// listed (they cannot be queried).
fn relkind(t: &TableDef) -> Option<char> {
    match t.kind {
        TableKind::Table => Some('r'),
        TableKind::View(_) => Some('m'),
        TableKind::Stream { .. } => None,
    }
}

/// The name pattern psql puts in `c.relname OPERATOR(pg_catalog.~) '^(…)$'`, if any.
fn name_pattern(q: &str) -> Option<String> {
    let start = q.find("operator(pg_catalog.~) '^(")? + "operator(pg_catalog.~) '^(".len();
    let end = q[start..].find(")$'")? + start;
    Some(q[start..end].to_string())
}

/// Whether `name` matches psql's pattern, which it writes as a regular expression: `.*` for
/// `*`, `.` for `?`, letters as typed (lower-cased unless quoted), compared ignoring case.
fn matches(pattern: &str, name: &str) -> bool {
    fn go(p: &[char], n: &[char]) -> bool {
        match p {
            [] => n.is_empty(),
            ['.', '*', rest @ ..] => (0..=n.len()).any(|k| go(rest, &n[k..])),
            ['.', rest @ ..] => !n.is_empty() && go(rest, &n[1..]),
            ['\\', c, rest @ ..] | [c, rest @ ..] if !n.is_empty() => c.eq_ignore_ascii_case(&n[0]) && go(rest, &n[1..]),
            _ => false,
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    go(&p, &n)
}

/// `\d`, `\dt`, `\dv`, `\dm` (with or without a pattern): the relations of the kinds asked for.
fn relations(q: &str, catalog: &Catalog) -> (Arc<[ResultColumn]>, Vec<Vec<Value>>) {
    let kinds_at = q.find("c.relkind in (").map_or(0, |i| i + "c.relkind in (".len());
    let kinds: String = q[kinds_at..].split(')').next().unwrap_or("").chars().filter(|c| c.is_ascii_alphabetic()).collect();
    let pattern = name_pattern(q);
    let mut rows: Vec<Vec<Value>> = catalog
        .tables()
        .filter_map(|t| relkind(t).map(|k| (t, k)))
        .filter(|(t, k)| kinds.contains(*k) && pattern.as_deref().is_none_or(|p| matches(p, &t.name)))
        .map(|(t, k)| vec![s(SCHEMA), s(&t.name), s(if k == 'r' { "table" } else { "materialized view" }), s(OWNER)])
        .collect();
    rows.sort_by(|a, b| a[1].to_string().cmp(&b[1].to_string()));
    (columns(&["Schema", "Name", "Type", "Owner"]), rows)
}

/// `\df`: the stored procedures, with the parameter types of those whose body is one SQL
/// statement (a Lua procedure declares none).
fn procedures(q: &str, catalog: &Catalog) -> (Arc<[ResultColumn]>, Vec<Vec<Value>>) {
    let pattern = name_pattern(q);
    let rows = catalog
        .procedures()
        .filter(|p| pattern.as_deref().is_none_or(|pat| matches(pat, &p.name)))
        .map(|p| {
            let arguments = match &p.body {
                ProcedureBody::Sql(sql) => lockstep_sql::prepare(catalog, sql)
                    .map(|planned| {
                        let names: Vec<String> = planned
                            .param_types
                            .iter()
                            .map(|t| t.map_or("unknown".to_string(), |t| t.sql_name().to_ascii_lowercase()))
                            .collect();
                        names.join(", ")
                    })
                    .unwrap_or_default(),
                ProcedureBody::Lua { .. } => String::new(),
            };
            vec![s(SCHEMA), s(&p.name), s(""), s(&arguments), s("proc")]
        })
        .collect();
    (columns(&["Schema", "Name", "Result data type", "Argument data types", "Type"]), rows)
}

/// The first query of `\d NAME`: which relations the pattern names.
fn lookup(q: &str, catalog: &Catalog) -> (Arc<[ResultColumn]>, Vec<Vec<Value>>) {
    let pattern = name_pattern(q);
    let rows = catalog
        .tables()
        .filter(|t| relkind(t).is_some() && pattern.as_deref().is_none_or(|p| matches(p, &t.name)))
        .map(|t| vec![s(&oid(t).to_string()), s(SCHEMA), s(&t.name)])
        .collect();
    (columns(&["oid", "nspname", "relname"]), rows)
}

/// The table named by `c.oid = '…'` or `a.attrelid = '…'` in the query.
fn table_by_oid<'a>(q: &str, key: &str, catalog: &'a Catalog) -> Option<&'a Arc<TableDef>> {
    let start = q.find(key)? + key.len();
    let digits: String = q[start..].chars().take_while(char::is_ascii_digit).collect();
    let wanted: u64 = digits.parse().ok()?;
    catalog.tables().find(|t| oid(t) == wanted)
}

/// `\d NAME`'s second query: what kind of relation it is. No checks, rules, triggers or
/// policies, so psql asks nothing about them; indexes are not shown yet.
fn table_info(q: &str, catalog: &Catalog) -> (Arc<[ResultColumn]>, Vec<Vec<Value>>) {
    let names = [
        "relchecks",
        "relkind",
        "relhasindex",
        "relhasrules",
        "relhastriggers",
        "relrowsecurity",
        "relforcerowsecurity",
        "relhasoids",
        "relispartition",
        "reloptions",
        "reltablespace",
        "reloftype",
        "relpersistence",
        "relreplident",
        "amname",
    ];
    let rows = table_by_oid(q, "c.oid = '", catalog)
        .and_then(|t| relkind(t).map(|k| (t, k)))
        .map(|(_, k)| {
            let k = k.to_string();
            let values = ["0", &k, "f", "f", "f", "f", "f", "f", "f", "", "0", "", "p", "d", "heap"];
            vec![values.iter().map(|v| s(v)).collect()]
        })
        .unwrap_or_default();
    (columns(&names), rows)
}

/// `\d NAME`'s column list: name, type, default, NOT NULL, collation, identity, generated.
fn attributes(q: &str, catalog: &Catalog) -> (Arc<[ResultColumn]>, Vec<Vec<Value>>) {
    let names = ["attname", "format_type", "default", "attnotnull", "attcollation", "attidentity", "attgenerated"];
    let rows = table_by_oid(q, "a.attrelid = '", catalog)
        .map(|t| {
            t.columns
                .iter()
                .map(|c| {
                    let ty = match c.ty {
                        DataType::Varchar | DataType::Varbinary => format!("{}({})", c.ty.sql_name().to_ascii_lowercase(), c.size),
                        other => other.sql_name().to_ascii_lowercase(),
                    };
                    let default = c.default.as_ref().map_or(Value::Null, |d| s(&literal(d)));
                    vec![s(&c.name), s(&ty), default, s(if c.nullable { "f" } else { "t" }), Value::Null, s(""), s("")]
                })
                .collect()
        })
        .unwrap_or_default();
    (columns(&names), rows)
}

/// A default value as SQL writes it: text quoted, NULL spelled out.
fn literal(v: &Value) -> String {
    match v {
        Value::Str(text) => format!("'{}'", text.replace('\'', "''")),
        Value::Null => "NULL".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psql_patterns_match_names_ignoring_case() {
        assert!(matches("t", "T"));
        assert!(matches("vote.*", "VOTES"));
        assert!(matches("v.tes", "votes"));
        assert!(!matches("t", "TT"));
        assert!(!matches("vote", "votes"));
    }

    #[test]
    fn queries_are_recognized_whatever_their_layout() {
        let q = normalize(
            "SELECT c.oid,\n  n.nspname,\n  c.relname\nFROM pg_catalog.pg_class c\n WHERE c.relname OPERATOR(pg_catalog.~) '^(Votes)$'",
        );
        assert!(q.starts_with("select c.oid, n.nspname, c.relname from pg_catalog.pg_class c"), "{q}");
        assert_eq!(name_pattern(&q).as_deref(), Some("Votes"));
    }
}
