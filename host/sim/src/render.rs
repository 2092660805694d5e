//! A report as a terminal table and as one self-contained HTML page whose
//! charts are inline SVG (nothing is fetched when the page is viewed), for
//! one run or two side by side ([`compare_table`], [`compare_html`]).

use std::fmt::Write as _;

use crate::report::{Measured, Percentiles, Report};

/// Colours of run A and run B in overlaid charts.
const COLORS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

fn secs(ms: u64) -> String {
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 120_000 {
        format!("{:.1} s", ms as f64 / 1_000.0)
    } else if ms < 7_200_000 {
        format!("{:.1} min", ms as f64 / 60_000.0)
    } else {
        format!("{:.1} h", ms as f64 / 3_600_000.0)
    }
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// Aligned columns; the first row is the heading.
fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> =
        (0..cols).map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, s)| format!("{s:<width$}", width = widths.get(c).copied().unwrap_or(0)))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn wait_cells(p: &Percentiles) -> Vec<String> {
    vec![p.count.to_string(), secs(p.p50), secs(p.p95), secs(p.p99), secs(p.max)]
}

/// Headline rows shared by the single and the side-by-side table.
fn headline(r: &Report) -> Vec<(String, String)> {
    let o = &r.outcomes;
    let s = &r.summary;
    let mut rows = Vec::new();
    if let Some(f) = &r.fill {
        // The mode's own figures first: they are what it is run for.
        rows.extend([
            ("jobs submitted (until full)".into(), f.jobs_submitted.to_string()),
            ("jobs placed whole".into(), f.jobs_placed.to_string()),
            ("tasks placed".into(), f.tasks_placed.to_string()),
            ("CPU held at stop".into(), format!("{:.1} cores ({})", f.cpu_cores, pct(f.cpu_share))),
            ("memory held at stop".into(), pct(f.memory_share)),
            ("GPUs held at stop".into(), format!("{} ({})", f.gpus, pct(f.gpu_share))),
            ("first job not placed".into(), f.first_unplaced.clone().unwrap_or_else(|| "-".into())),
        ]);
    }
    rows.extend([
        ("tasks".into(), o.tasks.to_string()),
        ("succeeded".into(), o.succeeded.to_string()),
        ("failed".into(), o.failed.to_string()),
        ("killed".into(), o.killed.to_string()),
        ("lost".into(), o.lost.to_string()),
        ("running at end".into(), o.running.to_string()),
        ("waiting again at end".into(), o.waiting.to_string()),
        ("never placed".into(), o.never_placed.to_string()),
        ("placements".into(), s.placements.to_string()),
        ("preemptions".into(), s.preemptions.to_string()),
        ("makespan".into(), secs(s.makespan_ms)),
        ("wait p50".into(), secs(s.wait_ms.p50)),
        ("wait p95".into(), secs(s.wait_ms.p95)),
        ("wait p99".into(), secs(s.wait_ms.p99)),
        ("CPU allocated (mean)".into(), pct(s.cpu_allocation.mean)),
        ("memory allocated (mean)".into(), pct(s.memory_allocation.mean)),
        ("GPUs allocated (mean)".into(), pct(s.gpu_allocation.mean)),
        ("stranded CPU (mean cores)".into(), format!("{:.1}", s.stranded_cpu_cores.mean)),
        ("stranded GPUs (mean)".into(), format!("{:.2}", s.stranded_gpus.mean)),
        ("jobs on 2+ zones".into(), format!("{} of {}", pct(s.spread_multi_share), s.spread_jobs)),
        ("zones per job (mean)".into(), format!("{:.2}", s.spread_mean_values)),
    ]);
    rows
}

