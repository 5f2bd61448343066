//! VoltDB's geography values: `GEOGRAPHY_POINT` (a longitude and a latitude in degrees) and
//! `GEOGRAPHY` (a polygon: an outer ring and any holes), their text form (WKT), their wire
//! form, and the measures VoltDB's functions give on a sphere of radius 6,371,008.8 m.
//!
//! Edges are arcs of great circles, as VoltDB's are: a point is inside a ring when the
//! ring winds around it, areas are spherical excess times the radius squared. A polygon is
//! held as VoltDB holds it, its vertices unit vectors (which is also its wire form, so what
//! a client sends, the command log keeps and a snapshot stores comes back bit for bit), its
//! rings without the closing point that WKT repeats; the outer ring is counter-clockwise
//! and holes clockwise, as WKT writes them (`invalid_reason` checks it).

use std::cmp::Ordering;
use std::fmt::Write;

use crate::error::{Error, Result};

/// VoltDB's radius of the earth, in metres (the mean radius).
pub const EARTH_RADIUS_M: f64 = 6_371_008.8;
/// Most vertices one polygon may have, all rings together: validity checks compare every
/// pair of edges, so this bounds their time.
pub const POLYGON_VERTICES_MAX: usize = 8192;
/// Most rings one polygon may have.
pub const POLYGON_RINGS_MAX: usize = 1024;
/// Bytes of a polygon's wire form before its rings: the header and the closing bound.
const WIRE_POLYGON_BYTES: usize = 7 + 33;
/// Bytes of each ring's wire form besides its vertices.
const WIRE_RING_BYTES: usize = 1 + 4 + 1 + 4 + 33;
/// Bytes of one vertex in the wire form (x, y, z on the unit sphere).
const WIRE_VERTEX_BYTES: usize = 24;
/// VoltDB's empty bound: a flag and four doubles of 360.
const EMPTY_BOUND: f64 = 360.0;
/// How far from 1 the length of a vertex read off the wire may be.
const UNIT_TOLERANCE: f64 = 1e-6;

/// A point on the earth, in degrees.
#[derive(Clone, Copy, Debug)]
pub struct GeoPoint {
    pub lng: f64,
    pub lat: f64,
}

/// A polygon: `rings[0]` the outer boundary, the others holes, each without its closing
/// point, each vertex a unit vector.
#[derive(Clone, Debug)]
pub struct Polygon {
    pub rings: Vec<Vec<V3>>,
}

fn geo_error(what: impl Into<String>) -> Error {
    Error::sql(what.into())
}

impl GeoPoint {
    /// A point, refusing coordinates off the globe (as VoltDB does).
    pub fn new(lng: f64, lat: f64) -> Result<GeoPoint> {
        if !(-180.0..=180.0).contains(&lng) {
            return Err(geo_error(format!("longitude {lng} is out of range: it must be between -180 and 180")));
        }
        if !(-90.0..=90.0).contains(&lat) {
            return Err(geo_error(format!("latitude {lat} is out of range: it must be between -90 and 90")));
        }
        Ok(GeoPoint { lng, lat })
    }

    /// The point as a unit vector.
    pub fn xyz(self) -> V3 {
        let (lat, lng) = (self.lat.to_radians(), self.lng.to_radians());
        V3(lng.cos() * lat.cos(), lng.sin() * lat.cos(), lat.sin())
    }

    /// The point a (unit) vector points at.
    pub fn from_xyz(v: V3) -> GeoPoint {
        let lat = v.2.atan2((v.0 * v.0 + v.1 * v.1).sqrt()).to_degrees();
        let lng = if v.0 == 0.0 && v.1 == 0.0 { 0.0 } else { v.1.atan2(v.0).to_degrees() };
        GeoPoint { lng, lat }
    }

    /// The order VoltDB sorts points in: by longitude, then latitude.
    pub fn total_cmp(&self, other: &GeoPoint) -> Ordering {
        self.lng.total_cmp(&other.lng).then(self.lat.total_cmp(&other.lat))
    }

