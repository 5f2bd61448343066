//! Statement-level text handling: splitting scripts on `;`, telling DDL from DML, and the
//! textual rewrites done before handing a statement to sqlparser.

use lockstep_core::{Error, Result};

use crate::lex::{tokenize, Tok, TokKind};

/// Most statements one script may hold.
pub const SCRIPT_STATEMENTS_MAX: usize = 100_000;
/// Most `?` parameters one statement may have.
pub const PARAMS_MAX: usize = 1025;

/// Splits a script into statements on `;`, respecting '…' strings, "…" identifiers, -- and
/// /* */ comments, $tag$…$tag$ dollar quotes, and CREATE PROCEDURE … AS BEGIN … END.
pub fn split_statements(script: &str) -> Result<Vec<String>> {
    let toks = tokenize(script)?;
    let mut out = Vec::new();
    let mut first: Option<usize> = None; // token index where the current statement starts
    let mut depth = 0usize; // BEGIN … END nesting inside a procedure body
    for (i, t) in toks.iter().enumerate() {
        if first.is_none() {
            if t.is_punct(";") {
                continue;
            }
            first = Some(i);
        }
        let start = first.unwrap_or(i);
        if depth > 0 {
            if t.is_word("BEGIN") || t.is_word("CASE") {
                depth += 1;
            } else if t.is_word("END") {
                depth -= 1;
            }
            continue;
        }
        if t.is_word("BEGIN") && i > start && toks[i - 1].is_word("AS") && is_create_procedure(&toks[start..i]) {
            depth = 1;
            continue;
        }
        if t.is_punct(";") {
            out.push(script[toks[start].start..toks[i - 1].end].to_string());
            first = None;
            if out.len() > SCRIPT_STATEMENTS_MAX {
                return Err(Error::sql(format!("script has more than {SCRIPT_STATEMENTS_MAX} statements")));
            }
        }
    }
    if depth > 0 {
        return Err(Error::sql("CREATE PROCEDURE … AS BEGIN is missing its END"));
    }
    if let (Some(s), Some(last)) = (first, toks.last()) {
        out.push(script[toks[s].start..last.end].to_string());
    }
    Ok(out)
}

fn is_create_procedure(toks: &[Tok]) -> bool {
    let words: Vec<&Tok> = toks.iter().take(4).collect();
    match words.as_slice() {
        [c, p, ..] if c.is_word("CREATE") && p.is_word("PROCEDURE") => true,
        [c, o, r, p] if c.is_word("CREATE") && o.is_word("OR") && r.is_word("REPLACE") => p.is_word("PROCEDURE"),
        _ => false,
    }
}

/// The first word of a statement, upper-cased ("" if none).
pub fn first_word(sql: &str) -> String {
    let t = sql.trim_start();
    // Skip leading comments cheaply through the lexer only when needed.
    if t.starts_with("--") || t.starts_with("/*") {
        return tokenize(sql)
            .ok()
            .and_then(|v| v.into_iter().find(|t| t.kind == TokKind::Word))
            .map(|t| t.text.to_ascii_uppercase())
            .unwrap_or_default();
    }
    t.split(|c: char| !c.is_ascii_alphanumeric() && c != '_').next().unwrap_or("").to_ascii_uppercase()
}

/// True for CREATE/DROP/ALTER/PARTITION statements (and other DDL).
pub fn is_ddl(sql: &str) -> bool {
    matches!(first_word(sql).as_str(), "CREATE" | "DROP" | "ALTER" | "PARTITION" | "LOAD" | "REMOVE" | "DR" | "SET" | "IMPORT")
}

/// A statement rewritten for sqlparser.
pub struct Rewritten {
    pub sql: String,
    pub param_count: usize,
    /// The statement was VoltDB's `UPSERT`, now spelled `INSERT`.
    pub upsert: bool,
}

/// Numbers `?` placeholders (`?1`, `?2`… in text order, so binding order does not matter)
/// and turns a leading UPSERT into INSERT.
pub fn rewrite_for_parser(sql: &str) -> Result<Rewritten> {
    let toks = tokenize(sql)?;
    let mut out = String::with_capacity(sql.len() + 16);
    let mut last = 0;
    let mut count = 0usize;
    let mut max_dollar = 0usize;
    let mut upsert = false;
    for (i, t) in toks.iter().enumerate() {
        if i == 0 && t.is_word("UPSERT") {
            out.push_str(&sql[last..t.start]);
            out.push_str("INSERT");
            last = t.end;
            upsert = true;
            continue;
        }
        if t.kind != TokKind::Param {
            continue;
        }
        // `IN ?` (an array parameter) becomes `IN (?n)`, which sqlparser accepts.
        let after_in = i > 0 && toks[i - 1].is_word("IN");
        let (open, close) = if after_in { ("(", ")") } else { ("", "") };
        if t.text == "?" {
            count += 1;
            out.push_str(&sql[last..t.start]);
            out.push_str(&format!("{open}?{count}{close}"));
            last = t.end;
        } else {
            let n: usize = t.text[1..].parse().map_err(|_| Error::sql(format!("bad parameter {}", t.text)))?;
            max_dollar = max_dollar.max(n);
            out.push_str(&sql[last..t.start]);
            out.push_str(&format!("{open}?{n}{close}"));
            last = t.end;
        }
    }
    out.push_str(&sql[last..]);
    if count > 0 && max_dollar > 0 {
        return Err(Error::sql("a statement cannot mix ? and $n parameters"));
    }
    let param_count = count.max(max_dollar);
    if param_count > PARAMS_MAX {
        return Err(Error::sql(format!("statement has {param_count} parameters; the limit is {PARAMS_MAX}")));
    }
    Ok(Rewritten { sql: out, param_count, upsert })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_semicolons_outside_quotes_and_comments() {
        let s = "create table t (a int); -- x; y\ninsert into t values ('a;b');\n/* ; */ select \"x;\" from t";
        assert_eq!(split_statements(s).unwrap(), vec!["create table t (a int)", "insert into t values ('a;b')", "select \"x;\" from t"]);
    }

    #[test]
    fn keeps_procedure_bodies_whole() {
        let s = "CREATE PROCEDURE p AS BEGIN select 1; select case when 1=1 then 2 end; END;\n\
                 CREATE PROCEDURE q PARTITION ON TABLE t COLUMN a FROM FILE 'q.lua' SOURCE $lua$ x = 1; $lua$; ;;";
        let v = split_statements(s).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0], "CREATE PROCEDURE p AS BEGIN select 1; select case when 1=1 then 2 end; END");
        assert!(v[1].ends_with("$lua$ x = 1; $lua$"));
    }

    #[test]
    fn empty_and_comment_only_scripts_have_no_statements() {
        assert!(split_statements("  ;; -- nothing\n /* at all */").unwrap().is_empty());
        assert!(split_statements("create procedure p as begin select 1;").is_err());
    }

    #[test]
    fn ddl_is_recognised_by_its_first_word() {
        assert!(is_ddl("  create table x (a int)"));
        assert!(is_ddl("-- c\nPARTITION TABLE x ON COLUMN a"));
        assert!(!is_ddl("select * from t"));
        assert!(!is_ddl("upsert into t values (1)"));
    }

    #[test]
    fn placeholders_are_numbered_in_text_order() {
        let r = rewrite_for_parser("UPSERT INTO t VALUES (?, '?', ?)").unwrap();
        assert_eq!(r.sql, "INSERT INTO t VALUES (?1, '?', ?2)");
        assert_eq!(r.param_count, 2);
        assert!(r.upsert);
        assert!(rewrite_for_parser("select ? + $1").is_err());
    }
}
