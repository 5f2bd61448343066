//! `COPY table [(columns)] FROM STDIN`: the statement's options, and the rows of PostgreSQL's
//! text and CSV formats read from the stream of `CopyData` messages as they arrive.

use lockstep_core::{DataType, Error, Value};

/// Bytes one row of COPY input may take (a longer one fails the COPY): a row is buffered
/// whole before it is parsed.
pub const COPY_ROW_MAX_BYTES: usize = 16 * 1024 * 1024;
/// Rows sent to the engine at once during a COPY: the load goes on as the next batch is read.
pub const COPY_BATCH_ROWS: usize = 1_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Csv,
}

/// A `COPY … FROM STDIN` statement.
#[derive(Clone, Debug, PartialEq)]
pub struct CopyIn {
    pub table: String,
    /// The columns given, or None for all of them in order.
    pub columns: Option<Vec<String>>,
    pub format: Format,
    pub delimiter: char,
    /// The text that stands for NULL (`\N` in text, the empty unquoted field in CSV).
    pub null: String,
    /// CSV: the first line names the columns and is skipped.
    pub header: bool,
}

impl CopyIn {
    pub fn new(table: String, columns: Option<Vec<String>>) -> CopyIn {
        CopyIn { table, columns, format: Format::Text, delimiter: '\t', null: "\\N".into(), header: false }
    }

    /// Applies one option (`FORMAT csv`, `DELIMITER ','`, `NULL ''`, `HEADER`), by its
    /// upper-cased name and its value, if any.
    pub fn option(&mut self, name: &str, value: Option<&str>) -> Result<(), Error> {
        let bad = || Error::sql(format!("COPY option {name} {} is not supported", value.unwrap_or("")));
        match (name, value) {
            ("FORMAT", Some(v)) if v.eq_ignore_ascii_case("csv") => self.csv(),
            ("FORMAT", Some(v)) if v.eq_ignore_ascii_case("text") => {}
            ("CSV", None) => self.csv(),
            ("DELIMITER", Some(v)) => {
                let mut chars = v.chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) if c != '\n' && c != '\r' && c != '\\' && c != '"' => self.delimiter = c,
                    _ => return Err(Error::sql("the COPY delimiter must be one character other than a newline, a backslash or a quote")),
                }
            }
            ("NULL", Some(v)) => self.null = v.to_string(),
            ("HEADER", None) => self.header = true,
            ("HEADER", Some(v)) => self.header = matches!(v.to_ascii_lowercase().as_str(), "true" | "on" | "1"),
            _ => return Err(bad()),
        }
        Ok(())
    }

    fn csv(&mut self) {
        self.format = Format::Csv;
        if self.delimiter == '\t' {
            self.delimiter = ',';
        }
        if self.null == "\\N" {
            self.null = String::new();
        }
    }
}

/// The rows of a COPY as its data arrives in pieces: complete rows come out, a row cut by
/// the end of a message waits for the next.
pub struct RowReader {
    spec: CopyIn,
    types: Vec<DataType>,
    pending: Vec<u8>,
    /// Rows read so far (for error messages: PostgreSQL names the line).
    pub line: u64,
    skip_header: bool,
    ended: bool,
}

impl RowReader {
    pub fn new(spec: CopyIn, types: Vec<DataType>) -> RowReader {
        let skip_header = spec.header;
        RowReader { spec, types, pending: Vec::new(), line: 0, skip_header, ended: false }
    }

    /// Takes a piece of the data; returns the rows it completes.
    pub fn feed(&mut self, data: &[u8]) -> Result<Vec<Vec<Value>>, Error> {
        self.pending.extend_from_slice(data);
        let mut rows = Vec::new();
        let mut start = 0;
        while let Some(end) = self.row_end(start) {
            let raw = self.pending[start..end].to_vec();
            start = end + 1;
            if let Some(row) = self.row(&raw)? {
                rows.push(row);
            }
        }
        self.pending.drain(..start);
        if self.pending.len() > COPY_ROW_MAX_BYTES {
            return Err(Error::sql(format!("COPY: row {} is longer than {COPY_ROW_MAX_BYTES} bytes", self.line + 1)));
        }
        Ok(rows)
    }

