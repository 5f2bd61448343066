//! VoltDB's JSON functions over VARCHAR values holding JSON text: `FIELD(json, path)`,
//! `ARRAY_ELEMENT(json, n)`, `ARRAY_LENGTH(json)` and `SET_FIELD(json, path, value)`.
//!
//! As VoltDB answers them: what they return is text (a string without its quotes, any other
//! value as compact JSON); a path that names nothing, a JSON `null`, a position outside the
//! array and a value that is not an array give NULL; text that is not JSON is an error,
//! since a query cannot tell it from a value that is missing. A path is names separated by
//! `.`, each optionally followed by `[n]` array positions (0-based); a `\` makes the next
//! character part of the name (`a\.b` is the one field "a.b").

use lockstep_core::{Error, Result, Value};
use serde_json::Value as Json;

/// Most steps a path may take: a longer path is refused before any work is done.
pub const JSON_PATH_STEPS_MAX: usize = 256;

/// One step of a path: into an object's field or an array's element.
#[derive(Debug, PartialEq)]
enum Step {
    Field(String),
    Element(usize),
}

fn parse_json(f: &str, text: &str) -> Result<Json> {
    serde_json::from_str(text).map_err(|e| Error::sql(format!("{f}: the value is not valid JSON ({e}); store JSON text in the column")))
}

fn parse_new_value(text: &str) -> Result<Json> {
    serde_json::from_str(text).map_err(|e| {
        Error::sql(format!("SET_FIELD: the new value is not valid JSON ({e}); give JSON text, such as '\"text\"' for a string"))
    })
}

fn bad_path(path: &str, why: &str) -> Error {
    Error::sql(format!("invalid JSON path '{path}': {why}"))
}

/// Splits a path into steps.
fn parse_path(path: &str) -> Result<Vec<Step>> {
    let mut steps = Vec::new();
    let mut chars = path.chars().peekable();
    let mut name = String::new();
    let mut named = false;
    loop {
        let c = chars.next();
        match c {
            Some('\\') => {
                let Some(next) = chars.next() else {
                    return Err(bad_path(path, "it ends with '\\'"));
                };
                name.push(next);
                named = true;
            }
            Some('[') => {
                if named || steps.is_empty() {
                    steps.push(Step::Field(std::mem::take(&mut name)));
                    named = false;
                }
                let mut digits = String::new();
                for d in chars.by_ref() {
                    if d == ']' {
                        break;
                    }
                    digits.push(d);
                }
                let n: usize = digits.trim().parse().map_err(|_| bad_path(path, "an array position must be a number in [ ]"))?;
                steps.push(Step::Element(n));
                match chars.peek() {
                    None | Some('[') => {}
                    Some('.') => {
                        chars.next();
                    }
                    Some(_) => return Err(bad_path(path, "']' must be followed by '.', '[' or the end")),
                }
            }
            Some('.') | None => {
                if named || !matches!(steps.last(), Some(Step::Element(_))) || c == Some('.') {
                    steps.push(Step::Field(std::mem::take(&mut name)));
                }
                named = false;
                if c.is_none() {
                    break;
                }
            }
            Some(other) => {
                name.push(other);
                named = true;
            }
        }
        if steps.len() > JSON_PATH_STEPS_MAX {
            return Err(bad_path(path, &format!("it has more than {JSON_PATH_STEPS_MAX} steps")));
        }
    }
    // A path ending in `]` leaves nothing to add; a leading `[n]` reads the top-level array.
    if let Some(Step::Field(first)) = steps.first() {
        if first.is_empty() && matches!(steps.get(1), Some(Step::Element(_))) {
            steps.remove(0);
        }
    }
    Ok(steps)
}

/// The value at `steps` under `doc`, if there is one.
fn find<'a>(doc: &'a Json, steps: &[Step]) -> Option<&'a Json> {
    let mut at = doc;
    for step in steps {
        at = match step {
            Step::Field(name) => at.as_object()?.get(name)?,
            Step::Element(i) => at.as_array()?.get(*i)?,
        };
    }
    Some(at)
}

