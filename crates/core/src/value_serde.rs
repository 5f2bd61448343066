//! `Value` as serde data, for what one node sends another (a fragment's parameters and
//! rows). An array may hold scalars only, as VoltDB's array parameters do: a value read off
//! the network can then nest one level at most, so no input can make decoding recurse deep.

use std::sync::Arc;

use compact_str::CompactString;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::geo::{GeoPoint, Polygon, V3};
use crate::value::Value;

/// A value as written, borrowing from the `Value`. Its variants (names and order) are
/// those of `Owned`: the two are one format.
#[derive(Serialize)]
#[serde(rename = "Value")]
enum Borrowed<'a> {
    Null,
    Int(i64),
    Float(f64),
    Decimal(i128),
    Str(&'a str),
    Bytes(&'a [u8]),
    Timestamp(i64),
    Bool(bool),
    Array(&'a [Value]),
    Point(f64, f64),
    /// The polygon's rings of unit vectors (x, y, z).
    Geography(Vec<Vec<(f64, f64, f64)>>),
}

/// A value as read: `A` is what an array holds (`Scalar` at the top, nothing below it).
#[derive(Deserialize)]
#[serde(rename = "Value")]
enum Owned<A> {
    Null,
    Int(i64),
    Float(f64),
    Decimal(i128),
    Str(CompactString),
    Bytes(Vec<u8>),
    Timestamp(i64),
    Bool(bool),
    Array(Vec<A>),
    Point(f64, f64),
    Geography(Vec<Vec<(f64, f64, f64)>>),
}

/// What an array's element may not be: another array.
#[derive(Deserialize)]
enum NoArray {}

/// An array's element: any value but an array.
#[derive(Deserialize)]
#[serde(transparent)]
struct Scalar(Owned<NoArray>);

impl<A> Owned<A> {
    fn into_value(self, element: impl Fn(A) -> Value) -> Value {
        match self {
            Owned::Null => Value::Null,
            Owned::Int(v) => Value::Int(v),
            Owned::Float(v) => Value::Float(v),
            Owned::Decimal(v) => Value::Decimal(v.into()),
            Owned::Str(s) => Value::Str(s),
            Owned::Bytes(b) => Value::Bytes(Arc::from(b)),
            Owned::Timestamp(v) => Value::Timestamp(v),
            Owned::Bool(v) => Value::Bool(v),
            Owned::Array(items) => Value::Array(items.into_iter().map(element).collect()),
            Owned::Point(lng, lat) => Value::Point(GeoPoint { lng, lat }),
            Owned::Geography(rings) => Value::Geography(Arc::new(Polygon {
                rings: rings.into_iter().map(|r| r.into_iter().map(|(x, y, z)| V3(x, y, z)).collect()).collect(),
            })),
        }
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let b = match self {
            Value::Null => Borrowed::Null,
            Value::Int(v) => Borrowed::Int(*v),
            Value::Float(v) => Borrowed::Float(*v),
            Value::Decimal(v) => Borrowed::Decimal(v.get()),
            Value::Str(v) => Borrowed::Str(v.as_str()),
            Value::Bytes(v) => Borrowed::Bytes(&v[..]),
            Value::Timestamp(v) => Borrowed::Timestamp(*v),
            Value::Bool(v) => Borrowed::Bool(*v),
            Value::Array(v) => Borrowed::Array(v),
            Value::Point(p) => Borrowed::Point(p.lng, p.lat),
            Value::Geography(g) => Borrowed::Geography(g.rings.iter().map(|r| r.iter().map(|v| (v.0, v.1, v.2)).collect()).collect()),
        };
        b.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        let top = Owned::<Scalar>::deserialize(d)?;
        Ok(top.into_value(|Scalar(item)| item.into_value(|never: NoArray| match never {})))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(v: &Value) -> Value {
        let bytes = postcard::to_stdvec(v).unwrap_or_else(|e| panic!("{v:?}: {e}"));
        postcard::from_bytes(&bytes).unwrap_or_else(|e| panic!("{v:?}: {e}"))
    }

    /// Every kind of value comes back exactly as it went (`Ord` is the total order, so
    /// equal means same kind and same bits where it matters).
    #[test]
    fn every_kind_of_value_survives_postcard() {
        let values = [
            Value::Null,
            Value::Int(i64::MIN),
            Value::Int(42),
            Value::Float(-1.5),
            Value::Decimal(crate::Dec::new(-123_456_789_012_345_678_901_234_567_890)),
            Value::from("short"),
            Value::from("a string longer than twenty-four bytes, kept on the heap"),
            Value::Bytes(vec![0, 255, 7].into()),
            Value::Timestamp(1_700_000_000_000_000),
            Value::Bool(true),
            Value::Array(vec![Value::Int(1), Value::from("x"), Value::Null].into()),
            Value::Point(crate::geo::GeoPoint { lng: -71.5, lat: 42.25 }),
            Value::Geography(Arc::new(crate::geo::parse_polygon("POLYGON((0 0, 1 0, 1 1, 0 0))").unwrap())),
        ];
        for v in &values {
            let back = round_trip(v);
            assert_eq!(format!("{back:?}"), format!("{v:?}"));
            assert_eq!(back.cmp(v), std::cmp::Ordering::Equal, "{v:?}");
        }
    }

    /// An array inside an array is refused while decoding, so a deep nest sent by a peer
    /// cannot recurse the decoder off its stack.
    #[test]
    fn an_array_of_arrays_is_refused() {
        let nested = Value::Array(vec![Value::Array(vec![Value::Int(1)].into())].into());
        let bytes = postcard::to_stdvec(&nested).unwrap_or_else(|e| panic!("{e}"));
        assert!(postcard::from_bytes::<Value>(&bytes).is_err());
        // A deep nest built by hand: ~100,000 "array of one" headers.
        let mut deep = Vec::new();
        for _ in 0..100_000 {
            deep.extend([8u8, 1]);
        }
        assert!(postcard::from_bytes::<Value>(&deep).is_err());
    }
}
