//! Rendering results: `table` (comfy-table and a row count), `csv` (RFC 4180) and `json`
//! (one object per result on its own line).

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::Table;
use lockstep_core::{DataType, ResultTable, Value};

/// Output format of the shell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    #[default]
    Table,
    Csv,
    Json,
}

/// A DML result: one BIGINT column `modified_tuples`, one row.
pub fn modified_count(t: &ResultTable) -> Option<i64> {
    match (&t.columns[..], &t.rows[..]) {
        ([c], [row]) if c.name.eq_ignore_ascii_case("modified_tuples") && c.ty == DataType::BigInt => row.first().and_then(Value::as_i64),
        _ => None,
    }
}

/// Renders one result table in `format`; None when the format prints nothing for it (CSV
/// prints only statements that return rows).
pub fn render(t: &ResultTable, format: Format) -> Option<String> {
    match format {
        Format::Table => Some(match modified_count(t) {
            Some(n) => format!("({n} row{} affected)\n", plural(n)),
            None => render_table(t),
        }),
        Format::Csv => modified_count(t).is_none().then(|| render_csv(t)),
        Format::Json => Some(render_json(t)),
    }
}

fn plural(n: i64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "NULL".to_string(),
        v => v.to_string(),
    }
}

fn render_table(t: &ResultTable) -> String {
    let mut table = Table::new();
    table.load_style(UTF8_FULL_CONDENSED);
    table.set_header(t.columns.iter().map(|c| c.name.clone()));
    for row in &t.rows {
        table.add_row(row.iter().map(cell));
    }
    let n = t.rows.len() as i64;
    format!("{table}\n({n} row{} returned)\n", plural(n))
}

/// One CSV field: quoted when it holds a comma, a quote or a line break; NULL is empty.
pub fn csv_field(v: &Value) -> String {
    let s = match v {
        Value::Null => return String::new(),
        v => v.to_string(),
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

fn render_csv(t: &ResultTable) -> String {
    let mut out = String::new();
    let header: Vec<String> = t.columns.iter().map(|c| csv_field(&Value::Str(c.name.to_string().into()))).collect();
    out.push_str(&header.join(","));
    out.push_str("\r\n");
    for row in &t.rows {
        let fields: Vec<String> = row.iter().map(csv_field).collect();
        out.push_str(&fields.join(","));
        out.push_str("\r\n");
    }
    out
}

fn json_value(v: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        Value::Null => J::Null,
        Value::Int(i) => J::from(*i),
        Value::Float(f) => serde_json::Number::from_f64(*f).map(J::Number).unwrap_or(J::Null),
        Value::Bool(b) => J::Bool(*b),
        Value::Array(items) => J::Array(items.iter().map(json_value).collect()),
        // Decimals keep every digit as text; timestamps and bytes print as the shell shows them.
        v => J::String(v.to_string()),
    }
}

fn render_json(t: &ResultTable) -> String {
    let columns: Vec<&str> = t.columns.iter().map(|c| c.name.as_ref()).collect();
    let rows: Vec<Vec<serde_json::Value>> = t.rows.iter().map(|r| r.iter().map(json_value).collect()).collect();
    let obj = serde_json::json!({ "columns": columns, "rows": rows });
    format!("{obj}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> ResultTable {
        let mut t = ResultTable::with_columns(&[("ID", DataType::BigInt), ("NAME", DataType::Varchar)]);
        t.push(vec![Value::Int(1), Value::from("a,b")]);
        t.push(vec![Value::Null, Value::from("say \"hi\"\nbye")]);
        t
    }

    #[test]
    fn csv_quotes_as_rfc_4180() {
        assert_eq!(csv_field(&Value::from("plain")), "plain");
        assert_eq!(csv_field(&Value::from("a,b")), "\"a,b\"");
        assert_eq!(csv_field(&Value::from("q\"q")), "\"q\"\"q\"");
        assert_eq!(csv_field(&Value::Null), "");
        assert_eq!(render(&table(), Format::Csv).unwrap(), "ID,NAME\r\n1,\"a,b\"\r\n,\"say \"\"hi\"\"\nbye\"\r\n");
    }

    #[test]
    fn json_is_one_object_per_result() {
        assert_eq!(
            render(&table(), Format::Json).unwrap(),
            "{\"columns\":[\"ID\",\"NAME\"],\"rows\":[[1,\"a,b\"],[null,\"say \\\"hi\\\"\\nbye\"]]}\n"
        );
    }

    #[test]
    fn dml_counts_print_as_rows_affected() {
        let t = ResultTable::modified(3);
        assert_eq!(render(&t, Format::Table).unwrap(), "(3 rows affected)\n");
        assert_eq!(render(&ResultTable::modified(1), Format::Table).unwrap(), "(1 row affected)\n");
        assert_eq!(render(&t, Format::Csv), None);
        let out = render(&table(), Format::Table).unwrap();
        assert!(out.contains("NAME") && out.contains("NULL") && out.ends_with("(2 rows returned)\n"), "{out}");
    }
}