    /// The last row, when the data did not end with a newline.
    pub fn finish(&mut self) -> Result<Vec<Vec<Value>>, Error> {
        let raw = std::mem::take(&mut self.pending);
        if raw.iter().all(|b| *b == b'\r') {
            return Ok(Vec::new());
        }
        Ok(self.row(&raw)?.into_iter().collect())
    }

    /// Where the row starting at `from` ends (its newline), outside CSV quotes.
    fn row_end(&self, from: usize) -> Option<usize> {
        let rest = &self.pending[from..];
        if self.spec.format == Format::Text {
            return rest.iter().position(|b| *b == b'\n').map(|i| from + i);
        }
        let mut quoted = false;
        for (i, b) in rest.iter().enumerate() {
            match b {
                b'"' => quoted = !quoted,
                b'\n' if !quoted => return Some(from + i),
                _ => {}
            }
        }
        None
    }

    fn row(&mut self, raw: &[u8]) -> Result<Option<Vec<Value>>, Error> {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        self.line += 1;
        if self.ended {
            return Ok(None);
        }
        if raw == b"\\." {
            self.ended = true;
            return Ok(None);
        }
        if std::mem::take(&mut self.skip_header) {
            return Ok(None);
        }
        let line = std::str::from_utf8(raw).map_err(|_| self.error("is not valid UTF-8"))?;
        let fields = match self.spec.format {
            Format::Text => self.text_fields(line)?,
            Format::Csv => self.csv_fields(line)?,
        };
        if fields.len() != self.types.len() {
            return Err(self.error(&format!("has {} columns; the table takes {}", fields.len(), self.types.len())));
        }
        fields.into_iter().zip(&self.types).map(|(f, ty)| self.value(f, *ty)).collect::<Result<Vec<_>, _>>().map(Some)
    }

    fn error(&self, what: &str) -> Error {
        Error::sql(format!("COPY {}, line {}: the row {what}", self.spec.table, self.line))
    }

    /// A field as a value of its column's type: text for the engine to convert, except
    /// bytes (PostgreSQL's `\x…` hex) and booleans (`t`/`f`), which it could not read.
    fn value(&self, field: Option<String>, ty: DataType) -> Result<Value, Error> {
        let Some(text) = field else { return Ok(Value::Null) };
        Ok(match ty {
            DataType::Varbinary => {
                let hex = text.strip_prefix("\\x").unwrap_or(&text);
                Value::Bytes(lockstep_core::value::parse_hex(hex).ok_or_else(|| self.error("has bytes that are not \\x hex"))?.into())
            }
            DataType::Boolean => match text.to_ascii_lowercase().as_str() {
                "t" | "true" | "1" | "yes" | "on" => Value::Bool(true),
                "f" | "false" | "0" | "no" | "off" => Value::Bool(false),
                _ => return Err(self.error("has a boolean that is not t or f")),
            },
            _ => Value::Str(text.into()),
        })
    }

    /// Text format: fields split on the delimiter, `\N` for NULL, backslash escapes.
    fn text_fields(&self, line: &str) -> Result<Vec<Option<String>>, Error> {
        let mut fields = Vec::new();
        for raw in line.split(self.spec.delimiter) {
            if raw == self.spec.null {
                fields.push(None);
                continue;
            }
            fields.push(Some(unescape(raw)));
        }
        Ok(fields)
    }

    /// CSV: fields split on the delimiter outside double quotes (`""` is a quote inside);
    /// an unquoted field equal to the NULL text is NULL.
    fn csv_fields(&self, line: &str) -> Result<Vec<Option<String>>, Error> {
        let null = |field: String, was_quoted: bool| if !was_quoted && field == self.spec.null { None } else { Some(field) };
        let mut fields = Vec::new();
        let (mut field, mut was_quoted, mut quoted) = (String::new(), false, false);
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '"' if quoted && chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => {
                    quoted = !quoted;
                    was_quoted = true;
                }
                c if c == self.spec.delimiter && !quoted => {
                    fields.push(null(std::mem::take(&mut field), was_quoted));
                    was_quoted = false;
                }
                c => field.push(c),
            }
        }
        if quoted {
            return Err(self.error("has an unterminated quoted field"));
        }
        fields.push(null(field, was_quoted));
        Ok(fields)
    }
}