/// The report as text for a terminal.
pub fn table_text(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "trace {} ({}), {} hosts, {} jobs; replay ended at {}",
        r.trace,
        r.source,
        r.hosts,
        r.jobs,
        secs(r.end_ms)
    );
    for (slot, p) in &r.policies {
        let _ = writeln!(out, "  {slot}: {p}");
    }
    for s in &r.swaps {
        let _ = writeln!(out, "  swap at {s}");
    }
    out.push('\n');
    let rows: Vec<Vec<String>> = headline(r).into_iter().map(|(k, v)| vec![k, v]).collect();
    out.push_str(&table(&rows));
    out.push('\n');
    let mut rows = vec![["pool", "kind", "runs", "p50", "p95", "p99", "max"].map(String::from).to_vec()];
    for w in &r.waits {
        let mut row = vec![w.pool.clone(), w.kind.clone()];
        row.extend(wait_cells(&w.wait_ms));
        rows.push(row);
    }
    out.push_str("waits per pool and kind\n");
    out.push_str(&table(&rows));
    if !r.fairness.is_empty() {
        out.push('\n');
        let mut rows =
            vec![["pool", "CPU share", "entitled", "mean |dev|", "GPU mean |dev|"].map(String::from).to_vec()];
        for f in &r.fairness {
            rows.push(vec![
                f.pool.clone(),
                pct(f.cpu_mean_share),
                pct(f.cpu_mean_entitlement),
                pct(f.cpu_mean_abs_deviation),
                pct(f.gpu_mean_abs_deviation),
            ]);
        }
        out.push_str("pools against their entitlement (CPU, share of the cluster)\n");
        out.push_str(&table(&rows));
    }
    if !r.never_placed.by_reason.is_empty() {
        out.push_str("\nnever placed, by reason\n");
        let rows: Vec<Vec<String>> =
            r.never_placed.by_reason.iter().map(|(k, v)| vec![v.to_string(), k.clone()]).collect();
        out.push_str(&table(&rows));
    }
    out.push_str("\nplugin calls\n");
    out.push_str(&table(&plugin_call_rows(r)));
    if let Some(m) = &r.measured {
        let _ = writeln!(
            out,
            "\nmeasured (wall clock; varies between runs): {} in {} steps, {:.0}x real time{}",
            secs(m.wall_ms),
            m.steps,
            m.speedup,
            m.peak_rss_mib.map(|v| format!(", peak memory {v} MiB")).unwrap_or_default()
        );
        out.push_str(&table(&latency_rows(m, "<=", "us")));
    }
    out
}

/// The seeds of a replay in words: the trace's (a generated trace's header
/// has it) and the replay's own `--seed`, which are different things (a
/// trace generated with `--seed 7` replays with seed 0 unless told).
fn seeds(r: &Report) -> String {
    match r.trace_seed {
        Some(t) => format!("trace generated with seed {t}, replay seed {}", r.seed),
        None => format!("replay seed {}", r.seed),
    }
}

/// What a headline cell holds, for [`delta`].
#[derive(Clone, Debug, PartialEq)]
enum Figure {
    /// A plain number (a count, a mean).
    Plain(f64),
    /// A percentage: the difference is in percentage points.
    Percent(f64),
    /// A duration as [`secs`] writes it, in ms.
    Millis(f64),
    /// A number followed by a unit word (`cores`).
    Unit(f64, String),
}

fn figure(cell: &str) -> Option<Figure> {
    let mut words = cell.split_whitespace();
    let first = words.next()?;
    if let Some(p) = first.strip_suffix('%') {
        return p.parse().ok().map(Figure::Percent);
    }
    let v: f64 = first.parse().ok()?;
    Some(match words.next() {
        None => Figure::Plain(v),
        Some("ms") => Figure::Millis(v),
        Some("s") => Figure::Millis(v * 1_000.0),
        Some("min") => Figure::Millis(v * 60_000.0),
        Some("h") => Figure::Millis(v * 3_600_000.0),
        Some(w) if w.chars().all(|c| c.is_alphabetic()) && w != "of" => Figure::Unit(v, w.to_string()),
        // "12.0% of 40", "3 (25.0%)": the first number alone.
        Some(_) => Figure::Plain(v),
    })
}

