//! GEOGRAPHY_POINT and GEOGRAPHY: columns, VoltDB's functions with their answers worked out
//! on VoltDB's sphere (radius 6,371,008.8 m: one degree of a great circle is 111,195.08 m),
//! NULLs, comparisons and the refusals.

use lockstep_core::Value;

use crate::tests_sql::{i, s, Db, N};

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{v:?} is not a number"))
}

/// Metres in one degree of a great circle on VoltDB's sphere.
const DEGREE_M: f64 = 6_371_008.8 * std::f64::consts::TAU / 360.0;

fn db() -> Db {
    let mut db =
        Db::new("CREATE TABLE places (id INTEGER NOT NULL PRIMARY KEY, name VARCHAR(20), loc GEOGRAPHY_POINT, area GEOGRAPHY(2048));");
    db.run(
        "INSERT INTO places VALUES
            (1, 'origin', POINTFROMTEXT('POINT(0 0)'), POLYGONFROMTEXT('POLYGON((0 0, 1 0, 1 1, 0 1, 0 0))')),
            (2, 'east', 'POINT(1 0)', 'POLYGON((10 10, 12 10, 12 12, 10 12, 10 10), (10.5 10.5, 10.5 11, 11 11, 11 10.5, 10.5 10.5))'),
            (3, 'nothing', NULL, NULL)",
    );
    db
}

#[test]
fn points_and_polygons_read_back_as_voltdb_writes_them() {
    let mut db = db();
    assert_eq!(
        db.rows("SELECT ASTEXT(loc), ASTEXT(area) FROM places WHERE id = 1"),
        vec![vec![s("POINT (0.0 0.0)"), s("POLYGON ((0.0 0.0, 1.0 0.0, 1.0 1.0, 0.0 1.0, 0.0 0.0))")]]
    );
    assert_eq!(db.rows("SELECT LONGITUDE(loc), LATITUDE(loc) FROM places WHERE id = 2"), vec![vec![Value::Float(1.0), Value::Float(0.0)]]);
    assert_eq!(db.rows("SELECT NUMPOINTS(area), NUMINTERIORRINGS(area) FROM places WHERE id = 2"), vec![vec![i(10), i(1)]]);
    // NULL in, NULL out.
    assert_eq!(db.rows("SELECT ASTEXT(loc), AREA(area), DISTANCE(loc, loc) FROM places WHERE id = 3"), vec![vec![N, N, N]]);
    assert_eq!(db.rows("SELECT id FROM places WHERE loc IS NULL"), vec![vec![i(3)]]);
}

#[test]
fn distances_areas_and_containment_are_on_the_sphere() {
    let mut db = db();
    let d = f(&db.rows("SELECT DISTANCE(a.loc, b.loc) FROM places a, places b WHERE a.id = 1 AND b.id = 2")[0][0]);
    assert!((d - DEGREE_M).abs() < 1e-6, "{d}");
    // A point 1° east of the unit square's east edge, at its middle latitude.
    let d = f(&db.rows("SELECT DISTANCE(area, POINTFROMTEXT('POINT(2 0.5)')) FROM places WHERE id = 1")[0][0]);
    assert!((d / DEGREE_M - 1.0).abs() < 1e-3, "{d}");
    assert_eq!(db.rows("SELECT DISTANCE(POINTFROMTEXT('POINT(0.5 0.5)'), area) FROM places WHERE id = 1"), vec![vec![Value::Float(0.0)]]);
    let a = f(&db.rows("SELECT AREA(area) FROM places WHERE id = 1")[0][0]);
    assert!((a / (DEGREE_M * DEGREE_M) - 1.0).abs() < 1e-3, "{a}");
    // A 2° square less a 0.5° hole, at 10°-12° north: (4 - 0.25) square degrees, each
    // cos(11°) of one at the equator.
    let a = f(&db.rows("SELECT AREA(area) FROM places WHERE id = 2")[0][0]);
    let want = 3.75 * 11f64.to_radians().cos();
    assert!((a / (DEGREE_M * DEGREE_M) / want - 1.0).abs() < 1e-3, "{a}");
    assert_eq!(db.rows("SELECT id FROM places WHERE CONTAINS(area, POINTFROMTEXT('POINT(11.8 11.8)')) ORDER BY id"), vec![vec![i(2)]]);
    assert!(db.rows("SELECT id FROM places WHERE CONTAINS(area, POINTFROMTEXT('POINT(10.7 10.7)'))").is_empty(), "in the hole");
    assert_eq!(db.rows("SELECT id FROM places WHERE DWITHIN(loc, POINTFROMTEXT('POINT(0 0.5)'), 60000) ORDER BY id"), vec![vec![i(1)]]);
    assert_eq!(db.rows("SELECT COUNT(*) FROM places WHERE DWITHIN(loc, POINTFROMTEXT('POINT(0 0.5)'), 200000)"), vec![vec![i(2)]]);
    // The exact centroid: on the centre meridian, and a little north of 0.5° because the
    // top edge is a great circle, which bows towards the pole.
    assert_eq!(db.rows("SELECT ASTEXT(CENTROID(area)) FROM places WHERE id = 1"), vec![vec![s("POINT (0.5 0.500006342322)")]]);
}