    /// `POINT (lng lat)`.
    pub fn wkt(&self) -> String {
        format!("POINT ({} {})", coord(self.lng), coord(self.lat))
    }

    /// Great-circle distance in metres.
    pub fn distance(&self, other: &GeoPoint) -> f64 {
        let (la1, la2) = (self.lat.to_radians(), other.lat.to_radians());
        let dlat = la2 - la1;
        let dlng = (other.lng - self.lng).to_radians();
        let h = (dlat / 2.0).sin().powi(2) + la1.cos() * la2.cos() * (dlng / 2.0).sin().powi(2);
        2.0 * h.sqrt().min(1.0).asin() * EARTH_RADIUS_M
    }
}

/// A coordinate as VoltDB prints it: at least one and at most 12 digits after the point.
fn coord(v: f64) -> String {
    let mut s = format!("{v:.12}");
    while s.ends_with('0') && !s.ends_with(".0") {
        s.pop();
    }
    if s.trim_start_matches('-').chars().all(|c| c == '0' || c == '.') {
        return "0.0".into();
    }
    s
}

/// A vector in 3-space (points are unit vectors).
#[derive(Clone, Copy, Debug)]
pub struct V3(pub f64, pub f64, pub f64);

impl V3 {
    fn total_cmp(&self, o: &V3) -> Ordering {
        self.0.total_cmp(&o.0).then(self.1.total_cmp(&o.1)).then(self.2.total_cmp(&o.2))
    }
    fn same(&self, o: &V3) -> bool {
        self.0 == o.0 && self.1 == o.1 && self.2 == o.2
    }
    fn dot(self, o: V3) -> f64 {
        self.0 * o.0 + self.1 * o.1 + self.2 * o.2
    }
    fn cross(self, o: V3) -> V3 {
        V3(self.1 * o.2 - self.2 * o.1, self.2 * o.0 - self.0 * o.2, self.0 * o.1 - self.1 * o.0)
    }
    fn add(self, o: V3) -> V3 {
        V3(self.0 + o.0, self.1 + o.1, self.2 + o.2)
    }
    fn scale(self, k: f64) -> V3 {
        V3(self.0 * k, self.1 * k, self.2 * k)
    }
    fn norm(self) -> f64 {
        self.dot(self).sqrt()
    }
    /// The angle between two unit vectors, in radians.
    fn angle(self, o: V3) -> f64 {
        self.cross(o).norm().atan2(self.dot(o))
    }
}

/// The centroid of spherical triangle (a, b, c), as a vector scaled by the triangle's
/// signed size (the determinant of a, b, c): it solves [a; b; c] · m = r / 2, where r holds
/// each side's angle over its sine, without dividing by the determinant.
fn true_centroid(a: V3, b: V3, c: V3) -> V3 {
    let ratio = |angle: f64| if angle == 0.0 { 1.0 } else { angle / angle.sin() };
    let (ra, rb, rc) = (ratio(b.angle(c)), ratio(c.angle(a)), ratio(a.angle(b)));
    // The first row taken from the other two (which leaves the solution alone): close
    // vertices then cancel in differences, not in products of nearly equal numbers.
    let r = V3(ra, rb - ra, rc - ra);
    let (x, y, z) = (V3(a.0, b.0 - a.0, c.0 - a.0), V3(a.1, b.1 - a.1, c.1 - a.1), V3(a.2, b.2 - a.2, c.2 - a.2));
    V3(y.cross(z).dot(r), z.cross(x).dot(r), x.cross(y).dot(r)).scale(0.5)
}

/// Signed spherical excess of triangle (a, b, c): positive when counter-clockwise.
fn triangle_excess(a: V3, b: V3, c: V3) -> f64 {
    2.0 * a.dot(b.cross(c)).atan2(1.0 + a.dot(b) + b.dot(c) + c.dot(a))
}