/// PostgreSQL's text-format escapes: `\t`, `\n`, `\\`, octal `\123`, hex `\x4f`, and `\c`
/// for any other character c.
fn unescape(raw: &str) -> String {
    if !raw.contains('\\') {
        return raw.to_string();
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push('\\');
            break;
        };
        match e {
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'v' => out.push('\u{b}'),
            'x' => {
                let mut v = 0u32;
                let mut n = 0;
                while n < 2 && chars.peek().is_some_and(char::is_ascii_hexdigit) {
                    v = v * 16 + chars.next().and_then(|d| d.to_digit(16)).unwrap_or(0);
                    n += 1;
                }
                if n == 0 {
                    out.push('x');
                } else {
                    out.push(char::from_u32(v).unwrap_or('\u{fffd}'));
                }
            }
            '0'..='7' => {
                let mut v = e.to_digit(8).unwrap_or(0);
                let mut n = 1;
                while n < 3 && chars.peek().is_some_and(|d| ('0'..='7').contains(d)) {
                    v = v * 8 + chars.next().and_then(|d| d.to_digit(8)).unwrap_or(0);
                    n += 1;
                }
                out.push(char::from_u32(v).unwrap_or('\u{fffd}'));
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::Str(v.into())
    }

    #[test]
    fn text_rows_may_be_cut_anywhere_between_messages() {
        let mut r = RowReader::new(CopyIn::new("T".into(), None), vec![DataType::Integer, DataType::Varchar, DataType::Varbinary]);
        let mut rows = r.feed(b"1\tone\t\\\\x0a\n2\t").unwrap();
        rows.extend(r.feed(b"tab\\there\t\\N\n3\t\\N\t\\\\xff").unwrap());
        rows.extend(r.finish().unwrap());
        assert_eq!(
            rows,
            [
                vec![s("1"), s("one"), Value::Bytes(vec![0x0a].into())],
                vec![s("2"), s("tab\there"), Value::Null],
                vec![s("3"), Value::Null, Value::Bytes(vec![0xff].into())]
            ]
        );
    }

    #[test]
    fn csv_rows_keep_quoted_delimiters_newlines_and_empty_strings() {
        let mut spec = CopyIn::new("T".into(), None);
        spec.option("FORMAT", Some("csv")).unwrap();
        spec.option("HEADER", None).unwrap();
        let mut r = RowReader::new(spec, vec![DataType::Integer, DataType::Varchar, DataType::Boolean]);
        let rows = r.feed(b"id,v,b\n1,\"a,b\",t\n2,\"line\nbreak \"\"q\"\"\",f\n3,,\n4,\"\",true\n").unwrap();
        assert_eq!(
            rows,
            [
                vec![s("1"), s("a,b"), Value::Bool(true)],
                vec![s("2"), s("line\nbreak \"q\""), Value::Bool(false)],
                vec![s("3"), Value::Null, Value::Null],
                vec![s("4"), s(""), Value::Bool(true)]
            ]
        );
    }

    #[test]
    fn a_row_of_the_wrong_width_names_its_line_and_the_end_marker_stops() {
        let mut r = RowReader::new(CopyIn::new("T".into(), None), vec![DataType::Integer, DataType::Integer]);
        let e = r.feed(b"1\t2\n3\n").unwrap_err();
        assert!(e.message.contains("line 2") && e.message.contains("has 1 columns"), "{}", e.message);
        let mut r = RowReader::new(CopyIn::new("T".into(), None), vec![DataType::Integer]);
        assert_eq!(r.feed(b"1\n\\.\n2\n").unwrap(), [vec![s("1")]]);
    }

    #[test]
    fn escapes_and_options_follow_postgresql() {
        assert_eq!(unescape(r"a\\b\nc\101\x42\q"), "a\\b\ncABq");
        let mut spec = CopyIn::new("T".into(), None);
        assert!(spec.option("DELIMITER", Some("ab")).is_err());
        assert!(spec.option("FORMAT", Some("binary")).is_err());
        spec.option("DELIMITER", Some("|")).unwrap();
        spec.option("NULL", Some("nil")).unwrap();
        let mut r = RowReader::new(spec, vec![DataType::Varchar, DataType::Varchar]);
        assert_eq!(r.feed(b"nil|x\n").unwrap(), [vec![Value::Null, s("x")]]);
    }
}
