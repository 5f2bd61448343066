//! A token cursor for VoltDB DDL, and the pieces of CREATE TABLE / STREAM / ALTER TABLE
//! that several statements share: column definitions and key constraints.

use lockstep_core::{ColumnDef, DataType, Error, Result, Value};

use crate::bind::{number_literal, type_from_name};
use crate::lex::{tokenize, Tok, TokKind};
use crate::plan_dml::DEFAULT_NOW_SENTINEL;

/// Largest VARCHAR / VARBINARY, in characters or bytes (VoltDB's limit).
pub const VARIABLE_SIZE_MAX: u32 = 1_048_576;
/// VoltDB's default limit of a GEOGRAPHY value, in bytes of its wire form.
pub const GEOGRAPHY_SIZE_DEFAULT_BYTES: u32 = 32_768;
/// The wire form of the smallest polygon (one ring of three vertices), in bytes.
pub const GEOGRAPHY_SIZE_MIN_BYTES: u32 = 155;
/// VARCHAR declared without a length.
pub const VARCHAR_SIZE_DEFAULT: u32 = VARIABLE_SIZE_MAX;
/// Most columns a table may have (VoltDB's limit).
pub const TABLE_COLUMNS_MAX: usize = 1024;

pub struct Cursor<'a> {
    pub src: &'a str,
    toks: Vec<Tok>,
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(src: &'a str) -> Result<Self> {
        Ok(Cursor { src, toks: tokenize(src)?, pos: 0 })
    }

    pub fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    pub fn peek_at(&self, n: usize) -> Option<&Tok> {
        self.toks.get(self.pos + n)
    }

    pub fn at_end(&self) -> bool {
        self.pos >= self.toks.len()
    }

    pub fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).cloned();
        if t.is_some() {
            self.pos += 1;
        }
        t
    }

    /// Text of the statement from the current token on.
    pub fn rest(&self) -> &'a str {
        match self.peek() {
            Some(t) => &self.src[t.start..],
            None => "",
        }
    }

    /// "near 'xyz'" for error messages.
    pub fn near(&self) -> String {
        match self.peek() {
            Some(t) => {
                let s = &self.src[t.start..];
                let end = s.char_indices().nth(30).map(|(i, _)| i).unwrap_or(s.len());
                format!("near '{}'", &s[..end])
            }
            None => "at the end of the statement".to_string(),
        }
    }

    pub fn error(&self, what: &str) -> Error {
        Error::sql(format!("{what} {}", self.near()))
    }

    pub fn is_word(&self, kw: &str) -> bool {
        self.peek().is_some_and(|t| t.is_word(kw))
    }

    pub fn eat_word(&mut self, kw: &str) -> bool {
        if self.is_word(kw) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    pub fn expect_word(&mut self, kw: &str) -> Result<()> {
        if self.eat_word(kw) {
            Ok(())
        } else {
            Err(self.error(&format!("expected {kw}")))
        }
    }

    pub fn eat_punct(&mut self, p: &str) -> bool {
        if self.peek().is_some_and(|t| t.is_punct(p)) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    pub fn expect_punct(&mut self, p: &str) -> Result<()> {
        if self.eat_punct(p) {
            Ok(())
        } else {
            Err(self.error(&format!("expected '{p}'")))
        }
    }

    /// A name (upper-cased unless quoted).
    pub fn ident(&mut self, what: &str) -> Result<String> {
        match self.peek().and_then(Tok::ident) {
            Some(n) => {
                self.pos += 1;
                Ok(n)
            }
            None => Err(self.error(&format!("expected {what}"))),
        }
    }

    /// A name kept as written (VoltDB keeps a procedure's case; clients look it up exactly).
    pub fn name_as_written(&mut self, what: &str) -> Result<String> {
        match self.peek() {
            Some(t) if matches!(t.kind, TokKind::Word | TokKind::QuotedIdent) => {
                let n = t.text.clone();
                self.pos += 1;
                Ok(n)
            }
            _ => Err(self.error(&format!("expected {what}"))),
        }
    }

    /// A dotted name such as `com.example.Vote`, as written.
    pub fn dotted(&mut self, what: &str) -> Result<String> {
        let mut s = match self.peek() {
            Some(t) if matches!(t.kind, TokKind::Word | TokKind::QuotedIdent) => t.text.clone(),
            _ => return Err(self.error(&format!("expected {what}"))),
        };
        self.pos += 1;
        while self.eat_punct(".") {
            match self.next() {
                Some(t) if matches!(t.kind, TokKind::Word | TokKind::QuotedIdent) => {
                    s.push('.');
                    s.push_str(&t.text);
                }
                _ => return Err(self.error(&format!("expected {what}"))),
            }
        }
        Ok(s)
    }

    pub fn integer(&mut self, what: &str) -> Result<i64> {
        match self.peek() {
            Some(t) if t.kind == TokKind::Number => {
                let v = t.text.parse::<i64>().map_err(|_| self.error(&format!("expected {what}")))?;
                self.pos += 1;
                Ok(v)
            }
            _ => Err(self.error(&format!("expected {what}"))),
        }
    }

    pub fn string(&mut self, what: &str) -> Result<String> {
        match self.peek() {
            Some(t) if t.kind == TokKind::Str => {
                let s = t.text.clone();
                self.pos += 1;
                Ok(s)
            }
            _ => Err(self.error(&format!("expected {what}"))),
        }
    }

    /// Skips a balanced parenthesised group (the cursor is at its '(').
    pub fn skip_parens(&mut self) -> Result<()> {
        self.expect_punct("(")?;
        let mut depth = 1usize;
        while depth > 0 {
            match self.next() {
                Some(t) if t.is_punct("(") => depth += 1,
                Some(t) if t.is_punct(")") => depth -= 1,
                Some(_) => {}
                None => return Err(Error::sql("unbalanced parentheses")),
            }
        }
        Ok(())
    }

    /// `( name, name … )`
    pub fn name_list(&mut self, what: &str) -> Result<Vec<String>> {
        self.expect_punct("(")?;
        let mut v = vec![self.ident(what)?];
        while self.eat_punct(",") {
            v.push(self.ident(what)?);
        }
        self.expect_punct(")")?;
        Ok(v)
    }

    pub fn expect_end(&self) -> Result<()> {
        if self.at_end() {
            Ok(())
        } else {
            Err(self.error("unexpected text"))
        }
    }
}

/// A key constraint, by column names.
#[derive(Clone, Debug)]
pub struct KeySpec {
    pub name: Option<String>,
    pub columns: Vec<String>,
    pub primary: bool,
    pub assume_unique: bool,
}

/// Parses `TYPE [(n [BYTES]) | (p, s)]`; returns (type, size, in_bytes).
pub fn column_type(c: &mut Cursor) -> Result<(DataType, u32, bool)> {
    let word = c.ident("a column type")?;
    let ty = type_from_name(&word).ok_or_else(|| Error::sql(format!("unknown column type {word}")))?;
    if word.eq_ignore_ascii_case("DOUBLE") {
        c.eat_word("PRECISION");
    }
    let mut size = match ty {
        DataType::Varchar | DataType::Varbinary => {
            if word.eq_ignore_ascii_case("CHAR") {
                1
            } else {
                VARCHAR_SIZE_DEFAULT
            }
        }
        DataType::Geography => GEOGRAPHY_SIZE_DEFAULT_BYTES,
        _ => 0,
    };
    let mut in_bytes = ty == DataType::Geography;
    if c.eat_punct("(") {
        let n = c.integer("a size")?;
        match ty {
            DataType::Varchar | DataType::Varbinary => {
                if n < 0 || n as u64 > VARIABLE_SIZE_MAX as u64 {
                    return Err(Error::sql(format!("{word}({n}): the size must be 0 to {VARIABLE_SIZE_MAX}")));
                }
                size = n as u32;
                if c.eat_word("BYTES") {
                    in_bytes = true;
                } else {
                    c.eat_word("CHARACTERS");
                }
            }
            DataType::Decimal => {
                // VoltDB stores every DECIMAL as (38, 12); other precisions are accepted.
                if c.eat_punct(",") {
                    c.integer("a scale")?;
                }
            }
            DataType::Geography => {
                if n < GEOGRAPHY_SIZE_MIN_BYTES as i64 || n as u64 > VARIABLE_SIZE_MAX as u64 {
                    return Err(Error::sql(format!(
                        "{word}({n}): the size must be {GEOGRAPHY_SIZE_MIN_BYTES} to {VARIABLE_SIZE_MAX} bytes (the smallest polygon takes {GEOGRAPHY_SIZE_MIN_BYTES})"
                    )));
                }
                size = n as u32;
            }
            DataType::Float | DataType::Timestamp => {}
            _ => return Err(Error::sql(format!("type {word} takes no size"))),
        }
        c.expect_punct(")")?;
    }
    Ok((ty, size, in_bytes))
}

/// A DEFAULT value, converted to the column's type.
fn default_value(c: &mut Cursor, ty: DataType, col: &str) -> Result<Value> {
    let neg = c.eat_punct("-");
    let t = c.next().ok_or_else(|| Error::sql(format!("missing DEFAULT value for column {col}")))?;
    let v = match t.kind {
        TokKind::Number => number_literal(&format!("{}{}", if neg { "-" } else { "" }, t.text))?,
        TokKind::Str if !neg => Value::from(t.text.as_str()),
        TokKind::Word if !neg => match t.text.to_ascii_uppercase().as_str() {
            "NULL" => Value::Null,
            "TRUE" => Value::Bool(true),
            "FALSE" => Value::Bool(false),
            "NOW" | "CURRENT_TIMESTAMP" if ty == DataType::Timestamp => {
                if c.eat_punct("(") {
                    c.expect_punct(")")?;
                }
                return Ok(DEFAULT_NOW_SENTINEL);
            }
            "X" | "x" => return Err(Error::sql(format!("bad DEFAULT for column {col}"))),
            w => return Err(Error::sql(format!("bad DEFAULT value {w} for column {col}"))),
        },
        _ => return Err(Error::sql(format!("bad DEFAULT value {} for column {col}", t.text))),
    };
    v.coerce_to(ty).map_err(|e| e.context(format!("DEFAULT of column {col}")))
}

/// Parses `name TYPE [options]`; column-level keys are added to `keys`.
pub fn column_def(c: &mut Cursor, keys: &mut Vec<KeySpec>) -> Result<ColumnDef> {
    let name = c.ident("a column name")?;
    let (ty, size, in_bytes) = column_type(c)?;
    let mut col = ColumnDef { name: name.clone(), ty, size, in_bytes, nullable: true, default: None };
    loop {
        let mut cname = None;
        if c.eat_word("CONSTRAINT") {
            cname = Some(c.ident("a constraint name")?);
        }
        if c.eat_word("DEFAULT") {
            col.default = Some(default_value(c, ty, &name)?).filter(|v| !v.is_null());
        } else if c.eat_word("NOT") {
            c.expect_word("NULL")?;
            col.nullable = false;
        } else if c.eat_word("NULL") {
            col.nullable = true;
        } else if c.eat_word("PRIMARY") {
            c.expect_word("KEY")?;
            col.nullable = false;
            keys.push(KeySpec { name: cname, columns: vec![name.clone()], primary: true, assume_unique: false });
        } else if c.eat_word("UNIQUE") {
            keys.push(KeySpec { name: cname, columns: vec![name.clone()], primary: false, assume_unique: false });
        } else if c.eat_word("ASSUMEUNIQUE") {
            keys.push(KeySpec { name: cname, columns: vec![name.clone()], primary: false, assume_unique: true });
        } else if cname.is_some() {
            return Err(c.error("expected PRIMARY KEY, UNIQUE or ASSUMEUNIQUE"));
        } else {
            break;
        }
    }
    Ok(col)
}

/// Parses a table-level constraint if one starts here; `LIMIT PARTITION ROWS` is skipped.
pub fn table_constraint(c: &mut Cursor) -> Result<Option<Option<KeySpec>>> {
    let save = c.pos;
    let mut name = None;
    if c.eat_word("CONSTRAINT") {
        name = Some(c.ident("a constraint name")?);
    }
    let (primary, assume_unique) = if c.is_word("PRIMARY") && c.peek_at(1).is_some_and(|t| t.is_word("KEY")) {
        c.pos += 2;
        (true, false)
    } else if c.is_word("UNIQUE") && c.peek_at(1).is_some_and(|t| t.is_punct("(")) {
        c.pos += 1;
        (false, false)
    } else if c.is_word("ASSUMEUNIQUE") && c.peek_at(1).is_some_and(|t| t.is_punct("(")) {
        c.pos += 1;
        (false, true)
    } else if c.is_word("LIMIT") {
        skip_limit_partition_rows(c)?;
        return Ok(Some(None));
    } else if c.is_word("FOREIGN") && c.peek_at(1).is_some_and(|t| t.is_word("KEY")) {
        // VoltDB accepts FOREIGN KEY and does not enforce it (the TATP kit's schema has them).
        c.pos += 2;
        c.skip_parens()?;
        c.expect_word("REFERENCES")?;
        c.ident("a table name")?;
        if c.peek_at(0).is_some_and(|t| t.is_punct("(")) {
            c.skip_parens()?;
        }
        return Ok(Some(None));
    } else if name.is_some() {
        return Err(c.error("expected PRIMARY KEY, UNIQUE, ASSUMEUNIQUE, FOREIGN KEY or LIMIT PARTITION ROWS"));
    } else {
        c.pos = save;
        return Ok(None);
    };
    let columns = c.name_list("a column name")?;
    Ok(Some(Some(KeySpec { name, columns, primary, assume_unique })))
}

/// `LIMIT PARTITION ROWS n [EXECUTE (…)]` — accepted and ignored.
pub fn skip_limit_partition_rows(c: &mut Cursor) -> Result<()> {
    c.expect_word("LIMIT")?;
    c.expect_word("PARTITION")?;
    c.expect_word("ROWS")?;
    c.integer("a row count")?;
    if c.eat_word("EXECUTE") {
        c.skip_parens()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_definitions_with_voltdb_options() {
        let mut keys = Vec::new();
        let mut c = Cursor::new("name VARCHAR(20 BYTES) DEFAULT 'x' NOT NULL UNIQUE").unwrap();
        let col = column_def(&mut c, &mut keys).unwrap();
        assert_eq!((col.name.as_str(), col.ty, col.size, col.in_bytes, col.nullable), ("NAME", DataType::Varchar, 20, true, false));
        assert_eq!(col.default, Some(Value::Str("x".into())));
        assert_eq!(keys.len(), 1);
        let mut c = Cursor::new("amt DECIMAL(10, 2) DEFAULT -1.5").unwrap();
        let col = column_def(&mut c, &mut keys).unwrap();
        assert_eq!(col.default, Some(Value::Decimal(lockstep_core::decimal::parse("-1.5").unwrap().into())));
        let mut c = Cursor::new("n TINYINT DEFAULT 300").unwrap();
        assert!(column_def(&mut c, &mut keys).unwrap_err().message.contains("DEFAULT of column N"));
    }
}