/// Signed area of a ring in steradians (fan from its first vertex): positive when the ring
/// is counter-clockwise around what it encloses.
fn ring_excess(ring: &[V3]) -> f64 {
    (1..ring.len().saturating_sub(1)).map(|i| triangle_excess(ring[0], ring[i], ring[i + 1])).sum()
}

/// How many times a ring winds around `p` (its edges' angles seen from `p`, summed), as
/// a fraction of a full turn: about ±1 inside, about 0 outside.
fn winding(ring: &[V3], p: V3) -> f64 {
    let mut total = 0.0;
    for i in 0..ring.len() {
        let (a, b) = (ring[i], ring[(i + 1) % ring.len()]);
        total += p.dot(a.cross(b)).atan2(a.dot(b) - p.dot(a) * p.dot(b));
    }
    total / std::f64::consts::TAU
}

/// Whether arcs ab and cd cross at a point inside both (not at a shared end).
fn arcs_cross(a: V3, b: V3, c: V3, d: V3) -> bool {
    let ab = a.cross(b);
    let acb = -ab.dot(c);
    let bda = ab.dot(d);
    if acb * bda <= 0.0 {
        return false;
    }
    let cd = c.cross(d);
    let cbd = -cd.dot(b);
    let dac = cd.dot(a);
    acb * cbd > 0.0 && acb * dac > 0.0
}

/// Angular distance from `p` to the arc ab.
fn arc_distance(p: V3, a: V3, b: V3) -> f64 {
    let n = a.cross(b);
    let len = n.norm();
    if len > 0.0 {
        let n = n.scale(1.0 / len);
        // Inside the arc's span when p lies between the planes through a and b normal to it.
        if a.cross(p).dot(n) >= 0.0 && p.cross(b).dot(n) >= 0.0 {
            return p.dot(n).abs().min(1.0).asin();
        }
    }
    p.angle(a).min(p.angle(b))
}

impl Polygon {
    fn vectors(&self) -> &[Vec<V3>] {
        &self.rings
    }

    /// Points in all rings as WKT counts them (each ring's closing point included).
    pub fn num_points(&self) -> usize {
        self.rings.iter().map(|r| r.len() + 1).sum()
    }

    pub fn num_interior_rings(&self) -> usize {
        self.rings.len().saturating_sub(1)
    }

    /// `POLYGON ((lng lat, …), (…))`, each ring closed.
    pub fn wkt(&self) -> String {
        let mut s = String::from("POLYGON (");
        for (i, ring) in self.rings.iter().enumerate() {
            s.push_str(if i == 0 { "(" } else { ", (" });
            for (j, v) in ring.iter().chain(ring.first()).enumerate() {
                if j > 0 {
                    s.push_str(", ");
                }
                let p = GeoPoint::from_xyz(*v);
                let _ = write!(s, "{} {}", coord(p.lng), coord(p.lat));
            }
            s.push(')');
        }
        s.push(')');
        s
    }

    /// Whether `p` is inside: within the outer ring and in no hole.
    pub fn contains(&self, p: &GeoPoint) -> bool {
        let v = p.xyz();
        let rings = self.vectors();
        let mut inside = rings.first().is_some_and(|r| winding(r, v).abs() > 0.5);
        for hole in rings.iter().skip(1) {
            inside &= winding(hole, v).abs() <= 0.5;
        }
        inside
    }

    /// Area in square metres: the outer ring's less the holes'.
    pub fn area(&self) -> f64 {
        let rings = self.vectors();
        let mut area = rings.first().map_or(0.0, |r| ring_excess(r).abs());
        for hole in rings.iter().skip(1) {
            area -= ring_excess(hole).abs();
        }
        area.max(0.0) * EARTH_RADIUS_M * EARTH_RADIUS_M
    }