/// B − A of two headline cells, in their unit: `+1.2 pp` for percentages
/// (percentage points), `+45.0 s` or `-2.1 min` for durations (even when A
/// and B are written in different units), `+3` for counts, `+1.50 cores`;
/// `=` when equal, blank when the cells are not comparable.
fn delta(a: &str, b: &str) -> String {
    let signed = |d: f64, text: String| format!("{}{text}", if d < 0.0 { "-" } else { "+" });
    match (figure(a), figure(b)) {
        (Some(Figure::Percent(x)), Some(Figure::Percent(y))) if y == x => "=".into(),
        (Some(Figure::Percent(x)), Some(Figure::Percent(y))) => format!("{:+.1} pp", y - x),
        (Some(Figure::Millis(x)), Some(Figure::Millis(y))) => {
            let d = y - x;
            if d == 0.0 { "=".into() } else { signed(d, secs(d.abs().round() as u64)) }
        }
        (Some(Figure::Plain(x)), Some(Figure::Plain(y))) => {
            let d = y - x;
            if d == 0.0 {
                "=".into()
            } else if x.fract() == 0.0 && y.fract() == 0.0 {
                format!("{d:+}")
            } else {
                format!("{d:+.2}")
            }
        }
        (Some(Figure::Unit(x, u)), Some(Figure::Unit(y, w))) if u == w => {
            let d = y - x;
            if d == 0.0 { "=".into() } else { format!("{d:+.2} {u}") }
        }
        _ => String::new(),
    }
}

/// Two reports side by side (`a` then `b`), with B − A.
pub fn compare_table(a: &Report, b: &Report, names: [&str; 2]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "trace {} ({}), {} hosts, {} jobs; {}", a.trace, a.source, a.hosts, a.jobs, seeds(a));
    for (name, r) in names.iter().zip([a, b]) {
        let policies: Vec<String> = r.policies.iter().map(|(s, p)| format!("{s}={p}")).collect();
        let _ = writeln!(out, "  {name}: {}", policies.join(", "));
    }
    out.push('\n');
    let mut rows = vec![vec![String::new(), names[0].to_string(), names[1].to_string(), "B - A".into()]];
    for ((k, va), (_, vb)) in headline(a).into_iter().zip(headline(b)) {
        let d = delta(&va, &vb);
        rows.push(vec![k, va, vb, d]);
    }
    out.push_str(&table(&rows));
    out.push_str("\nwait p95 per pool and kind\n");
    let mut rows = vec![vec!["pool".into(), "kind".into(), names[0].to_string(), names[1].to_string()]];
    for w in &a.waits {
        let other = b.waits.iter().find(|x| x.pool == w.pool && x.kind == w.kind).map(|x| secs(x.wait_ms.p95));
        rows.push(vec![w.pool.clone(), w.kind.clone(), secs(w.wait_ms.p95), other.unwrap_or_else(|| "-".into())]);
    }
    out.push_str(&table(&rows));
    // The sections `sim run` prints, for both sets (issue 43: compare left
    // them out).
    if !a.fairness.is_empty() || !b.fairness.is_empty() {
        out.push_str("\npools against their entitlement (CPU, share of the cluster; mean |deviation|)\n");
        let mut rows = vec![vec![
            "pool".to_string(),
            "entitled".into(),
            format!("{} share", names[0]),
            format!("{} share", names[1]),
            format!("{} |dev|", names[0]),
            format!("{} |dev|", names[1]),
            "B - A |dev|".into(),
        ]];
        let pools: std::collections::BTreeSet<&str> =
            a.fairness.iter().chain(&b.fairness).map(|f| f.pool.as_str()).collect();
        for pool in pools {
            let fa = a.fairness.iter().find(|f| f.pool == pool);
            let fb = b.fairness.iter().find(|f| f.pool == pool);
            let cell = |f: Option<&crate::report::PoolFairness>, v: fn(&crate::report::PoolFairness) -> f64| {
                f.map_or_else(|| "-".to_string(), |f| pct(v(f)))
            };
            let (da, db) = (cell(fa, |f| f.cpu_mean_abs_deviation), cell(fb, |f| f.cpu_mean_abs_deviation));
            rows.push(vec![
                pool.to_string(),
                cell(fa.or(fb), |f| f.cpu_mean_entitlement),
                cell(fa, |f| f.cpu_mean_share),
                cell(fb, |f| f.cpu_mean_share),
                da.clone(),
                db.clone(),
                delta(&da, &db),
            ]);
        }
        out.push_str(&table(&rows));
    }
    out.push_str("\nplugin calls\n");
    let mut rows = vec![["set", "slot", "version", "calls", "faults"].map(String::from).to_vec()];
    for (name, r) in names.iter().zip([a, b]) {
        for row in plugin_call_rows(r).into_iter().skip(1) {
            rows.push(std::iter::once(name.to_string()).chain(row).collect());
        }
    }
    out.push_str(&table(&rows));
    for (name, r) in names.iter().zip([a, b]) {
        if let Some(m) = &r.measured {
            let _ = writeln!(
                out,
                "\n{name}, measured (wall clock; varies between runs): {} in {} steps, {:.0}x real time{}",
                secs(m.wall_ms),
                m.steps,
                m.speedup,
                m.peak_rss_mib.map(|v| format!(", peak memory {v} MiB")).unwrap_or_default()
            );
            out.push_str(&table(&latency_rows(m, "<=", "us")));
        }
    }
    out
}

