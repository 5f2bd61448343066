//! VoltDB's geospatial functions over GEOGRAPHY_POINT and GEOGRAPHY values; the geometry
//! itself (WKT, distances and areas on VoltDB's sphere, validity) is `lockstep_core::geo`.

use std::sync::Arc;

use lockstep_core::geo::{self, GeoPoint, Polygon};
use lockstep_core::{DataType, Error, Result, Value};

/// One geospatial function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GeoFunc {
    PointFromText,
    PolygonFromText,
    ValidPolygonFromText,
    Longitude,
    Latitude,
    Distance,
    DWithin,
    Contains,
    Area,
    Centroid,
    AsText,
    IsValid,
    IsInvalidReason,
    NumPoints,
    NumInteriorRings,
    MakeValidPolygon,
}

use GeoFunc as G;

/// The function of an upper-cased name.
pub fn lookup(name: &str) -> Option<GeoFunc> {
    Some(match name {
        "POINTFROMTEXT" => G::PointFromText,
        "POLYGONFROMTEXT" => G::PolygonFromText,
        "VALIDPOLYGONFROMTEXT" => G::ValidPolygonFromText,
        "LONGITUDE" => G::Longitude,
        "LATITUDE" => G::Latitude,
        "DISTANCE" => G::Distance,
        "DWITHIN" => G::DWithin,
        "CONTAINS" => G::Contains,
        "AREA" => G::Area,
        "CENTROID" => G::Centroid,
        "ASTEXT" => G::AsText,
        "ISVALID" => G::IsValid,
        "ISINVALIDREASON" => G::IsInvalidReason,
        "NUMPOINTS" => G::NumPoints,
        "NUMINTERIORRINGS" => G::NumInteriorRings,
        "MAKEVALIDPOLYGON" => G::MakeValidPolygon,
        _ => return None,
    })
}

impl GeoFunc {
    /// The SQL name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            G::PointFromText => "POINTFROMTEXT",
            G::PolygonFromText => "POLYGONFROMTEXT",
            G::ValidPolygonFromText => "VALIDPOLYGONFROMTEXT",
            G::Longitude => "LONGITUDE",
            G::Latitude => "LATITUDE",
            G::Distance => "DISTANCE",
            G::DWithin => "DWITHIN",
            G::Contains => "CONTAINS",
            G::Area => "AREA",
            G::Centroid => "CENTROID",
            G::AsText => "ASTEXT",
            G::IsValid => "ISVALID",
            G::IsInvalidReason => "ISINVALIDREASON",
            G::NumPoints => "NUMPOINTS",
            G::NumInteriorRings => "NUMINTERIORRINGS",
            G::MakeValidPolygon => "MAKEVALIDPOLYGON",
        }
    }

    pub fn arity(self) -> (usize, usize) {
        match self {
            G::Distance | G::Contains => (2, 2),
            G::DWithin => (3, 3),
            _ => (1, 1),
        }
    }
}

const POINT: Option<DataType> = Some(DataType::GeographyPoint);
const POLYGON: Option<DataType> = Some(DataType::Geography);

/// Fails unless argument `i` (1-based in the message) is of one of `want` (or unknown).
fn need(f: GeoFunc, args: &[Option<DataType>], i: usize, want: &[Option<DataType>], what: &str) -> Result<()> {
    match args.get(i).copied().flatten() {
        Some(t) if !want.contains(&Some(t)) => {
            Err(Error::sql(format!("{} needs {what} as argument {}, not {}", f.name(), i + 1, t.sql_name())))
        }
        _ => Ok(()),
    }
}

/// The result type, checking the arguments' types.
pub fn result_type(f: GeoFunc, args: &[Option<DataType>]) -> Result<Option<DataType>> {
    let text = [Some(DataType::Varchar)];
    let number = [
        Some(DataType::Float),
        Some(DataType::Decimal),
        Some(DataType::BigInt),
        Some(DataType::Integer),
        Some(DataType::SmallInt),
        Some(DataType::TinyInt),
    ];
    Ok(match f {
        G::PointFromText => {
            need(f, args, 0, &text, "WKT text")?;
            POINT
        }
        G::PolygonFromText | G::ValidPolygonFromText => {
            need(f, args, 0, &text, "WKT text")?;
            POLYGON
        }
        G::Longitude | G::Latitude => {
            need(f, args, 0, &[POINT], "a GEOGRAPHY_POINT")?;
            Some(DataType::Float)
        }
        G::Distance | G::DWithin => {
            need(f, args, 0, &[POINT, POLYGON], "a GEOGRAPHY_POINT or GEOGRAPHY")?;
            need(f, args, 1, &[POINT, POLYGON], "a GEOGRAPHY_POINT or GEOGRAPHY")?;
            if args.first().copied().flatten() == POLYGON && args.get(1).copied().flatten() == POLYGON {
                return Err(Error::sql(format!(
                    "{} of two polygons is not supported: give a point and a polygon, or two points",
                    f.name()
                )));
            }
            if f == G::DWithin {
                need(f, args, 2, &number, "a distance in metres")?;
                Some(DataType::Boolean)
            } else {
                Some(DataType::Float)
            }
        }
        G::Contains => {
            need(f, args, 0, &[POLYGON], "a GEOGRAPHY")?;
            need(f, args, 1, &[POINT], "a GEOGRAPHY_POINT")?;
            Some(DataType::Boolean)
        }
        G::AsText => {
            need(f, args, 0, &[POINT, POLYGON], "a GEOGRAPHY_POINT or GEOGRAPHY")?;
            Some(DataType::Varchar)
        }
        G::Area | G::Centroid | G::IsValid | G::IsInvalidReason | G::NumPoints | G::NumInteriorRings | G::MakeValidPolygon => {
            need(f, args, 0, &[POLYGON], "a GEOGRAPHY")?;
            Some(match f {
                G::Area => DataType::Float,
                G::Centroid => DataType::GeographyPoint,
                G::IsValid => DataType::Boolean,
                G::IsInvalidReason => DataType::Varchar,
                G::NumPoints | G::NumInteriorRings => DataType::Integer,
                _ => DataType::Geography,
            })
        }
    })
}