    /// The centre of the surface: the sum of each fan triangle's exact centroid weighted by
    /// its signed size (holes, turning the other way, take theirs away), brought back to
    /// the sphere.
    pub fn centroid(&self) -> GeoPoint {
        let mut sum = V3(0.0, 0.0, 0.0);
        for ring in self.vectors() {
            for k in 1..ring.len().saturating_sub(1) {
                sum = sum.add(true_centroid(ring[0], ring[k], ring[k + 1]));
            }
        }
        GeoPoint::from_xyz(sum)
    }

    /// Distance in metres from `p`: 0 inside, else to the nearest edge.
    pub fn distance_to(&self, p: &GeoPoint) -> f64 {
        if self.contains(p) {
            return 0.0;
        }
        let v = p.xyz();
        let mut best = f64::INFINITY;
        for ring in self.vectors() {
            for i in 0..ring.len() {
                best = best.min(arc_distance(v, ring[i], ring[(i + 1) % ring.len()]));
            }
        }
        best * EARTH_RADIUS_M
    }

    /// Why the polygon is not valid for VoltDB, or None when it is.
    pub fn invalid_reason(&self) -> Option<String> {
        let rings = self.vectors();
        for (i, pts) in self.rings.iter().enumerate() {
            if pts.len() < 3 {
                return Some(format!("Ring {i} has fewer than three distinct vertices"));
            }
            for k in 0..pts.len() {
                if pts[k].same(&pts[(k + 1) % pts.len()]) {
                    return Some(format!("Ring {i} repeats vertex {k}"));
                }
            }
        }
        // Crossings first: a ring that crosses itself has no orientation to speak of.
        if let Some(reason) = crossing(rings) {
            return Some(reason);
        }
        for (i, ring) in rings.iter().enumerate() {
            let excess = ring_excess(ring);
            if i == 0 && excess <= 0.0 {
                return Some("Ring 0 (the outer ring) is clockwise: it must be counter-clockwise".into());
            }
            if i > 0 && excess >= 0.0 {
                return Some(format!("Ring {i} (a hole) is counter-clockwise: it must be clockwise"));
            }
        }
        for (i, hole) in rings.iter().enumerate().skip(1) {
            if winding(&rings[0], hole[0]).abs() <= 0.5 {
                return Some(format!("Ring {i} (a hole) is not inside the outer ring"));
            }
            for (j, other) in rings.iter().enumerate().skip(1).filter(|(j, _)| *j != i) {
                if winding(other, hole[0]).abs() > 0.5 {
                    return Some(format!("Ring {i} (a hole) is inside ring {j}, another hole"));
                }
            }
        }
        None
    }

    /// The same polygon with each ring turned the way `is_valid` wants it; an error when
    /// it has another fault.
    pub fn make_valid(&self) -> Result<Polygon> {
        let mut rings = self.rings.clone();
        for (i, ring) in rings.iter_mut().enumerate() {
            let excess = ring_excess(ring);
            if (i == 0 && excess < 0.0) || (i > 0 && excess > 0.0) {
                ring[1..].reverse();
            }
        }
        let fixed = Polygon { rings };
        match fixed.invalid_reason() {
            None => Ok(fixed),
            Some(why) => Err(geo_error(format!("MAKEVALIDPOLYGON cannot repair this polygon: {why}"))),
        }
    }

    /// Bytes of the wire form (what `GEOGRAPHY(n)` limits).
    pub fn wire_len(&self) -> usize {
        WIRE_POLYGON_BYTES + self.rings.iter().map(|r| WIRE_RING_BYTES + WIRE_VERTEX_BYTES * r.len()).sum::<usize>()
    }