/// A line chart of series over the same x (ms), as inline SVG.
pub fn line_chart(title: &str, x_ms: &[u64], series: &[(String, &[f64], &str)], unit: &str) -> String {
    let (w, h, left, right, top, bottom) = (760.0, 240.0, 56.0, 12.0, 26.0, 34.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let x_max = x_ms.last().copied().unwrap_or(1).max(1) as f64;
    let y_max = series.iter().flat_map(|(_, v, _)| v.iter().copied()).fold(0.0_f64, f64::max);
    let y_max = if y_max <= 0.0 { 1.0 } else { nice(y_max) };
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img"><title>{}</title>"#,
        esc(title)
    );
    let _ = write!(svg, r#"<text x="{left}" y="16" class="t">{}</text>"#, esc(title));
    for i in 0..=4 {
        let y = top + ph - ph * f64::from(i) / 4.0;
        let v = y_max * f64::from(i) / 4.0;
        let _ = write!(
            svg,
            r##"<line x1="{left}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" class="a" text-anchor="end">{}{unit}</text>"##,
            left + pw,
            left - 4.0,
            y + 4.0,
            short(v)
        );
    }
    for i in 0..=4 {
        let x = left + pw * f64::from(i) / 4.0;
        let t = (x_max * f64::from(i) / 4.0) as u64;
        let _ = write!(
            svg,
            r#"<text x="{x:.1}" y="{:.1}" class="a" text-anchor="middle">{}</text>"#,
            top + ph + 16.0,
            secs(t)
        );
    }
    for (k, (label, values, color)) in series.iter().enumerate() {
        let mut points = String::new();
        for (t, v) in x_ms.iter().zip(values.iter()) {
            let x = left + pw * (*t as f64 / x_max);
            let y = top + ph - ph * (v / y_max).clamp(0.0, 1.0);
            let _ = write!(points, "{x:.1},{y:.1} ");
        }
        line_with_legend(&mut svg, &points, k, label, color, left, h);
    }
    svg.push_str("</svg>");
    svg
}

/// Series `k`'s polyline (`points`: "x,y x,y …") and its legend entry at
/// the bottom of a chart of height `h`.
fn line_with_legend(svg: &mut String, points: &str, k: usize, label: &str, color: &str, left: f64, h: f64) {
    let _ =
        write!(svg, r#"<polyline fill="none" stroke="{color}" stroke-width="1.6" points="{}"/>"#, points.trim_end());
    let lx = left + 8.0 + 170.0 * k as f64;
    let _ = write!(
        svg,
        r#"<rect x="{lx:.1}" y="{:.1}" width="10" height="3" fill="{color}"/><text x="{:.1}" y="{:.1}" class="a">{}</text>"#,
        h - 8.0,
        lx + 14.0,
        h - 4.0,
        esc(label)
    );
}

/// A named line of (x, y) points with its colour.
pub type Curve<'a> = (String, Vec<(f64, f64)>, &'a str);

/// A line chart of (x, y) points, both in percent, as inline SVG: the
/// "arrive until full" GPU curve (allocated against arrived).
pub fn percent_chart(title: &str, x_label: &str, series: &[Curve<'_>]) -> String {
    let (w, h, left, right, top, bottom) = (760.0, 260.0, 56.0, 12.0, 26.0, 50.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let x_max = nice(series.iter().flat_map(|(_, p, _)| p.iter().map(|q| q.0)).fold(1.0_f64, f64::max));
    let y_max = 100.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img"><title>{}</title>"#,
        esc(title)
    );
    let _ = write!(svg, r#"<text x="{left}" y="16" class="t">{}</text>"#, esc(title));
    for i in 0..=4 {
        let y = top + ph - ph * f64::from(i) / 4.0;
        let _ = write!(
            svg,
            r##"<line x1="{left}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" class="a" text-anchor="end">{}%</text>"##,
            left + pw,
            left - 4.0,
            y + 4.0,
            short(y_max * f64::from(i) / 4.0)
        );
        let x = left + pw * f64::from(i) / 4.0;
        let _ = write!(
            svg,
            r#"<text x="{x:.1}" y="{:.1}" class="a" text-anchor="middle">{}%</text>"#,
            top + ph + 14.0,
            short(x_max * f64::from(i) / 4.0)
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" class="a" text-anchor="middle">{}</text>"#,
        left + pw / 2.0,
        top + ph + 28.0,
        esc(x_label)
    );
    for (k, (label, points, color)) in series.iter().enumerate() {
        let mut line = String::new();
        for (x, y) in points {
            let px = left + pw * (x / x_max).clamp(0.0, 1.0);
            let py = top + ph - ph * (y / y_max).clamp(0.0, 1.0);
            let _ = write!(line, "{px:.1},{py:.1} ");
        }
        line_with_legend(&mut svg, &line, k, label, color, left, h);
    }
    svg.push_str("</svg>");
    svg
}

fn nice(v: f64) -> f64 {
    let mag = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if v <= m * mag {
            return m * mag;
        }
    }
    v
}

fn short(v: f64) -> String {
    if v >= 1_000_000.0 {
        format!("{:.1}M", v / 1_000_000.0)
    } else if v >= 1_000.0 {
        format!("{:.1}k", v / 1_000.0)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}\
h1{font-size:20px}h2{font-size:16px;margin-top:28px}table{border-collapse:collapse;margin:8px 0}\
td,th{border-bottom:1px solid #e4e4e4;padding:3px 10px;text-align:left;font-size:13px}\
th{background:#f6f6f6}td.n{text-align:right;font-variant-numeric:tabular-nums}\
svg .t{font-size:13px;font-weight:600}svg .a{font-size:11px;fill:#555}.note{color:#666;font-size:12px}";

fn html_table(rows: &[Vec<String>]) -> String {
    let mut out = String::from("<table>");
    for (i, r) in rows.iter().enumerate() {
        out.push_str("<tr>");
        for c in r {
            let numeric = i > 0 && c.chars().next().is_some_and(|ch| ch.is_ascii_digit() || ch == '-' || ch == '+');
            let (open, close) = if i == 0 {
                ("<th>", "</th>")
            } else if numeric {
                ("<td class=\"n\">", "</td>")
            } else {
                ("<td>", "</td>")
            };
            let _ = write!(out, "{open}{}{close}", esc(c));
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
    out
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body>\n{body}\n</body></html>\n",
        esc(title)
    )
}

/// Charts of several reports overlaid (one colour per report).
fn charts(reports: &[(&str, &Report)]) -> String {
    let Some((_, first)) = reports.first() else { return String::new() };
    let x = &first.series.t_ms;
    let mut out = String::new();
    let pick = |f: &dyn Fn(&Report) -> &[f64], what: &str| -> Vec<(String, Vec<f64>, &str)> {
        reports
            .iter()
            .enumerate()
            .map(|(i, (name, r))| {
                let label = if reports.len() == 1 { what.to_string() } else { format!("{name}: {what}") };
                (label, f(r).to_vec(), COLORS[i % COLORS.len()])
            })
            .collect()
    };
    let mut chart = |title: &str, lines: Vec<(String, Vec<f64>, &str)>, unit: &str| {
        let refs: Vec<(String, &[f64], &str)> = lines.iter().map(|(l, v, c)| (l.clone(), v.as_slice(), *c)).collect();
        out.push_str(&line_chart(title, x, &refs, unit));
        out.push('\n');
    };
    let scale = |v: &[f64]| v.iter().map(|x| x * 100.0).collect::<Vec<f64>>();
    let alloc = |which: fn(&Report) -> &[f64], name: &str| -> Vec<(String, Vec<f64>, &str)> {
        reports
            .iter()
            .enumerate()
            .map(|(i, (n, r))| {
                let label = if reports.len() == 1 { name.to_string() } else { format!("{n}: {name}") };
                (label, scale(which(r)), COLORS[i % COLORS.len()])
            })
            .collect()
    };
    if reports.len() == 1 {
        let r = first;
        let lines = vec![
            ("CPU".to_string(), scale(&r.series.cpu), COLORS[0]),
            ("memory".to_string(), scale(&r.series.memory), COLORS[1]),
            ("GPUs".to_string(), scale(&r.series.gpu), COLORS[2]),
        ];
        chart("Allocation, % of capacity", lines, "%");
    } else {
        chart("CPU allocated, % of capacity", alloc(|r| r.series.cpu.as_slice(), "CPU"), "%");
        chart("GPUs allocated, % of capacity", alloc(|r| r.series.gpu.as_slice(), "GPUs"), "%");
    }
    chart(
        "Stranded CPU (free cores no waiting task fits)",
        pick(&|r| r.series.stranded_cpu_cores.as_slice(), "cores"),
        "",
    );
    chart("Stranded GPUs", pick(&|r| r.series.stranded_gpus.as_slice(), "GPUs"), "");

    let waiting: Vec<(String, Vec<f64>, &str)> = reports
        .iter()
        .enumerate()
        .map(|(i, (n, r))| {
            let label = if reports.len() == 1 { "runs waiting".to_string() } else { format!("{n}: runs waiting") };
            (label, r.series.waiting.iter().map(|v| *v as f64).collect(), COLORS[i % COLORS.len()])
        })
        .collect();
    chart("Runs waiting for a host", waiting, "");
    for ps in &first.pool_series {
        let mut lines = Vec::new();
        for (i, (n, r)) in reports.iter().enumerate() {
            if let Some(p) = r.pool_series.iter().find(|p| p.pool == ps.pool) {
                let prefix = if reports.len() == 1 { String::new() } else { format!("{n}: ") };
                lines.push((format!("{prefix}allocation"), scale(&p.cpu_allocation), COLORS[(2 * i) % COLORS.len()]));
                lines.push((
                    format!("{prefix}entitlement"),
                    scale(&p.cpu_entitlement),
                    COLORS[(2 * i + 1) % COLORS.len()],
                ));
            }
        }
        chart(&format!("Pool {}: CPU allocation and entitlement, % of the cluster", ps.pool), lines, "%");
    }
    let curves: Vec<Curve<'_>> = reports
        .iter()
        .enumerate()
        .filter_map(|(i, (name, r))| {
            let curve = &r.fill.as_ref()?.gpu_curve;
            (!curve.is_empty()).then(|| {
                let points = curve.iter().map(|p| (p.arrived * 100.0, p.allocated * 100.0)).collect();
                (name.to_string(), points, COLORS[i % COLORS.len()])
            })
        })
        .collect();
    if !curves.is_empty() {
        out.push_str(&percent_chart(
            "GPU allocated as the work arrives (arrive until full)",
            "GPU asked for by the jobs arrived, % of GPU capacity",
            &curves,
        ));
        out.push('\n');
    }
    out
}

fn waits_html(r: &Report) -> String {
    let mut rows = vec![["pool", "kind", "runs", "p50", "p95", "p99", "max"].map(String::from).to_vec()];
    for w in &r.waits {
        let mut row = vec![w.pool.clone(), w.kind.clone()];
        row.extend(wait_cells(&w.wait_ms));
        rows.push(row);
    }
    html_table(&rows)
}

fn details_html(r: &Report) -> String {
    let mut out = String::new();
    out.push_str("<h2>Waits per pool and job kind</h2>");
    out.push_str(&waits_html(r));
    out.push_str("<h2>Pools against their entitlement</h2>");
    let mut rows = vec![["pool", "CPU share", "entitled", "mean |dev|", "GPU mean |dev|"].map(String::from).to_vec()];
    for f in &r.fairness {
        rows.push(vec![
            f.pool.clone(),
            pct(f.cpu_mean_share),
            pct(f.cpu_mean_entitlement),
            pct(f.cpu_mean_abs_deviation),
            pct(f.gpu_mean_abs_deviation),
        ]);
    }
    out.push_str(&html_table(&rows));
    out.push_str("<h2>Never placed</h2>");
    if r.never_placed.by_reason.is_empty() {
        out.push_str("<p>Every task was placed.</p>");
    } else {
        let rows: Vec<Vec<String>> = std::iter::once(vec!["tasks".to_string(), "reason".to_string()])
            .chain(r.never_placed.by_reason.iter().map(|(k, v)| vec![v.to_string(), k.clone()]))
            .collect();
        out.push_str(&html_table(&rows));
        let rows: Vec<Vec<String>> = std::iter::once(["job", "instance", "pool", "reason"].map(String::from).to_vec())
            .chain(
                r.never_placed
                    .tasks
                    .iter()
                    .take(50)
                    .map(|t| vec![t.job.clone(), t.instance.to_string(), t.pool.clone(), t.reason.clone()]),
            )
            .collect();
        out.push_str("<p class=\"note\">The first 50 (the JSON lists up to 1,000):</p>");
        out.push_str(&html_table(&rows));
    }
    out.push_str("<h2>Plugin calls</h2>");
    out.push_str(&html_table(&plugin_call_rows(r)));
    if let Some(m) = &r.measured {
        let _ = write!(
            out,
            "<h2>Measured</h2><p class=\"note\">Wall-clock figures: they vary between runs and are left out of reproducible output (<code>--reproducible</code>).</p><p>{} in {} steps, {:.0}× real time{}</p>",
            secs(m.wall_ms),
            m.steps,
            m.speedup,
            m.peak_rss_mib.map(|v| format!(", peak memory {v} MiB")).unwrap_or_default()
        );
        out.push_str(&html_table(&latency_rows(m, "≤", "µs")));
    }
    out
}

/// One report as a self-contained HTML page.
pub fn html(r: &Report) -> String {
    let mut body = String::new();
    let _ = write!(body, "<h1>Replay of {} </h1>", esc(&r.trace));
    let _ = write!(
        body,
        "<p class=\"note\">source {}, {} hosts, {} jobs, {} tasks; {}, loop period {} ms; replay ended at {}</p>",
        esc(&r.source),
        r.hosts,
        r.jobs,
        r.outcomes.tasks,
        seeds(r),
        r.tick_ms,
        secs(r.end_ms)
    );
    let rows: Vec<Vec<String>> = std::iter::once(vec!["slot".to_string(), "policy".to_string()])
        .chain(r.policies.iter().map(|(s, p)| vec![s.clone(), p.clone()]))
        .chain(r.swaps.iter().map(|s| vec!["swap".into(), s.clone()]))
        .collect();
    body.push_str(&html_table(&rows));
    body.push_str("<h2>Headline</h2>");
    let rows: Vec<Vec<String>> = headline(r).into_iter().map(|(k, v)| vec![k, v]).collect();
    body.push_str(&html_table(&rows));
    body.push_str("<h2>Over time</h2>");
    body.push_str(&charts(&[("", r)]));
    body.push_str(&details_html(r));
    page(&format!("paceline sim: {}", r.trace), &body)
}

/// Two reports side by side, charts overlaid.
pub fn compare_html(a: &Report, b: &Report, names: [&str; 2]) -> String {
    let mut body = String::new();
    let _ = write!(body, "<h1>{} vs {} on {}</h1>", esc(names[0]), esc(names[1]), esc(&a.trace));
    let _ = write!(
        body,
        "<p class=\"note\">source {}, {} hosts, {} jobs, {} tasks; {}, loop period {} ms</p>",
        esc(&a.source),
        a.hosts,
        a.jobs,
        a.outcomes.tasks,
        seeds(a),
        a.tick_ms
    );
    let mut rows = vec![vec!["slot".to_string(), names[0].to_string(), names[1].to_string()]];
    let slots: std::collections::BTreeSet<&String> = a.policies.keys().chain(b.policies.keys()).collect();
    for s in slots {
        rows.push(vec![
            s.clone(),
            a.policies.get(s).cloned().unwrap_or_default(),
            b.policies.get(s).cloned().unwrap_or_default(),
        ]);
    }
    body.push_str(&html_table(&rows));
    body.push_str("<h2>Side by side</h2>");
    let mut rows = vec![vec![String::new(), names[0].to_string(), names[1].to_string(), "B − A".to_string()]];
    for ((k, va), (_, vb)) in headline(a).into_iter().zip(headline(b)) {
        let d = delta(&va, &vb);
        rows.push(vec![k, va, vb, d]);
    }
    body.push_str(&html_table(&rows));
    body.push_str("<p class=\"note\">B − A is in each figure's unit; shares differ in percentage points (pp).</p>");
    body.push_str("<h2>Over time</h2>");
    body.push_str(&charts(&[(names[0], a), (names[1], b)]));
    for (name, r) in [(names[0], a), (names[1], b)] {
        let _ = write!(body, "<h2 style=\"margin-top:40px\">{}</h2>", esc(name));
        body.push_str(&details_html(r));
    }
    page(&format!("paceline sim compare: {}", a.trace), &body)
}

/// The plugin calls table (header first), for the text and the HTML page.
fn plugin_call_rows(r: &Report) -> Vec<Vec<String>> {
    let mut rows = vec![["slot", "version", "calls", "faults"].map(String::from).to_vec()];
    for p in &r.plugins {
        rows.push(vec![p.slot.clone(), p.version.clone(), p.calls.to_string(), p.faults.to_string()]);
    }
    rows
}

/// The measured plugin latency table, with the page's own spelling of "at
/// most" and of microseconds.
fn latency_rows(m: &Measured, at_most: &str, micros: &str) -> Vec<Vec<String>> {
    let mut rows = vec![vec![
        "slot".into(),
        "version".into(),
        "calls".into(),
        "mean".into(),
        format!("p50 {at_most}"),
        format!("p99 {at_most}"),
    ]];
    for p in &m.plugins {
        rows.push(vec![
            p.slot.clone(),
            p.version.clone(),
            p.calls.to_string(),
            format!("{} {micros}", p.mean_us),
            format!("{} {micros}", p.p50_us),
            format!("{} {micros}", p.p99_us),
        ]);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 43: B − A had no units (`+1.20` for a share, nothing at all
    /// for `59.0 s` against `2.1 min`).
    #[test]
    fn differences_carry_their_unit() {
        assert_eq!(delta("61.5%", "62.7%"), "+1.2 pp");
        assert_eq!(delta("62.7%", "62.7%"), "=");
        assert_eq!(delta("59.0 s", "2.1 min"), "+67.0 s");
        assert_eq!(delta("2.1 min", "59.0 s"), "-67.0 s");
        assert_eq!(delta("1.0 h", "3.5 h"), "+2.5 h");
        assert_eq!(delta("500 ms", "1.5 s"), "+1.0 s");
        assert_eq!(delta("12", "9"), "-3");
        assert_eq!(delta("1.50", "2.25"), "+0.75");
        assert_eq!(delta("3.0 cores (25.0%)", "4.5 cores (37.5%)"), "+1.50 cores");
        assert_eq!(delta("50.0% of 4", "100.0% of 4"), "+50.0 pp");
        assert_eq!(delta("job-7", "-"), "");
    }
}
