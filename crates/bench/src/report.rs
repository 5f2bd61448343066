//! The run's report: a JSON document with the keys issue 4 lists, a human summary on stdout,
//! and an SVG chart of throughput, p50 and p99 for each whole second (and against the
//! requested rate when stepping), drawn by hand as polylines on round 1-2-5 ticks.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{json, Map, Value as Json};

use crate::stats::{total, TimePoint, TxnStats};
use crate::workload::Check;

/// The JSON report.
pub fn json_report(workload: &str, duration_s: f64, by_type: &BTreeMap<&'static str, TxnStats>, check: &Check, config: Json) -> Json {
    let all = total(by_type);
    let mut txns = Map::new();
    for (name, s) in by_type {
        txns.insert(
            name.to_string(),
            json!({
                "count": s.count,
                "errors": s.errors,
                "p50_us": s.percentile_us(0.5),
                "p99_us": s.percentile_us(0.99),
                "p999_us": s.percentile_us(0.999),
            }),
        );
    }
    json!({
        "workload": workload,
        "duration_s": duration_s,
        "txns": all.count,
        "tps": if duration_s > 0.0 { all.count as f64 / duration_s } else { 0.0 },
        "transactions": txns,
        // Every type together, for side-by-side tables (scripts/compare.sh).
        "all": { "count": all.count, "errors": all.errors, "p50_us": all.percentile_us(0.5), "p99_us": all.percentile_us(0.99) },
        "check": { "passed": check.passed, "details": check.details },
        "config": config,
    })
}

/// The table printed at the end of a run.
pub fn summary(by_type: &BTreeMap<&'static str, TxnStats>, duration_s: f64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<26} {:>10} {:>10} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "transaction", "count", "tps", "errors", "p50 ms", "p95 ms", "p99 ms", "p99.9 ms", "max ms"
    );
    let mut rows: Vec<(&str, &TxnStats)> = by_type.iter().map(|(k, v)| (*k, v)).collect();
    let all = total(by_type);
    rows.push(("ALL", &all));
    for (name, s) in rows {
        let ms = |q: f64| s.percentile_us(q) as f64 / 1000.0;
        let _ = writeln!(
            out,
            "{:<26} {:>10} {:>10.0} {:>7} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
            name,
            s.count,
            s.count as f64 / duration_s.max(1e-9),
            s.errors,
            ms(0.5),
            ms(0.95),
            ms(0.99),
            ms(0.999),
            ms(1.0)
        );
        for (k, v) in &s.outcomes {
            let _ = writeln!(out, "    outcome {k}: {v} ({:.2}%)", *v as f64 * 100.0 / s.count.max(1) as f64);
        }
        for (k, v) in &s.aborts {
            let _ = writeln!(out, "    abort {k}: {v}");
        }
        for m in &s.error_samples {
            let _ = writeln!(out, "    error: {m}");
        }
    }
    out
}

/// One series of a chart.
struct Series<'a> {
    label: &'a str,
    colour: &'a str,
    points: Vec<(f64, f64)>,
}

/// Width of the chart, in pixels.
const WIDTH: f64 = 900.0;
/// Height of the title block: the title and the line of run details under it.
const HEADER_HEIGHT: f64 = 60.0;
/// Height of one panel: its title, the plot, the tick labels and the axis label.
const PANEL_HEIGHT: f64 = 290.0;
/// Height of the plot area inside a panel.
const PLOT_HEIGHT: f64 = 200.0;
/// Space left of the plot (tick labels and the rotated axis label) and right of it.
const MARGIN_LEFT: f64 = 80.0;
const MARGIN_RIGHT: f64 = 30.0;
/// Space under the last panel.
const FOOTER_HEIGHT: f64 = 10.0;
/// Ticks an axis aims at; the 1-2-5 step chosen gives between 3 and 10.
const TICKS_WANTED: f64 = 5.0;

const COLOUR_THROUGHPUT: &str = "#1f77b4";
const COLOUR_P50: &str = "#2ca02c";
const COLOUR_P99: &str = "#d62728";
const COLOUR_REQUESTED: &str = "#999999";

/// The step of an axis running from 0 to `max`: 1, 2 or 5 times a power of ten, so that
/// about `TICKS_WANTED` ticks cover it and every tick reads as a round number.
pub fn tick_step(max: f64) -> f64 {
    if !(max.is_finite() && max > 0.0) {
        return 1.0;
    }
    let raw = max / TICKS_WANTED;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * magnitude).find(|s| *s >= raw * 0.999).unwrap_or(10.0 * magnitude);
    // Round away the binary noise of powf (0.30000000000000004 → 0.3).
    let digits = (-step.log10().floor()).max(0.0) as i32;
    let scale = 10f64.powi(digits);
    (step * scale).round() / scale
}