    /// The wire form: a header, each ring's unit-sphere vertices (a hole's after its first
    /// in reverse order, as VoltDB's client keeps them), depth and empty bound, then a last
    /// empty bound; big-endian.
    pub fn to_wire(&self, out: &mut Vec<u8>) {
        out.extend([0u8, 1, u8::from(self.rings.len() > 1)]);
        out.extend((self.rings.len() as i32).to_be_bytes());
        for (i, ring) in self.rings.iter().enumerate() {
            out.push(0);
            out.extend((ring.len() as i32).to_be_bytes());
            let order: Vec<&V3> = if i == 0 { ring.iter().collect() } else { ring[..1].iter().chain(ring[1..].iter().rev()).collect() };
            for v in order {
                for c in [v.0, v.1, v.2] {
                    out.extend(c.to_be_bytes());
                }
            }
            out.push(0);
            out.extend((i32::from(i > 0)).to_be_bytes());
            empty_bound(out);
        }
        empty_bound(out);
    }

    /// Reads the wire form, checking every count against what is there.
    pub fn from_wire(b: &[u8]) -> Result<Polygon> {
        let bad = |what: &str| geo_error(format!("malformed GEOGRAPHY value: {what}"));
        let mut r = WireReader { b, pos: 0 };
        r.take(3).ok_or_else(|| bad("short header"))?;
        let count = r.i32().ok_or_else(|| bad("short header"))?;
        if count < 1 || count as usize > POLYGON_RINGS_MAX {
            return Err(bad(&format!("{count} rings")));
        }
        let mut rings = Vec::with_capacity(count as usize);
        let mut total = 0usize;
        for i in 0..count {
            r.take(1).ok_or_else(|| bad("short ring"))?;
            let n = r.i32().ok_or_else(|| bad("short ring"))?;
            total = total.saturating_add(n.max(0) as usize);
            if n < 3 || total > POLYGON_VERTICES_MAX {
                return Err(bad(&format!("ring of {n} vertices")));
            }
            let mut ring = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let (x, y, z) = (r.f64(), r.f64(), r.f64());
                let (Some(x), Some(y), Some(z)) = (x, y, z) else { return Err(bad("short ring")) };
                let v = V3(x, y, z);
                if !(v.norm() - 1.0).abs().lt(&UNIT_TOLERANCE) {
                    return Err(bad("a vertex that is not a unit vector"));
                }
                ring.push(v);
            }
            if i > 0 {
                ring[1..].reverse();
            }
            r.take(1 + 4 + 33).ok_or_else(|| bad("short ring"))?;
            rings.push(ring);
        }
        r.take(33).ok_or_else(|| bad("no closing bound"))?;
        if r.pos != b.len() {
            return Err(bad("bytes after the polygon"));
        }
        Ok(Polygon { rings })
    }

    /// A total order for sorting and indexes: ring by ring, vertex by vertex.
    pub fn total_cmp(&self, other: &Polygon) -> Ordering {
        for (a, b) in self.rings.iter().zip(&other.rings) {
            for (p, q) in a.iter().zip(b) {
                match p.total_cmp(q) {
                    Ordering::Equal => {}
                    o => return o,
                }
            }
            match a.len().cmp(&b.len()) {
                Ordering::Equal => {}
                o => return o,
            }
        }
        self.rings.len().cmp(&other.rings.len())
    }
}

/// The first crossing of two edges (in one ring or two), described.
fn crossing(rings: &[Vec<V3>]) -> Option<String> {
    let edges: Vec<(usize, usize, V3, V3)> =
        rings.iter().enumerate().flat_map(|(i, r)| (0..r.len()).map(move |k| (i, k, r[k], r[(k + 1) % r.len()]))).collect();
    for (n, &(ri, ki, a, b)) in edges.iter().enumerate() {
        for &(rj, kj, c, d) in &edges[n + 1..] {
            if arcs_cross(a, b, c, d) {
                return Some(if ri == rj {
                    format!("Ring {ri} crosses itself: edge {ki} crosses edge {kj}")
                } else {
                    format!("Ring {ri} crosses ring {rj}: edge {ki} crosses edge {kj}")
                });
            }
        }
    }
    None
}

fn empty_bound(out: &mut Vec<u8>) {
    out.push(0);
    for _ in 0..4 {
        out.extend(EMPTY_BOUND.to_be_bytes());
    }
}

