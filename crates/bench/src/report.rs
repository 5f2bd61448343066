//! The run's report: a JSON document with the keys issue 4 lists, a human summary on stdout,
//! and an SVG chart of throughput and p99 against time (and against the requested rate when
//! stepping), drawn by hand as polylines.

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

const WIDTH: f64 = 900.0;
const PANEL_HEIGHT: f64 = 260.0;
const MARGIN: f64 = 70.0;

fn panel(out: &mut String, top: f64, title: &str, x_label: &str, y_label: &str, series: &[Series]) {
    let (w, h) = (WIDTH - 2.0 * MARGIN, PANEL_HEIGHT - 60.0);
    let all = series.iter().flat_map(|s| s.points.iter());
    let x_max = all.clone().map(|p| p.0).fold(0.0f64, f64::max).max(1e-9);
    let y_max = all.map(|p| p.1).fold(0.0f64, f64::max).max(1e-9) * 1.1;
    let (x0, y0) = (MARGIN, top + 30.0);
    let _ = writeln!(out, r#"<text x="{}" y="{}" font-size="15" font-weight="bold">{}</text>"#, x0, top + 18.0, xml(title));
    let _ = writeln!(out, r##"<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#999"/>"##);
    for i in 0..=4 {
        let f = i as f64 / 4.0;
        let y = y0 + h - f * h;
        let _ = writeln!(out, r##"<line x1="{x0}" y1="{y}" x2="{}" y2="{y}" stroke="#eee"/>"##, x0 + w);
        let _ = writeln!(out, r#"<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>"#, x0 - 5.0, y + 4.0, fmt_num(f * y_max));
        let x = x0 + f * w;
        let _ = writeln!(out, r#"<text x="{x}" y="{}" font-size="11" text-anchor="middle">{}</text>"#, y0 + h + 15.0, fmt_num(f * x_max));
    }
    let _ =
        writeln!(out, r#"<text x="{}" y="{}" font-size="12" text-anchor="middle">{}</text>"#, x0 + w / 2.0, y0 + h + 32.0, xml(x_label));
    let _ = writeln!(
        out,
        r#"<text x="15" y="{}" font-size="12" transform="rotate(-90 15 {})" text-anchor="middle">{}</text>"#,
        y0 + h / 2.0,
        y0 + h / 2.0,
        xml(y_label)
    );
    for (k, s) in series.iter().enumerate() {
        let pts: Vec<String> = s.points.iter().map(|(x, y)| format!("{:.1},{:.1}", x0 + x / x_max * w, y0 + h - y / y_max * h)).collect();
        let _ = writeln!(out, r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"#, s.colour, pts.join(" "));
        let ly = y0 + 15.0 + 15.0 * k as f64;
        let _ = writeln!(out, r#"<text x="{}" y="{ly}" font-size="12" fill="{}">{}</text>"#, x0 + 10.0, s.colour, xml(s.label));
    }
}

fn fmt_num(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0}K", v / 1e3)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// One stepping result: requested rate, achieved rate, p99 in µs.
#[derive(Clone, Debug, PartialEq)]
pub struct StepPoint {
    pub requested_tps: f64,
    pub achieved_tps: f64,
    pub p99_us: u64,
    pub good: bool,
}

/// The SVG chart: throughput and p99 over time; with steps, also against requested rate.
pub fn svg_chart(title: &str, timeline: &[TimePoint], steps: &[StepPoint]) -> String {
    let panels = if steps.is_empty() { 2.0 } else { 4.0 };
    let height = panels * PANEL_HEIGHT + 40.0;
    let mut out = String::new();
    let _ = writeln!(out, r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif">"#);
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(out, r#"<text x="{MARGIN}" y="24" font-size="18">{}</text>"#, xml(title));
    let tps = Series { label: "throughput (txn/s)", colour: "#1f77b4", points: timeline.iter().map(|p| (p.t_s, p.tps)).collect() };
    panel(&mut out, 40.0, "Throughput", "time (s)", "txn/s", &[tps]);
    let p99 = Series {
        label: "p99 latency (ms)",
        colour: "#d62728",
        points: timeline.iter().map(|p| (p.t_s, p.p99_us as f64 / 1000.0)).collect(),
    };
    panel(&mut out, 40.0 + PANEL_HEIGHT, "99th percentile latency", "time (s)", "ms", &[p99]);
    if !steps.is_empty() {
        let got = Series {
            label: "achieved (txn/s)",
            colour: "#1f77b4",
            points: steps.iter().map(|s| (s.requested_tps, s.achieved_tps)).collect(),
        };
        let ideal = Series {
            label: "requested (txn/s)",
            colour: "#aaa",
            points: steps.iter().map(|s| (s.requested_tps, s.requested_tps)).collect(),
        };
        panel(&mut out, 40.0 + 2.0 * PANEL_HEIGHT, "Throughput against requested rate", "requested txn/s", "txn/s", &[got, ideal]);
        let p = Series {
            label: "p99 (ms)",
            colour: "#d62728",
            points: steps.iter().map(|s| (s.requested_tps, s.p99_us as f64 / 1000.0)).collect(),
        };
        panel(&mut out, 40.0 + 3.0 * PANEL_HEIGHT, "p99 against requested rate", "requested txn/s", "ms", &[p]);
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

    #[test]
    fn chart_is_svg_with_one_polyline_per_series() {
        let tl =
            vec![TimePoint { t_s: 1.0, tps: 100.0, p99_us: 900, errors: 0 }, TimePoint { t_s: 2.0, tps: 200.0, p99_us: 1100, errors: 0 }];
        let svg = svg_chart("voter <flood>", &tl, &[]);
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("voter &lt;flood&gt;"));
        let steps = vec![StepPoint { requested_tps: 1000.0, achieved_tps: 990.0, p99_us: 800, good: true }];
        assert_eq!(svg_chart("t", &tl, &steps).matches("<polyline").count(), 5);
    }
}
