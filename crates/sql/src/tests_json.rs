//! VoltDB's JSON functions over a VARCHAR column: FIELD, ARRAY_ELEMENT, ARRAY_LENGTH and
//! SET_FIELD, with NULL, missing paths and malformed JSON answered as VoltDB answers them.

use lockstep_core::Value;

use crate::tests_sql::{i, s, Db};

const AUTHOR: &str = r#"{"first":"Charles","birth":1812,"alive":false,"spouse":null,
  "description":{"genre":"fiction","children":["Charles","Mary","Kate"],"a.b":1}}"#;

fn db() -> Db {
    let mut db = Db::new("CREATE TABLE a (id INTEGER NOT NULL PRIMARY KEY, profile VARCHAR(500));");
    db.try_run("INSERT INTO a VALUES (1, ?)", &[s(AUTHOR)]).unwrap();
    db.run("INSERT INTO a VALUES (2, NULL)");
    db.run("INSERT INTO a VALUES (3, '[[0,1,2,3],[\"zero\",\"one\"]]')");
    db
}

fn one(db: &mut Db, sql: &str) -> Value {
    db.rows(sql).remove(0).remove(0)
}

#[test]
fn field_reads_paths_and_answers_text() {
    let mut db = db();
    let q = |path: &str| format!("SELECT FIELD(profile, '{path}') FROM a WHERE id = 1");
    assert_eq!(one(&mut db, &q("first")), s("Charles"));
    // Every value comes back as text; objects and arrays as compact JSON.
    assert_eq!(one(&mut db, &q("birth")), s("1812"));
    assert_eq!(one(&mut db, &q("alive")), s("false"));
    assert_eq!(one(&mut db, &q("description.genre")), s("fiction"));
    assert_eq!(one(&mut db, &q("description.children[2]")), s("Kate"));
    assert_eq!(one(&mut db, &q("description.children")), s(r#"["Charles","Mary","Kate"]"#));
    assert_eq!(one(&mut db, &q(r"description.a\.b")), s("1"));
    // Missing fields, positions past the end and JSON null are NULL.
    for path in ["nope", "description.children[7]", "first.deeper", "spouse"] {
        assert_eq!(one(&mut db, &q(path)), Value::Null, "{path}");
    }
    assert_eq!(db.rows("SELECT id FROM a WHERE FIELD(profile, 'birth') = '1812'"), vec![vec![i(1)]]);
    // A NULL column gives NULL; nested calls walk further.
    assert_eq!(one(&mut db, "SELECT FIELD(profile, 'first') FROM a WHERE id = 2"), Value::Null);
    assert_eq!(one(&mut db, "SELECT FIELD(FIELD(profile, 'description'), 'genre') FROM a WHERE id = 1"), s("fiction"));
}

#[test]
fn array_functions_count_and_pick_elements() {
    let mut db = db();
    assert_eq!(one(&mut db, "SELECT ARRAY_LENGTH(profile) FROM a WHERE id = 3"), i(2));
    assert_eq!(one(&mut db, "SELECT ARRAY_ELEMENT(profile, 0) FROM a WHERE id = 3"), s("[0,1,2,3]"));
    assert_eq!(one(&mut db, "SELECT ARRAY_ELEMENT(ARRAY_ELEMENT(profile, 1), 1) FROM a WHERE id = 3"), s("one"));
    assert_eq!(one(&mut db, "SELECT ARRAY_ELEMENT(ARRAY_ELEMENT(profile, 0), 2) FROM a WHERE id = 3"), s("2"));
    let last = "SELECT ARRAY_ELEMENT(FIELD(profile, 'description.children'), ARRAY_LENGTH(FIELD(profile, 'description.children')) - 1) FROM a WHERE id = 1";
    assert_eq!(one(&mut db, last), s("Kate"));
    // Outside the array, or not an array: NULL.
    for sql in [
        "SELECT ARRAY_ELEMENT(profile, -1) FROM a WHERE id = 3",
        "SELECT ARRAY_ELEMENT(profile, 2) FROM a WHERE id = 3",
        "SELECT ARRAY_ELEMENT(profile, 0) FROM a WHERE id = 1",
        "SELECT ARRAY_LENGTH(profile) FROM a WHERE id = 1",
        "SELECT ARRAY_LENGTH(profile) FROM a WHERE id = 2",
    ] {
        assert_eq!(one(&mut db, sql), Value::Null, "{sql}");
    }
}

#[test]
fn set_field_replaces_and_adds_values() {
    let mut db = db();
    db.run(r#"UPDATE a SET profile = SET_FIELD(profile, 'first', '"Charlie"') WHERE id = 1"#);
    assert_eq!(one(&mut db, "SELECT FIELD(profile, 'first') FROM a WHERE id = 1"), s("Charlie"));
    assert_eq!(one(&mut db, "SELECT FIELD(profile, 'birth') FROM a WHERE id = 1"), s("1812"));
    db.run("UPDATE a SET profile = SET_FIELD(profile, 'description.children[1]', '{\"name\":\"Mamie\"}') WHERE id = 1");
    assert_eq!(one(&mut db, "SELECT FIELD(profile, 'description.children[1].name') FROM a WHERE id = 1"), s("Mamie"));
    // A missing field is added, with the objects on its way.
    assert_eq!(one(&mut db, r#"SELECT SET_FIELD('{"a":1}', 'b.c', '2') FROM a WHERE id = 1"#), s(r#"{"a":1,"b":{"c":2}}"#));
    // A position past the end changes nothing.
    assert_eq!(one(&mut db, "SELECT SET_FIELD('[1,2]', '[5]', '3') FROM a WHERE id = 1"), s("[1,2]"));
    assert_eq!(one(&mut db, "SELECT SET_FIELD(profile, 'x', '1') FROM a WHERE id = 2"), Value::Null);
    assert!(db.err("SELECT SET_FIELD('{}', 'x', 'not json') FROM a WHERE id = 1").contains("new value is not valid JSON"));
}

#[test]
fn malformed_json_and_wrong_types_are_errors() {
    let mut db = db();
    db.run("INSERT INTO a VALUES (4, '{\"unterminated\": ')");
    for sql in [
        "SELECT FIELD(profile, 'x') FROM a WHERE id = 4",
        "SELECT ARRAY_LENGTH(profile) FROM a WHERE id = 4",
        "SELECT ARRAY_ELEMENT(profile, 0) FROM a WHERE id = 4",
        "SELECT SET_FIELD(profile, 'x', '1') FROM a WHERE id = 4",
    ] {
        assert!(db.err(sql).contains("not valid JSON"), "{sql}");
    }
    assert!(db.err("SELECT FIELD(id, 'x') FROM a").contains("VARCHAR"));
    assert!(db.err("SELECT FIELD(profile, 'a[x]') FROM a WHERE id = 1").contains("invalid JSON path"));
}

/// The examples of the SQL guide, with the answers it shows.
#[test]
fn the_guide_examples_answer_as_shown() {
    let mut db = db();
    assert_eq!(one(&mut db, r#"SELECT FIELD('{"a":{"b":[1,"two"]}}', 'a.b[1]')"#), s("two"));
    assert_eq!(one(&mut db, "SELECT ARRAY_LENGTH('[1,2,3]')"), i(3));
    assert_eq!(one(&mut db, r#"SELECT SET_FIELD('{"a":1}', 'b', '"x"')"#), s(r#"{"a":1,"b":"x"}"#));
}
