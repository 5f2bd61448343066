//! Splits shell input into statements and directives, line by line: `;` ends a statement
//! unless it is inside quotes, comments, `$tag$` dollar quotes or a `CREATE PROCEDURE … AS
//! BEGIN … END` body; sqlcmd directives (`exec`, `show`, `file -inlinebatch`, …) are lines.

/// Most nested `CASE`/`BEGIN` levels tracked in a procedure body; deeper input is still
/// split, just without further nesting bookkeeping.
const BLOCK_DEPTH_MAX: u32 = 1000;

/// Words that begin a one-line shell directive when they start a statement.
const DIRECTIVES: &[&str] = &["exec", "execute", "help", "quit", "exit", "show", "file", "load", "remove"];

/// One unit of work for the shell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// A SQL statement without its terminating `;`.
    Sql(String),
    /// A directive line without a trailing `;`.
    Directive(String),
    /// The text between `file -inlinebatch NAME` and the line `NAME`.
    InlineBatch(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Lex {
    Normal,
    SingleQuote,
    DoubleQuote,
    BlockComment,
    Dollar(String),
}

/// Incremental splitter; feed it lines, take the items it completes.
#[derive(Debug)]
pub struct Splitter {
    buf: String,
    lex: Lex,
    /// Whether the statement so far has anything besides whitespace and comments.
    meaningful: bool,
    word: String,
    /// The first words of the statement, uppercased (enough to spot CREATE PROCEDURE).
    head: Vec<String>,
    prev_word: String,
    /// Open BEGIN/CASE blocks of a procedure body; Some once `AS BEGIN` was seen.
    body_depth: Option<u32>,
    inline: Option<(String, String)>,
}

impl Default for Splitter {
    fn default() -> Self {
        Self::new()
    }
}

impl Splitter {
    pub fn new() -> Self {
        Splitter {
            buf: String::new(),
            lex: Lex::Normal,
            meaningful: false,
            word: String::new(),
            head: Vec::new(),
            prev_word: String::new(),
            body_depth: None,
            inline: None,
        }
    }

    /// True when no statement is half-read (the shell shows its main prompt).
    pub fn is_idle(&self) -> bool {
        !self.meaningful && self.lex == Lex::Normal && self.inline.is_none()
    }

    /// Feeds one line (without its newline); returns the items it completed.
    pub fn push_line(&mut self, line: &str) -> Vec<Item> {
        let mut out = Vec::new();
        if let Some((tag, body)) = &mut self.inline {
            if line.trim() == tag {
                out.push(Item::InlineBatch(std::mem::take(body)));
                self.inline = None;
            } else {
                body.push_str(line);
                body.push('\n');
            }
            return out;
        }
        if self.is_idle() {
            if let Some(item) = self.directive(line) {
                out.extend(item);
                return out;
            }
        }
        let chars: Vec<char> = line.chars().chain(std::iter::once('\n')).collect();
        let mut i = 0;
        while i < chars.len() {
            i = self.step(&chars, i, &mut out);
        }
        out
    }

    /// Ends the input: a last statement without `;` is still returned.
    pub fn finish(&mut self) -> Option<Item> {
        if let Some((_, body)) = self.inline.take() {
            return Some(Item::InlineBatch(body));
        }
        let meaningful = self.meaningful;
        let text = std::mem::take(&mut self.buf);
        self.reset();
        meaningful.then(|| Item::Sql(text.trim().to_string()))
    }

    /// Recognizes a directive line at the start of a statement.
    fn directive(&mut self, line: &str) -> Option<Option<Item>> {
        let trimmed = line.trim();
        let first = trimmed.split_whitespace().next()?.to_ascii_lowercase();
        let first = first.trim_end_matches(';');
        if !DIRECTIVES.contains(&first) {
            return None;
        }
        let text = trimmed.trim_end_matches(';').trim_end().to_string();
        let words: Vec<&str> = text.split_whitespace().collect();
        if words.len() == 3 && words[0].eq_ignore_ascii_case("file") && words[1].eq_ignore_ascii_case("-inlinebatch") {
            self.inline = Some((words[2].to_string(), String::new()));
            return Some(None);
        }
        Some(Some(Item::Directive(text)))
    }

    fn reset(&mut self) {
        self.buf.clear();
        self.meaningful = false;
        self.word.clear();
        self.head.clear();
        self.prev_word.clear();
        self.body_depth = None;
    }

    /// Processes the character at `i`; returns the index of the next one.
    fn step(&mut self, chars: &[char], i: usize, out: &mut Vec<Item>) -> usize {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match self.lex.clone() {
            Lex::SingleQuote | Lex::DoubleQuote => {
                self.buf.push(c);
                let close = if self.lex == Lex::SingleQuote { '\'' } else { '"' };
                if c == close {
                    // A doubled quote is an escaped quote, not the end.
                    if next == Some(close) {
                        self.buf.push(close);
                        return i + 2;
                    }
                    self.lex = Lex::Normal;
                }
                i + 1
            }
            Lex::BlockComment => {
                self.buf.push(c);
                if c == '*' && next == Some('/') {
                    self.buf.push('/');
                    self.lex = Lex::Normal;
                    return i + 2;
                }
                i + 1
            }
            Lex::Dollar(tag) => {
                let delim: Vec<char> = format!("${tag}$").chars().collect();
                if chars[i..].starts_with(&delim) {
                    self.buf.extend(delim.iter());
                    self.lex = Lex::Normal;
                    return i + delim.len();
                }
                self.buf.push(c);
                i + 1
            }
            Lex::Normal => self.step_normal(chars, i, out),
        }
    }

    fn step_normal(&mut self, chars: &[char], i: usize, out: &mut Vec<Item>) -> usize {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c.is_alphanumeric() || c == '_' {
            self.word.push(c);
            self.buf.push(c);
            self.meaningful = true;
            return i + 1;
        }
        self.end_word();
        match c {
            '-' if next == Some('-') => {
                // A line comment: drop the rest of the line (the newline is kept).
                self.buf.push('\n');
                return chars.len();
            }
            '/' if next == Some('*') => {
                self.buf.push_str("/*");
                self.lex = Lex::BlockComment;
                return i + 2;
            }
            '\'' => self.lex = Lex::SingleQuote,
            '"' => self.lex = Lex::DoubleQuote,
            '$' => {
                if let Some(tag) = dollar_tag(&chars[i..]) {
                    self.buf.push('$');
                    self.buf.push_str(&tag);
                    self.buf.push('$');
                    self.meaningful = true;
                    let len = tag.chars().count() + 2;
                    self.lex = Lex::Dollar(tag);
                    return i + len;
                }
            }
            ';' if !self.in_open_body() => {
                let text = std::mem::take(&mut self.buf);
                if self.meaningful {
                    out.push(Item::Sql(text.trim().to_string()));
                }
                self.reset();
                return i + 1;
            }
            _ => {}
        }
        if !c.is_whitespace() {
            self.meaningful = true;
        }
        self.buf.push(c);
        i + 1
    }

    /// Closes the word being read and updates the procedure-body bookkeeping.
    fn end_word(&mut self) {
        if self.word.is_empty() {
            return;
        }
        let w = std::mem::take(&mut self.word).to_ascii_uppercase();
        if self.head.len() < 4 {
            self.head.push(w.clone());
        }
        let is_create_proc = self.head.first().is_some_and(|h| h == "CREATE") && self.head.iter().any(|h| h == "PROCEDURE");
        match (self.body_depth, w.as_str()) {
            (None, "BEGIN") if is_create_proc && self.prev_word == "AS" => self.body_depth = Some(1),
            (Some(d), "BEGIN" | "CASE") if d > 0 => self.body_depth = Some((d + 1).min(BLOCK_DEPTH_MAX)),
            (Some(d), "END") if d > 0 => self.body_depth = Some(d - 1),
            _ => {}
        }
        self.prev_word = w;
    }

    fn in_open_body(&self) -> bool {
        matches!(self.body_depth, Some(d) if d > 0)
    }
}

/// The tag of a dollar quote opening at `chars[0]` (`$$` or `$tag$`), if one does.
fn dollar_tag(chars: &[char]) -> Option<String> {
    let mut tag = String::new();
    for (n, &c) in chars.iter().enumerate().skip(1) {
        if c == '$' {
            return Some(tag);
        }
        if !(c.is_alphanumeric() || c == '_') || (n == 1 && c.is_ascii_digit()) {
            return None;
        }
        tag.push(c);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits a whole script.
    fn split_script(text: &str) -> Vec<Item> {
        let mut s = Splitter::new();
        let mut out = Vec::new();
        for line in text.lines() {
            out.extend(s.push_line(line));
        }
        out.extend(s.finish());
        out
    }

    fn sql(s: &str) -> Item {
        Item::Sql(s.into())
    }

    #[test]
    fn semicolons_inside_quotes_and_comments_do_not_split() {
        let items = split_script("SELECT 'a;b', \"c;d\" FROM t; -- x; y\nINSERT INTO t VALUES ('it''s;');\n/* ; */ SELECT 1;");
        assert_eq!(items, vec![sql("SELECT 'a;b', \"c;d\" FROM t"), sql("INSERT INTO t VALUES ('it''s;')"), sql("/* ; */ SELECT 1")]);
    }

    #[test]
    fn statements_span_lines_and_the_last_needs_no_semicolon() {
        let mut s = Splitter::new();
        assert_eq!(s.push_line("SELECT *"), vec![]);
        assert!(!s.is_idle());
        assert_eq!(s.push_line("FROM t;  SELECT 2"), vec![sql("SELECT *\nFROM t")]);
        assert_eq!(s.finish(), Some(sql("SELECT 2")));
        assert!(s.is_idle());
        assert_eq!(split_script("-- only a comment\n\n"), vec![]);
    }

    #[test]
    fn dollar_quotes_hold_semicolons() {
        let items = split_script("CREATE PROCEDURE p AS $lua$\nreturn function() x(); end\n$lua$;\nSELECT $$a;b$$;");
        assert_eq!(items, vec![sql("CREATE PROCEDURE p AS $lua$\nreturn function() x(); end\n$lua$"), sql("SELECT $$a;b$$")]);
    }

    #[test]
    fn procedure_bodies_run_to_their_end() {
        let text =
            "CREATE PROCEDURE p AS BEGIN\n  UPDATE t SET x = CASE WHEN y > 0 THEN 1 ELSE 2 END;\n  SELECT * FROM t;\nEND;\nSELECT 1;";
        let items = split_script(text);
        assert_eq!(items.len(), 2, "{items:?}");
        assert!(matches!(&items[0], Item::Sql(s) if s.ends_with("SELECT * FROM t;\nEND")));
        assert_eq!(items[1], sql("SELECT 1"));
        // BEGIN outside a procedure definition is an ordinary word.
        assert_eq!(split_script("SELECT begin FROM t; SELECT 2;").len(), 2);
    }

    #[test]
    fn directives_are_lines_and_inline_batches_are_collected() {
        let items = split_script("exec Vote 1, 'a;b'\nshow tables;\nfile -inlinebatch END_OF_BATCH\nCREATE TABLE a (x INT);\nCREATE TABLE b (y INT);\nEND_OF_BATCH\nSELECT 1;");
        assert_eq!(
            items,
            vec![
                Item::Directive("exec Vote 1, 'a;b'".into()),
                Item::Directive("show tables".into()),
                Item::InlineBatch("CREATE TABLE a (x INT);\nCREATE TABLE b (y INT);\n".into()),
                sql("SELECT 1"),
            ]
        );
        // A directive word in the middle of a statement is just SQL.
        assert_eq!(split_script("SELECT\nexec FROM t;"), vec![sql("SELECT\nexec FROM t")]);
    }
}
