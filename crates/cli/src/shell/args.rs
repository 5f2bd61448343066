//! Parsing of `exec` arguments (sqlcmd style) and the `CREATE PROCEDURE … FROM FILE` rewrite
//! that ships the procedure's source text to the server.

use std::path::Path;

use lockstep_core::Value;

/// Largest procedure source file the shell sends.
pub const PROCEDURE_FILE_MAX_BYTES: u64 = 16 * 1024 * 1024;
/// The dollar-quote tag wrapping shipped procedure source.
const SOURCE_TAG: &str = "$lockstep$";

/// Splits `exec` arguments: separated by spaces and/or commas; '…' or "…" quote (a doubled
/// quote escapes it); unquoted NULL is NULL; unquoted integers and decimals become numbers;
/// anything else is a string, converted by the server to the parameter's type.
pub fn parse_exec_args(text: &str) -> Result<Vec<Value>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < chars.len() && (chars[i].is_whitespace() || chars[i] == ',') {
            i += 1;
        }
        if i >= chars.len() {
            return Ok(out);
        }
        let c = chars[i];
        if c == '\'' || c == '"' {
            let mut s = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err(format!("unterminated quoted argument: {c}{s}")),
                    Some(&q) if q == c && chars.get(i + 1) == Some(&c) => {
                        s.push(c);
                        i += 2;
                    }
                    Some(&q) if q == c => {
                        i += 1;
                        break;
                    }
                    Some(&other) => {
                        s.push(other);
                        i += 1;
                    }
                }
            }
            out.push(Value::Str(s.into()));
        } else {
            let start = i;
            while i < chars.len() && !chars[i].is_whitespace() && chars[i] != ',' {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            out.push(unquoted(&word));
        }
    }
}

fn unquoted(word: &str) -> Value {
    if word.eq_ignore_ascii_case("null") {
        return Value::Null;
    }
    if let Ok(i) = word.parse::<i64>() {
        return Value::Int(i);
    }
    let looks_numeric =
        word.chars().all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E')) && word.chars().any(|c| c.is_ascii_digit());
    match word.parse::<f64>() {
        Ok(f) if looks_numeric && f.is_finite() => Value::Float(f),
        _ => Value::Str(word.to_string().into()),
    }
}

/// Finds `FROM FILE '<path>'` outside other quotes; returns the path and the byte index just
/// after its closing quote.
fn find_from_file(sql: &str) -> Option<(String, usize)> {
    // Byte-wise on purpose: the keywords are ASCII, and slicing stays on char boundaries
    // because every index we slice at follows an ASCII byte.
    let b = sql.as_bytes();
    let word_at = |i: usize, w: &[u8]| b.len() >= i + w.len() && b[i..i + w.len()].eq_ignore_ascii_case(w);
    let skip_ws = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut in_quote = false;
    for i in 0..b.len() {
        if b[i] == b'\'' {
            in_quote = !in_quote;
            continue;
        }
        if in_quote || !word_at(i, b"FROM") || (i > 0 && !b[i - 1].is_ascii_whitespace()) {
            continue;
        }
        let f = skip_ws(i + 4);
        if f == i + 4 || !word_at(f, b"FILE") {
            continue;
        }
        let q = skip_ws(f + 4);
        if q == f + 4 || b.get(q) != Some(&b'\'') {
            continue;
        }
        let close = sql[q + 1..].find('\'')? + q + 1;
        return Some((sql[q + 1..close].to_string(), close + 1));
    }
    None
}

/// For `CREATE PROCEDURE … FROM FILE 'p'` (without a SOURCE clause), reads `p` relative to
/// `base_dir` and appends ` SOURCE $lockstep$<text>$lockstep$`; other statements pass as is.
pub fn inline_procedure_source(sql: &str, base_dir: &Path) -> Result<String, String> {
    let head: Vec<String> = sql.split_whitespace().take(4).map(|w| w.to_ascii_uppercase()).collect();
    if head.first().map(String::as_str) != Some("CREATE") || !head.iter().any(|w| w == "PROCEDURE") {
        return Ok(sql.to_string());
    }
    let Some((rel, end)) = find_from_file(sql) else {
        return Ok(sql.to_string());
    };
    if sql[end..].to_ascii_uppercase().contains("SOURCE") {
        return Ok(sql.to_string());
    }
    let path = base_dir.join(&rel);
    let meta = std::fs::metadata(&path).map_err(|e| format!("cannot read procedure file {}: {e}", path.display()))?;
    if meta.len() > PROCEDURE_FILE_MAX_BYTES {
        return Err(format!("procedure file {} is larger than {PROCEDURE_FILE_MAX_BYTES} bytes", path.display()));
    }
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read procedure file {}: {e}", path.display()))?;
    if text.contains(SOURCE_TAG) {
        return Err(format!("procedure file {} contains {SOURCE_TAG}, which the shell uses to quote it", path.display()));
    }
    Ok(format!("{} SOURCE {SOURCE_TAG}{text}{SOURCE_TAG}{}", &sql[..end], &sql[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_arguments_in_sqlcmd_style() {
        assert_eq!(
            parse_exec_args("5551234567, 'CA' 3 NULL \"it's\" 'a''b' 1.5 -7 X'0A' 2024-01-01").unwrap(),
            vec![
                Value::Int(5551234567),
                Value::from("CA"),
                Value::Int(3),
                Value::Null,
                Value::from("it's"),
                Value::from("a'b"),
                Value::Float(1.5),
                Value::Int(-7),
                Value::from("X'0A'"),
                Value::from("2024-01-01"),
            ]
        );
        assert_eq!(parse_exec_args("'null', ''").unwrap(), vec![Value::from("null"), Value::from("")]);
        assert_eq!(parse_exec_args("  ").unwrap(), vec![]);
        assert!(parse_exec_args("'open").is_err());
    }

    #[test]
    fn from_file_ships_the_source() {
        let dir = std::env::temp_dir().join(format!("lockstep-shell-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("procedures")).unwrap();
        std::fs::write(dir.join("procedures/p.lua"), "return function() end\n").unwrap();
        let sql = "CREATE PROCEDURE P PARTITION ON TABLE t COLUMN id FROM FILE 'procedures/p.lua'";
        assert_eq!(inline_procedure_source(sql, &dir).unwrap(), format!("{sql} SOURCE $lockstep$return function() end\n$lockstep$"));
        let missing = inline_procedure_source("create procedure Q from file 'nope.lua'", &dir).unwrap_err();
        assert!(missing.starts_with("cannot read procedure file"), "{missing}");
        assert!(missing.contains("nope.lua"), "{missing}");
        // Other statements, and strings that merely contain the words, pass unchanged.
        let other = "INSERT INTO t VALUES ('FROM FILE ''x''')";
        assert_eq!(inline_procedure_source(other, &dir).unwrap(), other);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