/// The ticks of an axis from 0 to at least `max`: 0, step, 2·step, … up to the first
/// multiple of the step that reaches `max` (which becomes the axis's end).
pub fn ticks(max: f64) -> Vec<f64> {
    let step = tick_step(max);
    let count = (max / step - 1e-9).ceil().max(1.0) as usize;
    (0..=count).map(|k| k as f64 * step).collect()
}

/// A tick's label, exact for a multiple of a 1-2-5 `step`, with the same unit and decimals
/// along the whole axis: K or M once the step is a thousand or a million ("20K", "2M"),
/// else plain ("500", "1500", "0.05"); the origin is "0".
pub fn tick_label(v: f64, step: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let (scaled, unit_step, suffix) = if step >= 1e6 {
        (v / 1e6, step / 1e6, "M")
    } else if step >= 1e3 {
        (v / 1e3, step / 1e3, "K")
    } else {
        (v, step, "")
    };
    let decimals = (-unit_step.log10().floor()).max(0.0) as usize;
    format!("{scaled:.decimals$}{suffix}")
}

/// One panel: a title, a framed plot with round ticks on both axes (from 0), the series
/// as polylines with a legend in the plot's top-left corner, and both axis labels, all
/// inside the panel's `PANEL_HEIGHT` from `top`.
fn panel(out: &mut String, top: f64, title: &str, x_label: &str, y_label: &str, series: &[Series]) {
    let (x0, w) = (MARGIN_LEFT, WIDTH - MARGIN_LEFT - MARGIN_RIGHT);
    let (y0, h) = (top + 30.0, PLOT_HEIGHT);
    let all = series.iter().flat_map(|s| s.points.iter());
    let x_ticks = ticks(all.clone().map(|p| p.0).fold(0.0f64, f64::max));
    let y_ticks = ticks(all.map(|p| p.1).fold(0.0f64, f64::max));
    let (x_step, y_step) = (x_ticks[1], y_ticks[1]);
    let x_max = x_ticks.last().copied().unwrap_or(1.0);
    let y_max = y_ticks.last().copied().unwrap_or(1.0);
    let _ = writeln!(out, r#"<text x="{x0}" y="{}" font-size="15" font-weight="bold">{}</text>"#, top + 18.0, xml(title));
    let _ = writeln!(out, r##"<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#999"/>"##);
    for &v in &y_ticks {
        let y = y0 + h - v / y_max * h;
        let _ = writeln!(out, r##"<line x1="{x0}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#eee"/>"##, x0 + w);
        let _ = writeln!(
            out,
            r#"<text class="ytick" x="{}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"#,
            x0 - 5.0,
            y + 4.0,
            tick_label(v, y_step)
        );
    }
    for &v in &x_ticks {
        let x = x0 + v / x_max * w;
        let _ = writeln!(
            out,
            r#"<text class="xtick" x="{x:.1}" y="{}" font-size="11" text-anchor="middle">{}</text>"#,
            y0 + h + 15.0,
            tick_label(v, x_step)
        );
    }
    let _ = writeln!(
        out,
        r#"<text class="xlabel" x="{}" y="{}" font-size="12" text-anchor="middle">{}</text>"#,
        x0 + w / 2.0,
        y0 + h + 34.0,
        xml(x_label)
    );
    // Rotated about its own anchor, which stays inside the image's left margin.
    let (lx, ly) = (20.0, y0 + h / 2.0);
    let _ = writeln!(
        out,
        r#"<text class="ylabel" x="{lx}" y="{ly}" font-size="12" transform="rotate(-90 {lx} {ly})" text-anchor="middle">{}</text>"#,
        xml(y_label)
    );
    for (k, s) in series.iter().enumerate() {
        let pts: Vec<String> = s.points.iter().map(|(x, y)| format!("{:.1},{:.1}", x0 + x / x_max * w, y0 + h - y / y_max * h)).collect();
        let _ = writeln!(
            out,
            r#"<polyline class="series" data-label="{}" fill="none" stroke="{}" stroke-width="2" points="{}"/>"#,
            xml(s.label),
            s.colour,
            pts.join(" ")
        );
        let ly = y0 + 15.0 + 15.0 * k as f64;
        let _ =
            writeln!(out, r#"<text class="legend" x="{}" y="{ly}" font-size="12" fill="{}">{}</text>"#, x0 + 10.0, s.colour, xml(s.label));
    }
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// One stepping result: requested rate, achieved rate, p99 in µs.
#[derive(Clone, Debug, PartialEq)]
pub struct StepPoint {
    pub requested_tps: f64,
    pub achieved_tps: f64,
    pub p99_us: u64,
    pub good: bool,
}

/// What the chart says about the run above its panels.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChartTitle {
    /// e.g. "lockstep bench voter (flood, 30 s)".
    pub title: String,
    /// e.g. "target lockstep://127.0.0.1:21212 · 2 sites · command log sync · window 2048".
    pub details: String,
}

/// The SVG chart: throughput, and p50 with p99 latency, for each whole second of the run;
/// with steps, also both against the requested rate.
pub fn svg_chart(title: &ChartTitle, timeline: &[TimePoint], steps: &[StepPoint]) -> String {
    let panels = if steps.is_empty() { 2.0 } else { 4.0 };
    let height = HEADER_HEIGHT + panels * PANEL_HEIGHT + FOOTER_HEIGHT;
    let mut out = String::new();
    let _ = writeln!(out, r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif">"#);
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(out, r#"<text class="title" x="{MARGIN_LEFT}" y="24" font-size="18">{}</text>"#, xml(&title.title));
    let _ = writeln!(out, r##"<text class="details" x="{MARGIN_LEFT}" y="44" font-size="12" fill="#444">{}</text>"##, xml(&title.details));
    let tps = Series { label: "throughput (txn/s)", colour: COLOUR_THROUGHPUT, points: timeline.iter().map(|p| (p.t_s, p.tps)).collect() };
    panel(&mut out, HEADER_HEIGHT, "Throughput, each second", "time (s)", "txn/s", &[tps]);
    let ms = |us: u64| us as f64 / 1000.0;
    let p50 = Series { label: "p50 latency (ms)", colour: COLOUR_P50, points: timeline.iter().map(|p| (p.t_s, ms(p.p50_us))).collect() };
    let p99 = Series { label: "p99 latency (ms)", colour: COLOUR_P99, points: timeline.iter().map(|p| (p.t_s, ms(p.p99_us))).collect() };
    panel(&mut out, HEADER_HEIGHT + PANEL_HEIGHT, "Latency, each second: median and 99th percentile", "time (s)", "ms", &[p50, p99]);
    if !steps.is_empty() {
        let got = Series {
            label: "achieved (txn/s)",
            colour: COLOUR_THROUGHPUT,
            points: steps.iter().map(|s| (s.requested_tps, s.achieved_tps)).collect(),
        };
        let ideal = Series {
            label: "requested (txn/s)",
            colour: COLOUR_REQUESTED,
            points: steps.iter().map(|s| (s.requested_tps, s.requested_tps)).collect(),
        };
        let top = HEADER_HEIGHT + 2.0 * PANEL_HEIGHT;
        panel(&mut out, top, "Throughput against requested rate", "requested txn/s", "txn/s", &[got, ideal]);
        let p = Series { label: "p99 (ms)", colour: COLOUR_P99, points: steps.iter().map(|s| (s.requested_tps, ms(s.p99_us))).collect() };
        panel(&mut out, top + PANEL_HEIGHT, "p99 against requested rate", "requested txn/s", "ms", &[p]);
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Done;
    use std::time::Duration;

    #[test]
    fn report_has_exactly_the_issue_keys() {
        let mut by_type = BTreeMap::new();
        let mut s = TxnStats::default();
        for us in [100u64, 200, 300, 400] {
            s.record(Duration::from_micros(us), &Done::ok("ok"));
        }
        s.record(Duration::from_micros(500), &Done::error("x"));
        by_type.insert("Vote", s);
        let mut check = Check::new();
        check.expect(true, "fine");
        let r = json_report("voter", 2.0, &by_type, &check, json!({"mode": "flood"}));
        let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["all", "check", "config", "duration_s", "tps", "transactions", "txns", "workload"]);
        assert_eq!(r["all"], json!({"count": 5, "errors": 1, "p50_us": 300, "p99_us": 500}));
        assert_eq!(r["txns"], 5);
        assert_eq!(r["tps"], 2.5);
        assert_eq!(r["transactions"]["Vote"], json!({"count": 5, "errors": 1, "p50_us": 300, "p99_us": 500, "p999_us": 500}));
        assert_eq!(r["check"], json!({"passed": true, "details": ["ok: fine"]}));
    }

    /// One element of an SVG, as the chart writes them: its name, attributes and text.
    #[derive(Debug)]
    struct Element {
        name: String,
        attrs: BTreeMap<String, String>,
        text: String,
    }

    impl Element {
        fn num(&self, attr: &str) -> f64 {
            self.attrs.get(attr).unwrap_or_else(|| panic!("{self:?} has no {attr}")).parse().unwrap()
        }
        fn class(&self) -> &str {
            self.attrs.get("class").map(String::as_str).unwrap_or("")
        }
    }

    fn unescape(s: &str) -> String {
        s.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&amp;", "&")
    }

    /// Parses the chart's SVG: every start tag with its attributes (name="value") and, for
    /// `<text>`, the text up to `</text>`. Fails on anything malformed.
    fn parse_svg(svg: &str) -> Vec<Element> {
        let mut out = Vec::new();
        let mut rest = svg;
        while let Some(open) = rest.find('<') {
            rest = &rest[open + 1..];
            if rest.starts_with('/') {
                rest = &rest[rest.find('>').expect("closing tag ends") + 1..];
                continue;
            }
            let close = rest.find('>').expect("tag ends");
            let tag = rest[..close].trim_end_matches('/');
            let (name, mut attrs_text) = tag.split_once(' ').unwrap_or((tag, ""));
            let mut attrs = BTreeMap::new();
            while let Some(eq) = attrs_text.find("=\"") {
                let key = attrs_text[..eq].trim().to_string();
                let after = &attrs_text[eq + 2..];
                let end = after.find('"').expect("attribute value ends");
                assert!(attrs.insert(key.clone(), unescape(&after[..end])).is_none(), "attribute {key} twice in <{tag}>");
                attrs_text = &after[end + 1..];
            }
            assert!(attrs_text.trim().is_empty(), "unparsed attribute text {attrs_text:?} in <{tag}>");
            rest = &rest[close + 1..];
            let mut text = String::new();
            if name == "text" {
                let end = rest.find("</text>").expect("text ends");
                text = unescape(&rest[..end]);
                rest = &rest[end..];
            }
            out.push(Element { name: name.to_string(), attrs, text });
        }
        out
    }

    /// A tick label's value ("1.5K" → 1500).
    fn tick_value(label: &str) -> f64 {
        let (digits, scale) = match label.strip_suffix('K') {
            Some(d) => (d, 1e3),
            None => match label.strip_suffix('M') {
                Some(d) => (d, 1e6),
                None => (label, 1.0),
            },
        };
        digits.parse::<f64>().unwrap_or_else(|_| panic!("tick label {label:?} is not a number")) * scale
    }

    /// Ticks start at 0 and go up by one step of 1, 2 or 5 times a power of ten.
    fn assert_round_ticks(labels: &[&str]) {
        assert!(labels.len() >= 3, "too few ticks: {labels:?}");
        let values: Vec<f64> = labels.iter().map(|l| tick_value(l)).collect();
        assert_eq!(values[0], 0.0, "{labels:?}");
        let step = values[1];
        let mantissa = step / 10f64.powf(step.log10().floor());
        assert!([1.0, 2.0, 5.0].iter().any(|m| (mantissa - m).abs() < 1e-9), "step {step} of {labels:?} is not 1-2-5");
        for (k, v) in values.iter().enumerate() {
            assert!((v - k as f64 * step).abs() < step * 1e-9, "tick {k} of {labels:?} is off the grid");
        }
    }

    fn point(t_s: f64, tps: f64, p50_us: u64, p99_us: u64) -> TimePoint {
        TimePoint { t_s, tps, p50_us, p99_us, errors: 0 }
    }

    #[test]
    fn axes_tick_at_round_values() {
        // The issue's chart: 14K/29K/43K, 60/119/179/239 and "1.50" seconds.
        for (max, step) in
            [(57_400.0, 20_000.0), (239.0, 50.0), (6.0, 2.0), (5.0, 1.0), (1.5, 0.5), (0.07, 0.02), (30.0, 10.0), (2.0e6, 500_000.0)]
        {
            assert_eq!(tick_step(max), step, "max {max}");
            let t = ticks(max);
            assert!(*t.last().unwrap() >= max && t[t.len() - 2] < max, "{max}: {t:?}");
        }
        assert_eq!(tick_label(15_000.0, 5_000.0), "15K");
        assert_eq!(tick_label(1_500.0, 500.0), "1500");
        assert_eq!(tick_label(0.4, 0.2), "0.4");
        assert_eq!(tick_label(0.05, 0.01), "0.05");
        assert_eq!(tick_label(1.5e6, 5e5), "1500K");
        assert_eq!(tick_label(4e6, 2e6), "4M");
    }

    /// The chart of a 5 s flood: round ticks on every axis, one point a second, every label
    /// inside the image, the run's details in its title, and a p50 line beside the p99.
    #[test]
    fn the_chart_parses_with_round_ticks_labels_inside_details_and_p50() {
        let timeline: Vec<TimePoint> = (1..=5).map(|s| point(s as f64, 14_300.0 + 117.0 * s as f64, 900 + 10 * s, 5_970 + 3 * s)).collect();
        let title = ChartTitle {
            title: "lockstep bench voter (flood, 5 s)".into(),
            details: "target lockstep://127.0.0.1:21212 · 2 sites · command log sync · window 2048".into(),
        };
        let svg = svg_chart(&title, &timeline, &[]);
        let elements = parse_svg(&svg);
        let root = elements.iter().find(|e| e.name == "svg").expect("an <svg> element");
        let (width, height) = (root.num("width"), root.num("height"));
        let texts: Vec<&Element> = elements.iter().filter(|e| e.name == "text").collect();
        let with_class = |c: &str| texts.iter().filter(|e| e.class() == c).map(|e| e.text.as_str()).collect::<Vec<_>>();
        assert_eq!(with_class("title"), [title.title.as_str()]);
        assert_eq!(with_class("details"), [title.details.as_str()]);
        for detail in ["voter", "flood", "lockstep://127.0.0.1:21212", "2 sites", "command log sync", "window 2048"] {
            assert!(
                with_class("title").iter().chain(with_class("details").iter()).any(|t| t.contains(detail)),
                "{detail} is not in the title"
            );
        }
        // Every label's anchor lies inside the image, its text's height above it too.
        for t in &texts {
            let (x, y, size) = (t.num("x"), t.num("y"), t.num("font-size"));
            assert!((0.0..=width).contains(&x) && y - size >= 0.0 && y <= height, "{t:?} is outside the {width}x{height} image");
        }
        // Two panels, each with its ticks: throughput (0..15K by 5K) and latency (0..6 ms by 2).
        let y_ticks = with_class("ytick");
        let x_ticks = with_class("xtick");
        assert_eq!(y_ticks, ["0", "5K", "10K", "15K", "0", "2", "4", "6"]);
        assert_eq!(x_ticks, ["0", "1", "2", "3", "4", "5", "0", "1", "2", "3", "4", "5"]);
        assert_round_ticks(&y_ticks[..4]);
        assert_round_ticks(&y_ticks[4..]);
        assert_round_ticks(&x_ticks[..6]);
        assert_eq!(with_class("xlabel"), ["time (s)", "time (s)"]);
        // One polyline per series, one vertex per whole second; p50 sits beside p99.
        let series: Vec<&Element> = elements.iter().filter(|e| e.name == "polyline").collect();
        let labels: Vec<&str> = series.iter().map(|e| e.attrs["data-label"].as_str()).collect();
        assert_eq!(labels, ["throughput (txn/s)", "p50 latency (ms)", "p99 latency (ms)"]);
        for s in &series {
            let vertices: Vec<(f64, f64)> = s.attrs["points"]
                .split(' ')
                .map(|p| p.split_once(',').map(|(x, y)| (x.parse().unwrap(), y.parse().unwrap())).expect("x,y"))
                .collect();
            assert_eq!(vertices.len(), timeline.len());
            assert!(vertices.iter().all(|(x, y)| (0.0..=width).contains(x) && (0.0..=height).contains(y)));
        }
        assert_eq!(with_class("legend"), labels);
    }

    #[test]
    fn a_stepping_chart_has_four_panels_inside_the_image() {
        let tl = vec![point(1.0, 100.0, 400, 900), point(2.0, 200.0, 500, 1100)];
        let steps = vec![
            StepPoint { requested_tps: 1000.0, achieved_tps: 990.0, p99_us: 800, good: true },
            StepPoint { requested_tps: 2000.0, achieved_tps: 1700.0, p99_us: 12_000, good: false },
        ];
        let svg = svg_chart(&ChartTitle { title: "voter <step>".into(), details: "a & b".into() }, &tl, &steps);
        let elements = parse_svg(&svg);
        let height = elements[0].num("height");
        assert_eq!(elements.iter().filter(|e| e.name == "polyline").count(), 6);
        assert_eq!(elements.iter().filter(|e| e.class() == "xlabel").count(), 4);
        let lowest = elements.iter().filter(|e| e.name == "text").map(|e| e.num("y")).fold(0.0, f64::max);
        assert!(lowest <= height, "a label at y={lowest} is below the {height} px image");
        assert!(elements.iter().any(|e| e.text == "voter <step>") && elements.iter().any(|e| e.text == "a & b"));
    }
}