struct WireReader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl WireReader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn f64(&mut self) -> Option<f64> {
        Some(f64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// A WKT scanner: words, numbers, parentheses and commas.
struct Wkt<'a> {
    s: &'a str,
    pos: usize,
    what: &'static str,
}

impl<'a> Wkt<'a> {
    fn new(s: &'a str, what: &'static str) -> Self {
        Wkt { s, pos: 0, what }
    }

    fn error(&self, expected: &str) -> Error {
        let near: String = self.s[self.pos..].chars().take(20).collect();
        geo_error(format!("{}: expected {expected} near '{near}' in '{}'", self.what, shorten(self.s)))
    }

    fn skip_space(&mut self) {
        while self.s[self.pos..].starts_with(|c: char| c.is_whitespace()) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_space();
        if self.s[self.pos..].starts_with(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: char) -> Result<()> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.error(&format!("'{c}'")))
        }
    }

    fn word(&mut self, w: &str) -> Result<()> {
        self.skip_space();
        let rest = &self.s[self.pos..];
        if rest.len() >= w.len() && rest[..w.len()].eq_ignore_ascii_case(w) {
            self.pos += w.len();
            Ok(())
        } else {
            Err(self.error(w))
        }
    }

    fn number(&mut self) -> Result<f64> {
        self.skip_space();
        let rest = &self.s[self.pos..];
        let len = rest.find(|c: char| !(c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E'))).unwrap_or(rest.len());
        let v = rest[..len].parse::<f64>().map_err(|_| self.error("a number"))?;
        if !v.is_finite() {
            return Err(self.error("a finite number"));
        }
        self.pos += len;
        Ok(v)
    }

    fn point(&mut self) -> Result<GeoPoint> {
        let lng = self.number()?;
        let lat = self.number()?;
        GeoPoint::new(lng, lat)
    }

    fn end(&mut self) -> Result<()> {
        self.skip_space();
        if self.pos == self.s.len() {
            Ok(())
        } else {
            Err(self.error("the end of the text"))
        }
    }
}

fn shorten(s: &str) -> String {
    if s.len() <= 60 {
        return s.to_string();
    }
    format!("{}…", &s[..s.floor_char_boundary(60)])
}

/// `POINT (lng lat)`, as POINTFROMTEXT reads it.
pub fn parse_point(text: &str) -> Result<GeoPoint> {
    let mut w = Wkt::new(text, "POINTFROMTEXT");
    w.word("POINT")?;
    w.expect('(')?;
    let p = w.point()?;
    w.expect(')')?;
    w.end()?;
    Ok(p)
}

/// `POLYGON ((lng lat, …), (…))`, as POLYGONFROMTEXT reads it: every ring closed (its
/// last point its first) with at least four points. Validity is not checked here.
pub fn parse_polygon(text: &str) -> Result<Polygon> {
    let mut w = Wkt::new(text, "POLYGONFROMTEXT");
    w.word("POLYGON")?;
    w.expect('(')?;
    let mut rings = Vec::new();
    let mut total = 0usize;
    loop {
        w.expect('(')?;
        let mut ring = vec![w.point()?];
        while w.eat(',') {
            ring.push(w.point()?);
            total += 1;
            if total > POLYGON_VERTICES_MAX {
                return Err(geo_error(format!("POLYGONFROMTEXT: a polygon may have at most {POLYGON_VERTICES_MAX} vertices")));
            }
        }
        w.expect(')')?;
        let (first, last) = (ring[0], ring[ring.len() - 1]);
        if ring.len() < 4 {
            return Err(geo_error(format!(
                "POLYGONFROMTEXT: ring {} has {} points; a ring needs at least 4, the last repeating the first",
                rings.len(),
                ring.len()
            )));
        }
        if first.lng != last.lng || first.lat != last.lat {
            return Err(geo_error(format!("POLYGONFROMTEXT: ring {} is not closed: its last point must repeat its first", rings.len())));
        }
        ring.pop();
        rings.push(ring.iter().map(|p| p.xyz()).collect());
        if rings.len() > POLYGON_RINGS_MAX {
            return Err(geo_error(format!("POLYGONFROMTEXT: a polygon may have at most {POLYGON_RINGS_MAX} rings")));
        }
        if !w.eat(',') {
            break;
        }
    }
    w.expect(')')?;
    w.end()?;
    Ok(Polygon { rings })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn square(lo: f64, hi: f64) -> String {
        format!("POLYGON(({lo} {lo}, {hi} {lo}, {hi} {hi}, {lo} {hi}, {lo} {lo}))")
    }

    #[test]
    fn wkt_round_trips_and_refuses_bad_text() {
        let p = parse_point(" point( -71.0645 42.3589 ) ").unwrap();
        assert_eq!(p.wkt(), "POINT (-71.0645 42.3589)");
        assert_eq!(parse_point("POINT(1 2)").unwrap().wkt(), "POINT (1.0 2.0)");
        assert!(parse_point("POINT(200 0)").unwrap_err().message.contains("longitude 200"));
        assert!(parse_point("POINT(0 91)").unwrap_err().message.contains("latitude 91"));
        assert!(parse_point("POINT(1 2) x").is_err());
        let poly = parse_polygon("POLYGON((0 0, 1 0, 1 1, 0 1, 0 0), (0.1 0.1, 0.1 0.2, 0.2 0.2, 0.2 0.1, 0.1 0.1))").unwrap();
        assert_eq!(poly.wkt(), "POLYGON ((0.0 0.0, 1.0 0.0, 1.0 1.0, 0.0 1.0, 0.0 0.0), (0.1 0.1, 0.1 0.2, 0.2 0.2, 0.2 0.1, 0.1 0.1))");
        assert_eq!((poly.num_points(), poly.num_interior_rings()), (10, 1));
        assert!(parse_polygon("POLYGON((0 0, 1 0, 1 1, 0 0.5))").unwrap_err().message.contains("not closed"));
        assert!(parse_polygon("POLYGON((0 0, 1 0, 0 0))").unwrap_err().message.contains("at least 4"));
    }

    #[test]
    fn distances_and_areas_are_on_voltdbs_sphere() {
        // One degree of a great circle is 2πR/360.
        let one_degree = std::f64::consts::TAU * EARTH_RADIUS_M / 360.0;
        let d = GeoPoint::new(0.0, 0.0).unwrap().distance(&GeoPoint::new(1.0, 0.0).unwrap());
        assert!((d - one_degree).abs() < 1e-6, "{d}");
        // A 1° square at the equator: close to one_degree² (slightly less: the sphere).
        let sq = parse_polygon(&square(0.0, 1.0)).unwrap();
        let ratio = sq.area() / (one_degree * one_degree);
        assert!((0.999..1.0).contains(&ratio), "{ratio}");
        // A hole takes its area away.
        let holed = parse_polygon("POLYGON((0 0, 1 0, 1 1, 0 1, 0 0), (0.25 0.25, 0.25 0.75, 0.75 0.75, 0.75 0.25, 0.25 0.25))").unwrap();
        let r = holed.area() / sq.area();
        assert!((0.749..0.751).contains(&r), "{r}");
        let c = sq.centroid();
        assert!((c.lng - 0.5).abs() < 1e-3 && (c.lat - 0.5).abs() < 1e-3, "{c:?}");
        assert!(holed.contains(&GeoPoint { lng: 0.1, lat: 0.1 }));
        assert!(!holed.contains(&GeoPoint { lng: 0.5, lat: 0.5 }));
        assert!(!holed.contains(&GeoPoint { lng: 2.0, lat: 0.5 }));
        // Outside: the distance to the nearest edge (the meridian at 1°, along the equator-ish).
        let out = sq.distance_to(&GeoPoint { lng: 2.0, lat: 0.5 });
        assert!((out / one_degree - 1.0).abs() < 1e-3, "{out}");
        assert_eq!(sq.distance_to(&GeoPoint { lng: 0.5, lat: 0.5 }), 0.0);
    }

    #[test]
    fn validity_finds_orientation_crossings_and_stray_holes() {
        assert_eq!(parse_polygon(&square(0.0, 1.0)).unwrap().invalid_reason(), None);
        let cw = parse_polygon("POLYGON((0 0, 0 1, 1 1, 1 0, 0 0))").unwrap();
        assert!(cw.invalid_reason().unwrap().contains("clockwise"));
        assert_eq!(cw.make_valid().unwrap().invalid_reason(), None);
        let bowtie = parse_polygon("POLYGON((0 0, 1 1, 1 0, 0 1, 0 0))").unwrap();
        assert!(bowtie.invalid_reason().unwrap().contains("crosses itself"));
        assert!(bowtie.make_valid().is_err());
        let stray = parse_polygon("POLYGON((0 0, 1 0, 1 1, 0 1, 0 0), (5 5, 5 6, 6 6, 6 5, 5 5))").unwrap();
        assert!(stray.invalid_reason().unwrap().contains("not inside"));
    }

    #[test]
    fn the_wire_form_round_trips_and_refuses_truncation() {
        let poly = parse_polygon("POLYGON((0 0, 1 0, 1 1, 0 1, 0 0), (0.25 0.25, 0.25 0.75, 0.75 0.75, 0.75 0.25, 0.25 0.25))").unwrap();
        let mut b = Vec::new();
        poly.to_wire(&mut b);
        assert_eq!(b.len(), poly.wire_len());
        let back = Polygon::from_wire(&b).unwrap();
        assert_eq!(back.wkt(), poly.wkt());
        for cut in [0, 5, 40, b.len() - 1] {
            assert!(Polygon::from_wire(&b[..cut]).is_err(), "cut at {cut}");
        }
    }

    /// The bytes VoltDB's Java client (10.1.1) writes for this polygon with its
    /// `GeographyValue.flattenToBuffer`: ours are the same, so each reads the other's.
    #[test]
    fn the_wire_form_is_the_java_clients() {
        const JAVA: &str = "0001010000000200000000043ff0000000000000000000000000000000000000000000003feffec097f5af8a3f91df0b2b89dd1e00000000000000003feffd813c5f82b43f91de58c9f7dc273f91df0b2b89dd1e3feffec097f5af8a00000000000000003f91df0b2b89dd1e000000000000407680000000000040768000000000004076800000000000407680000000000000000000033fefffe6726ad3893f6c9861caa23c163f6c986d3571a3ca3fefff99c9fcecd03f7c98341f7ff7273f7c9861caa23c163fefffc01e1ceb8f3f6c983f8a3d22f03f7c9861caa23c160000000001004076800000000000407680000000000040768000000000004076800000000000004076800000000000407680000000000040768000000000004076800000000000";
        let poly = parse_polygon("POLYGON((0 0, 1 0, 1 1, 0 1, 0 0), (0.2 0.2, 0.2 0.4, 0.4 0.4, 0.2 0.2))").unwrap();
        let mut b = Vec::new();
        poly.to_wire(&mut b);
        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
        assert_eq!(hex, JAVA);
        let java: Vec<u8> = (0..JAVA.len()).step_by(2).map(|i| u8::from_str_radix(&JAVA[i..i + 2], 16).unwrap()).collect();
        assert_eq!(
            Polygon::from_wire(&java).unwrap().wkt(),
            "POLYGON ((0.0 0.0, 1.0 0.0, 1.0 1.0, 0.0 1.0, 0.0 0.0), (0.2 0.2, 0.2 0.4, 0.4 0.4, 0.2 0.2))"
        );
    }
}