fn wrong(f: GeoFunc, v: &Value, what: &str) -> Error {
    Error::sql(format!("{} needs {what}, not {}", f.name(), v.describe()))
}

/// A point argument; WKT text is read as POINTFROMTEXT would.
fn point(f: GeoFunc, v: &Value) -> Result<GeoPoint> {
    match v {
        Value::Point(p) => Ok(*p),
        Value::Str(s) => geo::parse_point(s),
        _ => Err(wrong(f, v, "a GEOGRAPHY_POINT")),
    }
}

/// A polygon argument; WKT text is read as POLYGONFROMTEXT would.
fn polygon(f: GeoFunc, v: &Value) -> Result<Arc<Polygon>> {
    match v {
        Value::Geography(g) => Ok(g.clone()),
        Value::Str(s) => Ok(Arc::new(geo::parse_polygon(s)?)),
        _ => Err(wrong(f, v, "a GEOGRAPHY")),
    }
}

fn text(f: GeoFunc, v: &Value) -> Result<&str> {
    v.as_str().ok_or_else(|| wrong(f, v, "WKT text (a VARCHAR)"))
}

/// Metres between a point and a point or a polygon, either way round.
fn distance(f: GeoFunc, a: &Value, b: &Value) -> Result<f64> {
    Ok(match (a, b) {
        (Value::Geography(g), p) | (p, Value::Geography(g)) => g.distance_to(&point(f, p)?),
        (p, q) => point(f, p)?.distance(&point(f, q)?),
    })
}

/// Applies `f` to its evaluated arguments, none of them NULL.
pub fn apply(f: GeoFunc, vals: &[Value]) -> Result<Value> {
    let v0 = &vals[0];
    Ok(match f {
        G::PointFromText => Value::Point(geo::parse_point(text(f, v0)?)?),
        G::PolygonFromText => Value::Geography(Arc::new(geo::parse_polygon(text(f, v0)?)?)),
        G::ValidPolygonFromText => {
            let g = geo::parse_polygon(text(f, v0)?)?;
            if let Some(why) = g.invalid_reason() {
                return Err(Error::sql(format!("VALIDPOLYGONFROMTEXT: the polygon is not valid: {why}")));
            }
            Value::Geography(Arc::new(g))
        }
        G::Longitude => Value::Float(point(f, v0)?.lng),
        G::Latitude => Value::Float(point(f, v0)?.lat),
        G::Distance => Value::Float(distance(f, v0, &vals[1])?),
        G::DWithin => {
            let limit = vals[2].as_f64().ok_or_else(|| wrong(f, &vals[2], "a distance in metres"))?;
            if limit < 0.0 {
                return Err(Error::sql("DWITHIN: the distance must not be negative"));
            }
            Value::Bool(distance(f, v0, &vals[1])? <= limit)
        }
        G::Contains => Value::Bool(polygon(f, v0)?.contains(&point(f, &vals[1])?)),
        G::Area => Value::Float(polygon(f, v0)?.area()),
        G::Centroid => Value::Point(polygon(f, v0)?.centroid()),
        G::AsText => match v0 {
            Value::Point(_) | Value::Geography(_) => Value::Str(v0.to_string().into()),
            _ => return Err(wrong(f, v0, "a GEOGRAPHY_POINT or GEOGRAPHY")),
        },
        G::IsValid => Value::Bool(polygon(f, v0)?.invalid_reason().is_none()),
        G::IsInvalidReason => Value::Str(polygon(f, v0)?.invalid_reason().unwrap_or_else(|| "Valid Polygon".into()).into()),
        G::NumPoints => Value::Int(polygon(f, v0)?.num_points() as i64),
        G::NumInteriorRings => Value::Int(polygon(f, v0)?.num_interior_rings() as i64),
        G::MakeValidPolygon => Value::Geography(Arc::new(polygon(f, v0)?.make_valid()?)),
    })
}
