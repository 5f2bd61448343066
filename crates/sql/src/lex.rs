//! A small SQL lexer: enough to split scripts, number `?` placeholders and parse VoltDB DDL.
//!
//! sqlparser's own tokenizer does not know VoltDB's dialect corners (`$tag$` bodies inside
//! CREATE PROCEDURE, `VARCHAR(n BYTES)`), so statement-level work uses this one.

use lockstep_core::{Error, Result};

/// Longest SQL text we accept, in bytes (a DDL script of a large application fits easily).
pub const SQL_TEXT_MAX_BYTES: usize = 16 * 1024 * 1024;

#[derive(Clone, Debug, PartialEq)]
pub enum TokKind {
    /// A bare word; `upper` is its upper-cased text.
    Word,
    /// A "quoted" identifier; `text` is its content with `""` unescaped.
    QuotedIdent,
    /// A '…' string; `text` is its content with `''` unescaped.
    Str,
    Number,
    /// A `$tag$…$tag$` string; `text` is the body.
    Dollar,
    /// `?`
    Param,
    /// Any other character (or the two-character operators `<=`, `>=`, `<>`, `!=`, `||`).
    Punct,
}

#[derive(Clone, Debug)]
pub struct Tok {
    pub kind: TokKind,
    pub text: String,
    /// Byte range in the source.
    pub start: usize,
    pub end: usize,
}

impl Tok {
    /// True when this is the bare word `kw` (case-insensitive).
    pub fn is_word(&self, kw: &str) -> bool {
        self.kind == TokKind::Word && self.text.eq_ignore_ascii_case(kw)
    }
    pub fn is_punct(&self, p: &str) -> bool {
        self.kind == TokKind::Punct && self.text == p
    }
    /// The name this token denotes: unquoted words upper-cased (VoltDB style), quoted as written.
    pub fn ident(&self) -> Option<String> {
        match self.kind {
            TokKind::Word => Some(self.text.to_ascii_uppercase()),
            TokKind::QuotedIdent => Some(self.text.clone()),
            _ => None,
        }
    }
}

fn err_at(src: &str, pos: usize, what: &str) -> Error {
    let line = src[..pos.min(src.len())].matches('\n').count() + 1;
    Error::sql(format!("{what} (line {line})"))
}

/// Tokenizes `src`, dropping whitespace and comments.
pub fn tokenize(src: &str) -> Result<Vec<Tok>> {
    if src.len() > SQL_TEXT_MAX_BYTES {
        return Err(Error::sql(format!("SQL text of {} bytes is longer than the limit of {SQL_TEXT_MAX_BYTES} bytes", src.len())));
    }
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        match c {
            _ if c.is_ascii_whitespace() => i += 1,
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = src[i + 2..].find("*/").ok_or_else(|| err_at(src, i, "unterminated /* comment"))?;
                i = i + 2 + end + 2;
            }
            b'\'' | b'"' => {
                let (text, next) = quoted(src, i, c)?;
                let kind = if c == b'\'' { TokKind::Str } else { TokKind::QuotedIdent };
                out.push(Tok { kind, text, start, end: next });
                i = next;
            }
            b'$' if b.get(i + 1).is_some_and(|d| d.is_ascii_digit()) => {
                // PostgreSQL-style numbered parameter.
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                out.push(Tok { kind: TokKind::Param, text: src[start..i].into(), start, end: i });
            }
            b'$' => {
                let close = src[i + 1..].find('$').ok_or_else(|| err_at(src, i, "unterminated $tag$ quote"))?;
                let tag = &src[i..i + 1 + close + 1];
                if !tag[1..tag.len() - 1].bytes().all(|x| x.is_ascii_alphanumeric() || x == b'_') {
                    return Err(err_at(src, i, "unexpected character '$'"));
                }
                let body_start = i + tag.len();
                let end = src[body_start..].find(tag).ok_or_else(|| err_at(src, i, &format!("unterminated {tag} quote")))?;
                let text = src[body_start..body_start + end].to_string();
                i = body_start + end + tag.len();
                out.push(Tok { kind: TokKind::Dollar, text, start, end: i });
            }
            b'?' => {
                i += 1;
                out.push(Tok { kind: TokKind::Param, text: "?".into(), start, end: i });
            }
            _ if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(|d| d.is_ascii_digit())) => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                    // exponent sign: 1e-5
                    if (b[i] == b'e' || b[i] == b'E') && matches!(b.get(i + 1), Some(b'-') | Some(b'+')) {
                        i += 1;
                    }
                    i += 1;
                }
                out.push(Tok { kind: TokKind::Number, text: src[start..i].into(), start, end: i });
            }
            _ if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] >= 0x80) {
                    i += 1;
                }
                out.push(Tok { kind: TokKind::Word, text: src[start..i].into(), start, end: i });
            }
            _ => {
                let two = src.get(i..i + 2).unwrap_or("");
                let len = if matches!(two, "<=" | ">=" | "<>" | "!=" | "||") { 2 } else { 1 };
                let ch_len = src[i..].chars().next().map(|c| c.len_utf8()).unwrap_or(1);
                let len = len.max(ch_len);
                out.push(Tok { kind: TokKind::Punct, text: src[i..i + len].into(), start, end: i + len });
                i += len;
            }
        }
    }
    Ok(out)
}

/// Reads a quoted string or identifier starting at `i`; returns (content, index after it).
fn quoted(src: &str, i: usize, q: u8) -> Result<(String, usize)> {
    let b = src.as_bytes();
    let mut j = i + 1;
    let mut text = String::new();
    let mut seg = j;
    loop {
        if j >= b.len() {
            let what = if q == b'\'' { "unterminated string literal" } else { "unterminated quoted identifier" };
            return Err(err_at(src, i, what));
        }
        if b[j] == q {
            text.push_str(&src[seg..j]);
            if b.get(j + 1) == Some(&q) {
                text.push(q as char);
                j += 2;
                seg = j;
                continue;
            }
            return Ok((text, j + 1));
        }
        j += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_cover_strings_comments_dollars_and_operators() {
        let t = tokenize("SELECT 'it''s', \"Q\"\"x\" -- c\n /* d; */ $a$ x; $a$ <= ? $2 1.5e-3").unwrap();
        let kinds: Vec<_> = t.iter().map(|t| (t.kind.clone(), t.text.as_str())).collect();
        assert_eq!(
            kinds,
            vec![
                (TokKind::Word, "SELECT"),
                (TokKind::Str, "it's"),
                (TokKind::Punct, ","),
                (TokKind::QuotedIdent, "Q\"x"),
                (TokKind::Dollar, " x; "),
                (TokKind::Punct, "<="),
                (TokKind::Param, "?"),
                (TokKind::Param, "$2"),
                (TokKind::Number, "1.5e-3"),
            ]
        );
    }

    #[test]
    fn unterminated_things_are_errors() {
        assert!(tokenize("select 'abc").unwrap_err().message.contains("unterminated string"));
        assert!(tokenize("/* x").is_err());
        assert!(tokenize("$t$ abc").is_err());
    }
}
