//! A linear bound on how deeply a statement's text can nest expressions, checked before the
//! text reaches sqlparser.
//!
//! sqlparser builds an operator chain (`1+1+…`, `a AND b AND …`, `x || y || …`) in a loop,
//! as a left-deep tree one level deeper per operator, and counts none of it against its
//! recursion limit. Everything that then walks that tree — its `Drop`, `Display` and
//! `Clone`, our binder, planner and evaluator — recurses once per level, so a 66 KB chain
//! overflows a 2 MiB thread stack and kills the process. The only safe place to refuse
//! it is before the tree exists, so `parse_statements` scans the tokens first.
//!
//! The scan bounds the depth of the tree sqlparser would build:
//! - within one expression, every operator token (`+`, `AND`, `IS`, `NOT`, unary `-` …)
//!   may add a level, so the operators are counted (a chain of n operators is n + 1 deep);
//! - `,` and the keywords that always end an expression (`FROM`, `WHERE`, `WHEN` …) start
//!   a sibling, which is no deeper than the others;
//! - `(` … `)`, `[` … `]` and `CASE` … `END` nest: their content is one level deeper than
//!   the place they stand in.
//!
//! Any token sqlparser treats as an infix operator (those it gives a precedence in
//! `get_next_precedence_default`) is counted, so no chain escapes the count; nesting by
//! recursion (prefix operators, parentheses, calls) is bounded by sqlparser's own recursion
//! limit as well (`PARSER_RECURSION_MAX`).

use lockstep_core::{Error, Result};
use sqlparser::ast::Statement;
use sqlparser::dialect::GenericDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

use crate::expr::EXPR_DEPTH_MAX;
use crate::lex::{tokenize, Tok, TokKind};

/// sqlparser's recursion limit (its own default is 50). Each level of parentheses, call or
/// subquery costs sqlparser one or two steps of it, so twice the nesting we accept (plus
/// the statement's own few) never refuses what the scan let through, while still bounding
/// the parser's recursion on what the scan does not count (a prefix keyword repeated).
pub const PARSER_RECURSION_MAX: usize = 2 * EXPR_DEPTH_MAX + 16;

/// Words sqlparser may treat as an operator inside an expression (infix, like `AND`, `IS`,
/// `BETWEEN`; or prefix, like `NOT`, `INTERVAL`): each may add a level.
const OPERATOR_WORDS: &[&str] = &[
    "AND",
    "OR",
    "XOR",
    "NOT",
    "IS",
    "IN",
    "BETWEEN",
    "OVERLAPS",
    "LIKE",
    "ILIKE",
    "RLIKE",
    "REGEXP",
    "MATCH",
    "GLOB",
    "SIMILAR",
    "MEMBER",
    "OPERATOR",
    "DIV",
    "NOTNULL",
    "AT",
    "COLLATE",
    "INTERVAL",
    "PRIOR",
    "CONNECT_BY_ROOT",
    "EXISTS",
    "ANY",
    "ALL",
    "SOME",
];

/// Words that always end the expression before them: what follows is a sibling.
/// (`FROM` only when not part of `IS [NOT] DISTINCT FROM`, an operator.)
const SEPARATOR_WORDS: &[&str] =
    &["SELECT", "FROM", "WHERE", "GROUP", "HAVING", "ORDER", "LIMIT", "OFFSET", "ON", "JOIN", "SET", "VALUES", "WHEN", "THEN", "ELSE"];

#[derive(Clone, Copy, PartialEq)]
enum Opener {
    /// The whole statement.
    Root,
    /// `(` or `[`.
    Bracket,
    Case,
}

/// One level of nesting being scanned.
struct Frame {
    opener: Opener,
    /// Operators seen in the current sibling expression.
    ops: usize,
    /// Depth of the deepest nested group in the current sibling, plus the level it adds.
    sub: usize,
    /// Depth of the deepest finished sibling.
    best: usize,
}

impl Frame {
    fn new(opener: Opener) -> Frame {
        Frame { opener, ops: 0, sub: 0, best: 0 }
    }

    /// Depth of the current sibling: a chain of `ops` operators over operands the deepest
    /// of which is `sub` deep.
    fn current(&self) -> usize {
        self.ops.saturating_add(self.sub.max(1))
    }

    fn end_sibling(&mut self) {
        self.best = self.best.max(self.current());
        self.ops = 0;
        self.sub = 0;
    }