#[test]
fn validity_is_reported_and_repaired() {
    let mut db = db();
    let cw = "POLYGONFROMTEXT('POLYGON((0 0, 0 1, 1 1, 1 0, 0 0))')";
    assert_eq!(db.rows(&format!("SELECT ISVALID({cw})")), vec![vec![Value::Bool(false)]]);
    let why = db.rows(&format!("SELECT ISINVALIDREASON({cw})"));
    assert!(why[0][0].as_str().is_some_and(|w| w.contains("clockwise")), "{why:?}");
    assert_eq!(db.rows("SELECT ISINVALIDREASON(area) FROM places WHERE id = 1"), vec![vec![s("Valid Polygon")]]);
    assert_eq!(
        db.rows(&format!("SELECT ASTEXT(MAKEVALIDPOLYGON({cw}))")),
        vec![vec![s("POLYGON ((0.0 0.0, 1.0 0.0, 1.0 1.0, 0.0 1.0, 0.0 0.0))")]]
    );
    let e = db.err("SELECT VALIDPOLYGONFROMTEXT('POLYGON((0 0, 1 1, 1 0, 0 1, 0 0))')");
    assert!(e.contains("crosses itself"), "{e}");
}

#[test]
fn comparisons_order_and_equality_follow_voltdb() {
    let mut db = db();
    db.run("INSERT INTO places VALUES (4, 'west', POINTFROMTEXT('POINT(-5 3)'), NULL), (5, 'again', POINTFROMTEXT('POINT(0 0)'), NULL)");
    assert_eq!(db.rows("SELECT id FROM places WHERE loc = POINTFROMTEXT('POINT(0 0)') ORDER BY id"), vec![vec![i(1)], vec![i(5)]]);
    assert_eq!(db.rows("SELECT id FROM places WHERE loc = 'POINT(1 0)'"), vec![vec![i(2)]]);
    // Points sort by longitude, then latitude; NULL first.
    assert_eq!(db.rows("SELECT id FROM places ORDER BY loc, id"), vec![vec![i(3)], vec![i(4)], vec![i(1)], vec![i(5)], vec![i(2)]]);
    assert_eq!(db.rows("SELECT COUNT(DISTINCT loc) FROM places"), vec![vec![i(3)]]);
}

#[test]
fn bad_values_and_misuse_are_refused_with_reasons() {
    let mut db = db();
    assert!(db.err("INSERT INTO places VALUES (9, 'x', 'POINT(181 0)', NULL)").contains("longitude 181"));
    assert!(db.err("INSERT INTO places VALUES (9, 'x', NULL, 'POLYGON((0 0, 1 0, 1 1, 0 0.5))')").contains("not closed"));
    assert!(db.err("SELECT POINTFROMTEXT('POINT(1)')").contains("expected"));
    assert!(db.err("SELECT CONTAINS(loc, area) FROM places").contains("CONTAINS needs a GEOGRAPHY"));
    assert!(db.err("SELECT DISTANCE(area, area) FROM places").contains("two polygons"));
    assert!(db.err("SELECT id FROM places WHERE loc = area").contains("cannot compare"));
    assert!(db.err("SELECT id FROM places WHERE loc > 3").contains("cannot compare"));
    // GEOGRAPHY(n) limits the bytes of the polygon's wire form: 40 + 43 + 24 per vertex.
    let mut small = Db::new("CREATE TABLE s (id INTEGER NOT NULL PRIMARY KEY, g GEOGRAPHY(155))");
    small.run("INSERT INTO s VALUES (1, 'POLYGON((0 0, 1 0, 1 1, 0 0))')");
    assert!(small.err("INSERT INTO s VALUES (2, 'POLYGON((0 0, 1 0, 1 1, 0 1, 0 0))')").contains("179 bytes, limit 155"));
    // Polygons are no keys, and no table is partitioned on a geography column.
    let mut c = Db::new("CREATE TABLE g (id INTEGER NOT NULL PRIMARY KEY, p GEOGRAPHY_POINT NOT NULL, g GEOGRAPHY)");
    let ddl = |c: &mut Db, sql: &str| crate::apply_ddl(&mut c.cat, sql, &crate::tests_sql::NoFiles).map(|_| ()).map_err(|e| e.message);
    assert!(ddl(&mut c, "CREATE INDEX g_g ON g (g)").unwrap_err().contains("polygons cannot be index"));
    assert!(ddl(&mut c, "CREATE INDEX g_c ON g (CENTROID(g))").is_ok());
    assert!(ddl(&mut c, "CREATE INDEX g_m ON g (MAKEVALIDPOLYGON(g))").unwrap_err().contains("polygons cannot be index"));
    assert!(ddl(&mut c, "PARTITION TABLE g ON COLUMN p").unwrap_err().contains("geography column"));
    assert!(ddl(&mut c, "CREATE TABLE h (g GEOGRAPHY(100))").unwrap_err().contains("155 to 1048576"));
}