/// A JSON value as the functions return it: NULL for `null`, a string's text, or compact JSON.
fn as_text(v: &Json) -> Value {
    match v {
        Json::Null => Value::Null,
        Json::String(s) => Value::Str(s.as_str().into()),
        other => Value::Str(other.to_string().into()),
    }
}

fn text<'a>(f: &str, v: &'a Value) -> Result<&'a str> {
    v.as_str().ok_or_else(|| Error::sql(format!("{f} needs VARCHAR JSON text, not {}", v.describe())))
}

/// `FIELD(json, path)`.
pub fn field(json: &Value, path: &Value) -> Result<Value> {
    let doc = parse_json("FIELD", text("FIELD", json)?)?;
    let steps = parse_path(text("FIELD", path)?)?;
    Ok(find(&doc, &steps).map_or(Value::Null, as_text))
}

/// `ARRAY_ELEMENT(json, position)`, 0-based.
pub fn array_element(json: &Value, position: i64) -> Result<Value> {
    let doc = parse_json("ARRAY_ELEMENT", text("ARRAY_ELEMENT", json)?)?;
    let element = usize::try_from(position).ok().and_then(|i| doc.as_array()?.get(i));
    Ok(element.map_or(Value::Null, as_text))
}

/// `ARRAY_LENGTH(json)`: NULL when the value is not an array.
pub fn array_length(json: &Value) -> Result<Value> {
    let doc = parse_json("ARRAY_LENGTH", text("ARRAY_LENGTH", json)?)?;
    Ok(doc.as_array().map_or(Value::Null, |a| Value::Int(a.len() as i64)))
}

/// `SET_FIELD(json, path, value)`: the document with the value at `path` replaced by
/// `value`, itself JSON text (`'"text"'` for a string). Fields missing on the way are
/// added; an array position past the end, or a step into a value that is neither an
/// object nor an array, leaves the document as it was.
pub fn set_field(json: &Value, path: &Value, new: &Value) -> Result<Value> {
    let mut doc = parse_json("SET_FIELD", text("SET_FIELD", json)?)?;
    let steps = parse_path(text("SET_FIELD", path)?)?;
    let new = parse_new_value(text("SET_FIELD", new)?)?;
    let mut changed = doc.clone();
    if let Some(slot) = slot(&mut changed, &steps) {
        *slot = new;
        doc = changed;
    }
    Ok(Value::Str(doc.to_string().into()))
}

/// Where `steps` lead in `doc`, adding the fields missing on the way.
fn slot<'a>(doc: &'a mut Json, steps: &[Step]) -> Option<&'a mut Json> {
    let mut at = doc;
    for step in steps {
        at = match step {
            Step::Field(name) => at.as_object_mut()?.entry(name.clone()).or_insert(Json::Null),
            Step::Element(i) => at.as_array_mut()?.get_mut(*i)?,
        };
        if matches!(at, Json::Null) {
            // A field just added (or holding null) with more steps to go becomes an object.
            *at = Json::Object(serde_json::Map::new());
        }
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_split_into_fields_and_positions() {
        let f = |s: &str| Step::Field(s.into());
        assert_eq!(parse_path("a").unwrap(), vec![f("a")]);
        assert_eq!(parse_path("a.b[2].c").unwrap(), vec![f("a"), f("b"), Step::Element(2), f("c")]);
        assert_eq!(parse_path("a[1][0]").unwrap(), vec![f("a"), Step::Element(1), Step::Element(0)]);
        assert_eq!(parse_path("[3]").unwrap(), vec![Step::Element(3)]);
        assert_eq!(parse_path(r"a\.b.c").unwrap(), vec![f("a.b"), f("c")]);
        assert!(parse_path("a[x]").unwrap_err().message.contains("must be a number"));
        assert!(parse_path("a[1]b").unwrap_err().message.contains("must be followed"));
        assert!(parse_path(&"a.".repeat(JSON_PATH_STEPS_MAX + 1)).unwrap_err().message.contains("more than"));
    }
}