    fn depth(&self) -> usize {
        self.best.max(self.current())
    }
}

fn is_one_of(t: &Tok, words: &[&str]) -> bool {
    t.kind == TokKind::Word && words.iter().any(|w| t.text.eq_ignore_ascii_case(w))
}

/// Closes the innermost frame, handing its depth to the one around it.
fn close(stack: &mut Vec<Frame>) {
    if stack.len() < 2 {
        return; // an unbalanced `)`: sqlparser will refuse the text
    }
    if let Some(f) = stack.pop() {
        let d = f.depth();
        if let Some(parent) = stack.last_mut() {
            parent.sub = parent.sub.max(d.saturating_add(1));
        }
    }
}

/// An upper bound on the depth of the expression trees sqlparser would build from these
/// tokens (one pass, no recursion).
pub fn nesting_depth(toks: &[Tok]) -> usize {
    let mut stack = vec![Frame::new(Opener::Root)];
    let mut prev: Option<&Tok> = None;
    for t in toks {
        let top = stack.len() - 1;
        match t.kind {
            TokKind::Punct => match t.text.as_str() {
                "(" => stack.push(Frame::new(Opener::Bracket)),
                "[" => {
                    // A subscript is also an operator on what stands before it.
                    stack[top].ops += 1;
                    stack.push(Frame::new(Opener::Bracket));
                }
                ")" | "]" => {
                    // Close any CASE left open inside the brackets first.
                    while stack.last().is_some_and(|f| f.opener == Opener::Case) && stack.len() > 1 {
                        close(&mut stack);
                    }
                    close(&mut stack);
                }
                "," | ";" => stack[top].end_sibling(),
                "." => {} // a qualified name or field access: a flat list in sqlparser
                _ => stack[top].ops += 1,
            },
            TokKind::Word if t.is_word("CASE") => stack.push(Frame::new(Opener::Case)),
            // `END` of anything else (a procedure body's) nests nothing.
            TokKind::Word if t.is_word("END") && stack[top].opener == Opener::Case => close(&mut stack),
            TokKind::Word if t.is_word("FROM") && prev.is_some_and(|p| p.is_word("DISTINCT")) => stack[top].ops += 1,
            TokKind::Word if is_one_of(t, SEPARATOR_WORDS) => stack[top].end_sibling(),
            TokKind::Word if is_one_of(t, OPERATOR_WORDS) => stack[top].ops += 1,
            _ => {}
        }
        prev = Some(t);
    }
    while stack.len() > 1 {
        close(&mut stack);
    }
    stack[0].depth()
}

/// Refuses text that nests expressions deeper than `EXPR_DEPTH_MAX`.
pub fn check_nesting(toks: &[Tok]) -> Result<()> {
    let depth = nesting_depth(toks);
    if depth > EXPR_DEPTH_MAX {
        return Err(too_deep(depth));
    }
    Ok(())
}

fn too_deep(depth: usize) -> Error {
    Error::sql(format!("the statement nests expressions {depth} deep; the limit is {EXPR_DEPTH_MAX}: simplify it or split it"))
}

/// Parses SQL text with sqlparser after checking how deeply it nests, so that neither the
/// parser nor anything walking its trees can run out of stack. `what` names the text in
/// syntax errors ("", or " in view V").
pub fn parse_statements(sql: &str, what: &str) -> Result<Vec<Statement>> {
    let toks = tokenize(sql)?;
    check_nesting(&toks)?;
    let dialect = GenericDialect {};
    let parsed = Tokenizer::new(&dialect, sql).tokenize_with_location().map_err(ParserError::from).and_then(|mut tokens| {
        top_as_column(&mut tokens);
        Parser::new(&dialect).with_recursion_limit(PARSER_RECURSION_MAX).with_tokens_with_locations(tokens).parse_statements()
    });
    parsed.map_err(|e| match e {
        ParserError::RecursionLimitExceeded => Error::sql(format!(
            "the statement{what} nests expressions more than {PARSER_RECURSION_MAX} parser steps deep; the limit is {EXPR_DEPTH_MAX} levels: simplify it or split it"
        )),
        e => Error::sql(format!("SQL syntax error{what}: {e}")),
    })
}

/// Makes a column named `top` readable unquoted: sqlparser takes `TOP` right after
/// SELECT (or SELECT DISTINCT / ALL) for T-SQL's `TOP n` in every dialect, but Lockstep
/// has no TOP (VoltDB's SQL has LIMIT), so there a `TOP` followed by neither a number nor
/// `(` is handed over as a plain name. `TOP 5` stays the keyword, refused as before.
fn top_as_column(tokens: &mut [TokenWithSpan]) {
    let significant: Vec<usize> = (0..tokens.len()).filter(|&i| !matches!(tokens[i].token, Token::Whitespace(_))).collect();
    let is_word = |t: &Token, k: Keyword| matches!(t, Token::Word(w) if w.keyword == k && w.quote_style.is_none());
    for (n, &i) in significant.iter().enumerate() {
        let after_select =
            n > 0 && [Keyword::SELECT, Keyword::DISTINCT, Keyword::ALL].iter().any(|&k| is_word(&tokens[significant[n - 1]].token, k));
        let quantity_follows = significant.get(n + 1).is_some_and(|&j| matches!(tokens[j].token, Token::Number(..) | Token::LParen));
        if after_select && !quantity_follows {
            if let Token::Word(w) = &mut tokens[i].token {
                if w.keyword == Keyword::TOP && w.quote_style.is_none() {
                    w.keyword = Keyword::NoKeyword;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth(sql: &str) -> usize {
        nesting_depth(&tokenize(sql).unwrap())
    }

    /// A column named `top` needs no quotes, first in a select list too; `TOP n` is still
    /// T-SQL's clause (which the planner refuses).
    #[test]
    fn a_column_named_top_reads_unquoted() {
        let mut db = crate::tests_sql::Db::new("CREATE TABLE t (top INTEGER, b INTEGER);");
        db.run("INSERT INTO t VALUES (1, 2)");
        let one = vec![vec![lockstep_core::Value::Int(1)]];
        for q in
            ["SELECT top FROM t", "SELECT DISTINCT top FROM t", "SELECT top FROM t WHERE top = 1 ORDER BY top", "SELECT top + 0 FROM t"]
        {
            assert_eq!(db.rows(q), one, "{q}");
        }
        assert_eq!(db.rows("SELECT top, b FROM t").len(), 1);
        let err = db.err("SELECT TOP 1 b FROM t");
        assert!(err.contains("not supported"), "{err}");
    }

    #[test]
    fn chains_count_their_operators() {
        assert_eq!(depth("SELECT 1"), 1);
        assert_eq!(depth("SELECT 1+1+1"), 3);
        assert_eq!(depth("SELECT a FROM t WHERE a = 1 AND b = 2 OR c = 3"), 6);
        assert_eq!(depth("SELECT 'a' || 'b' || 'c' || 'd'"), 4);
        assert_eq!(depth("SELECT - - - 1"), 4);
        assert_eq!(depth("SELECT a IS DISTINCT FROM b IS DISTINCT FROM c"), 5);
    }

    #[test]
    fn commas_and_clauses_start_siblings() {
        assert_eq!(depth("SELECT a+b, c+d+e FROM t WHERE x = 1 ORDER BY a+b"), 3);
        let values: Vec<String> = (0..5000).map(|i| format!("({i}, 'x{i}')")).collect();
        assert_eq!(depth(&format!("INSERT INTO t VALUES {}", values.join(", "))), 2);
        let items: Vec<String> = (0..10_000).map(|i| i.to_string()).collect();
        assert_eq!(depth(&format!("SELECT * FROM t WHERE a IN ({})", items.join(","))), 3);
        assert_eq!(depth("SELECT CASE WHEN a = 1 THEN 2 WHEN a = 3 THEN 4 ELSE 5 END FROM t"), 3);
    }

    #[test]
    fn brackets_calls_and_case_nest() {
        assert_eq!(depth("SELECT ((1))"), 3);
        assert_eq!(depth("SELECT ABS(ABS(1))"), 3);
        assert_eq!(depth("SELECT 1+(1+(1))"), 5);
        assert_eq!(depth("SELECT CASE WHEN 1=1 THEN CASE WHEN 2=2 THEN 3 END END"), 4);
        // Unbalanced text still gets a bound (sqlparser refuses it afterwards).
        assert_eq!(depth("SELECT ((((1"), 5);
        assert_eq!(depth("SELECT 1)))"), 1);
    }
}
