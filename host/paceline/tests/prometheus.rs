//! `/metrics` through the real binary, and read back through a real
//! Prometheus (Debian's, started by `deploy/prometheus/prometheus.sh`, as
//! `scripts/test` does): the figures Prometheus stores match what the
//! cluster itself says, the alert rules pass `promtool`, and every query of
//! the Grafana dashboard returns data.
//!
//! The tests that need Prometheus read `PACELINE_PROMETHEUS` (its URL) and
//! `PACELINE_PROMETHEUS_TARGETS` (the directory its file discovery reads):
//! `eval "$(deploy/prometheus/prometheus.sh env DIR)"` after `start`. Run
//! alone without them, they say so and pass without checking anything.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{BIN, Dev, eventually, free_port, http_get, tokens_file};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn cli(api: u16, args: &[&str]) -> Output {
    Command::new(BIN).args(args).env("PACELINE_SERVER", format!("http://127.0.0.1:{api}")).output().expect("cli runs")
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn json(api: u16, args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let text = ok(cli(api, &all));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?} printed no JSON ({e}): {text}"))
}

fn job_file(dir: &Path, name: &str, pool: &str, n: u32, cpu_millis: u64) -> String {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &path,
        format!(
            "name: {name}\nowner: metrics\npool: {pool}\nkind: batch\ninstance_count: {n}\ndefault_task:\n  command: work\n  env: {{SIM_DURATION_MS: \"600000\"}}\n  resources: {{cpu_millis: {cpu_millis}, memory_mib: 64, disk_mib: 10, gpu_milli: 0, ports: 0}}\n"
        ),
    )
    .expect("write");
    path.to_str().expect("utf-8").to_string()
}

#[test]
fn metrics_are_served_behind_the_api_tokens_and_open_on_the_scrape_listener() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let tokens = dir.join("tokens.yaml");
    let token = tokens_file(&tokens, &["--name", "scraper", "--role", "user", "--pool", "/default"]);
    let (api, scrape) = (free_port(), free_port());
    let _dev = Dev::start(
        dir,
        api,
        3,
        &["--tokens-file", tokens.to_str().expect("utf-8"), "--metrics-listen", &format!("127.0.0.1:{scrape}")],
    );

    let (code, _) = http_get(api, "/metrics", None);
    assert_eq!(code, 401, "the API port asks for a token");
    let (code, body) = http_get(api, "/metrics", Some(&token));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("paceline_hosts{state=\"up\",reachable=\"true\"} 3"), "{body}");
    let (code, body) = http_get(scrape, "/metrics", None);
    assert_eq!(code, 200, "the scrape listener needs no token");
    for family in [
        "paceline_placement_round_seconds",
        "paceline_pool_entitlement{pool=\"/default\",kind=\"cpu\"}",
        "paceline_plugin_active_version_info{slot=\"placement/batch\"",
        "paceline_plugin_calls_total{",
        "paceline_process_resident_memory_bytes",
        "paceline_membership_leading 1",
        "paceline_store_op_seconds_count{backend=\"sqlite\",op=\"list_pools\"}",
        // The refused call and the accepted one above, by method and code.
        "paceline_api_requests_total{method=\"/metrics\",code=\"401\"} 1",
        "paceline_api_requests_total{method=\"/metrics\",code=\"200\"} 1",
    ] {
        assert!(body.contains(family), "no {family} in:\n{body}");
    }
}

/// `GET /metrics` as Prometheus asks for it: OpenMetrics when `openmetrics`,
/// else the classic text format.
fn scrape(port: u16, openmetrics: bool) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let accept = if openmetrics { "application/openmetrics-text; version=1.0.0" } else { "text/plain; version=0.0.4" };
    write!(s, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: {accept}\r\nConnection: close\r\n\r\n")
        .expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default()
}

/// A sample line: its name, labels (in order, `le` included) and value.
type Sample = (String, Vec<(String, String)>, f64);

/// Parses one sample line of the exposition.
fn sample(line: &str) -> Option<Sample> {
    let (name, rest) = match line.find(['{', ' ']) {
        Some(i) => line.split_at(i),
        None => return None,
    };
    let mut labels = Vec::new();
    let mut rest = rest;
    if let Some(body) = rest.strip_prefix('{') {
        // label="value" pairs; values may hold escaped quotes, commas and braces.
        let mut chars = body.char_indices().peekable();
        let mut end = None;
        loop {
            let mut key = String::new();
            for (i, c) in chars.by_ref() {
                match c {
                    '=' => break,
                    '}' => {
                        end = Some(i);
                        break;
                    }
                    ',' => {}
                    c => key.push(c),
                }
            }
            if end.is_some() {
                break;
            }
            assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "a quoted label value in {line}");
            let mut value = String::new();
            while let Some((_, c)) = chars.next() {
                match c {
                    '\\' => value.push(chars.next().map(|(_, c)| c).unwrap_or('\\')),
                    '"' => break,
                    c => value.push(c),
                }
            }
            labels.push((key.trim().to_string(), value));
        }
        rest = &body[end.expect("labels end with }") + 1..];
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some((name.to_string(), labels, value))
}

/// Every histogram of an exposition (either format) checked as Prometheus
/// reads one: per series, buckets cumulative in `le` order, a `+Inf` bucket,
/// and `+Inf` equal to `_count`. Returns the `_count` of each series, keyed
/// `family{labels}`, or the problems found.
fn check_histograms(text: &str) -> Result<std::collections::BTreeMap<String, f64>, Vec<String>> {
    use std::collections::BTreeMap;
    let families: Vec<&str> =
        text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.strip_suffix(" histogram")).collect();
    assert!(!families.is_empty(), "no histogram in:\n{text}");
    // family -> series (labels without le) -> (buckets, count)
    type Series = (Vec<(f64, f64)>, Option<f64>);
    let mut seen: BTreeMap<String, BTreeMap<String, Series>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let Some((name, labels, value)) = sample(line) else { continue };
        for family in &families {
            let Some(suffix) = name.strip_prefix(family) else { continue };
            if suffix != "_bucket" && suffix != "_count" {
                continue;
            }
            let key = labels
                .iter()
                .filter(|(k, _)| k != "le")
                .map(|(k, v)| format!("{k}={v:?}"))
                .collect::<Vec<_>>()
                .join(",");
            let series = seen.entry(family.to_string()).or_default().entry(key).or_default();
            match suffix {
                "_bucket" => {
                    let le = labels.iter().find(|(k, _)| k == "le").map(|(_, v)| v.as_str()).expect("le");
                    let le = if le == "+Inf" { f64::INFINITY } else { le.parse().expect("le is a number") };
                    series.0.push((le, value));
                }
                "_count" => series.1 = Some(value),
                _ => {}
            }
        }
    }
    let mut problems = Vec::new();
    let mut counts = BTreeMap::new();
    for family in &families {
        let Some(all) = seen.get(*family) else { continue };
        for (key, (buckets, count)) in all {
            let id = format!("{family}{{{key}}}");
            let mut sorted = buckets.clone();
            sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
            if let Some(w) = sorted.windows(2).find(|w| w[1].1 < w[0].1) {
                problems.push(format!("{id}: bucket le={} holds {} < {} of le={}", w[1].0, w[1].1, w[0].1, w[0].0));
            }
            match (sorted.last(), count) {
                (Some((le, inf)), Some(count)) if le.is_infinite() => {
                    if inf != count {
                        problems.push(format!("{id}: +Inf bucket {inf} != _count {count}"));
                    }
                    counts.insert(id, *count);
                }
                _ => problems.push(format!("{id}: no +Inf bucket or no _count ({buckets:?}, {count:?})")),
            }
        }
    }
    if problems.is_empty() { Ok(counts) } else { Err(problems) }
}

/// Issue 43: the submit→running histogram summed its buckets twice (+Inf 60
/// for 4 tasks). Every histogram family of a real scrape, in both formats,
/// is a valid Prometheus histogram once work has been observed in it.
#[test]
fn every_histogram_of_a_scrape_is_cumulative_and_its_inf_bucket_is_its_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let (api, scrape_port) = (free_port(), free_port());
    let _dev = Dev::start(dir, api, 2, &["--metrics-listen", &format!("127.0.0.1:{scrape_port}")]);
    let id = json(api, &["job", "create", &job_file(dir, "web", "/default", 4, 500)])["id"]
        .as_str()
        .expect("id")
        .to_string();
    eventually(60, "4 running", || {
        json(api, &["task", "list", &id])
            .as_array()
            .is_some_and(|t| t.len() == 4 && t.iter().all(|t| t["state"] == "RUNNING"))
    });
    // One scrape before, so that scrape_seconds has observations too.
    let _ = scrape(scrape_port, false);
    let submit = "paceline_task_submit_to_running_seconds{}";
    eventually(30, "the four tasks in submit_to_running", || {
        scrape(scrape_port, false).lines().any(|l| l == "paceline_task_submit_to_running_seconds_count 4")
    });
    for openmetrics in [false, true] {
        let text = scrape(scrape_port, openmetrics);
        let counts = check_histograms(&text)
            .unwrap_or_else(|p| panic!("openmetrics {openmetrics}: invalid histograms:\n{}\n\n{text}", p.join("\n")));
        assert_eq!(counts.get(submit), Some(&4.0), "{counts:?}");
        // The hand-built plugin histogram and the library's own are among
        // those checked, with observations in them.
        for family in ["paceline_plugin_call_seconds{", "paceline_placement_round_seconds{", "paceline_scrape_seconds{"]
        {
            assert!(counts.iter().any(|(k, n)| k.starts_with(family) && *n > 0.0), "no {family} observed: {counts:?}");
        }
    }
}

/// Prometheus's URL and target directory, or `None` (with a note) when the
/// environment does not name a running one.
fn prometheus() -> Option<(String, PathBuf)> {
    match (std::env::var("PACELINE_PROMETHEUS"), std::env::var("PACELINE_PROMETHEUS_TARGETS")) {
        (Ok(url), Ok(targets)) if !url.is_empty() && !targets.is_empty() => Some((url, PathBuf::from(targets))),
        _ => {
            eprintln!(
                "SKIPPED: PACELINE_PROMETHEUS and PACELINE_PROMETHEUS_TARGETS are not set. Start one with \
                 `deploy/prometheus/prometheus.sh start DIR PORT` and `eval \"$(deploy/prometheus/prometheus.sh env DIR)\"` \
                 (scripts/test does)."
            );
            None
        }
    }
}

/// An instant query: the result vector as (labels, value) pairs.
fn query(url: &str, promql: &str) -> Vec<(serde_json::Value, f64)> {
    let out = Command::new("curl")
        .args(["-fsS", "--max-time", "10", "-G", "--data-urlencode", &format!("query={promql}")])
        .arg(format!("{url}/api/v1/query"))
        .output()
        .expect("curl runs");
    assert!(out.status.success(), "query {promql}: {}", String::from_utf8_lossy(&out.stderr));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).expect("Prometheus answers JSON");
    assert_eq!(answer["status"], "success", "query {promql}: {answer}");
    answer["data"]["result"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .map(|r| {
                    let value = r["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
                    (r["metric"].clone(), value)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The value of a query that must answer one row, once it does.
fn one(url: &str, promql: &str) -> Option<f64> {
    match query(url, promql).as_slice() {
        [(_, v)] => Some(*v),
        _ => None,
    }
}

/// A target file for Prometheus's file discovery, removed when dropped.
struct Target(PathBuf);

impl Target {
    fn add(dir: &Path, name: &str, addr: &str, cluster: &str) -> Target {
        std::fs::create_dir_all(dir).expect("targets dir");
        let path = dir.join(format!("{name}.json"));
        let tmp = dir.join(format!(".{name}.tmp"));
        let body = serde_json::json!([{ "targets": [addr], "labels": { "cluster": cluster } }]);
        std::fs::write(&tmp, body.to_string()).expect("write target");
        // Renamed into place: discovery never reads half a file.
        std::fs::rename(&tmp, &path).expect("rename target");
        Target(path)
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn prometheus_sees_what_the_cluster_says_and_every_dashboard_query_answers() {
    let Some((url, targets)) = prometheus() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let (api, scrape) = (free_port(), free_port());
    let _dev = Dev::start(dir, api, 4, &["--metrics-listen", &format!("127.0.0.1:{scrape}")]);
    let cluster = format!("test-{}-{scrape}", std::process::id());
    let _target = Target::add(&targets, &cluster, &format!("127.0.0.1:{scrape}"), &cluster);
    let sel = format!("cluster=\"{cluster}\"");

    eventually(60, "Prometheus scrapes the cluster", || one(&url, &format!("up{{{sel}}}")) == Some(1.0));
    eventually(30, "Prometheus sees 4 reachable hosts", || {
        one(&url, &format!("sum(paceline_hosts{{{sel},state=\"up\",reachable=\"true\"}})")) == Some(4.0)
    });

    // Work: four tasks of one core in a pool that reserves four cores, and
    // one more that must wait for that reservation.
    let pool = dir.join("pool.yaml");
    std::fs::write(&pool, "reservation: {cpu: 4000, memory: 4096, disk: 1000}\n").expect("write");
    ok(cli(api, &["pool", "create", "/team", pool.to_str().expect("utf-8")]));
    let id = json(api, &["job", "create", &job_file(dir, "metered", "/team", 4, 1000)])["id"]
        .as_str()
        .expect("id")
        .to_string();
    eventually(60, "4 running", || {
        json(api, &["task", "list", &id])
            .as_array()
            .is_some_and(|t| t.len() == 4 && t.iter().all(|t| t["state"] == "RUNNING"))
    });
    ok(cli(api, &["job", "create", &job_file(dir, "over", "/team", 1, 1000)]));

    // Swap the batch slot's policy and shadow the old one beside it.
    let before = json(api, &["plugin", "list"]);
    let old = before
        .as_array()
        .and_then(|slots| slots.iter().find(|s| s["slot"] == "placement/batch"))
        .and_then(|s| s["active"].as_str())
        .map(str::to_string)
        .unwrap_or_else(|| panic!("placement/batch runs a version: {before}"));
    ok(cli(
        api,
        &["plugin", "deploy", "placement/batch", "spread", "metrics-1", paceline_plugin_artifacts::SPREAD_PATH],
    ));
    ok(cli(api, &["plugin", "activate", "placement/batch", "spread@metrics-1"]));
    ok(cli(api, &["plugin", "shadow", "placement/batch", &old]));
    // Placed by the new version: two more tasks.
    let swapped = json(api, &["job", "create", &job_file(dir, "swapped", "/default", 2, 500)])["id"]
        .as_str()
        .expect("id")
        .to_string();
    eventually(60, "2 more running", || {
        json(api, &["task", "list", &swapped])
            .as_array()
            .is_some_and(|t| t.len() == 2 && t.iter().all(|t| t["state"] == "RUNNING"))
    });

    // The figures, as Prometheus has them, against the cluster's own.
    eventually(30, "runs on hosts: 6", || one(&url, &format!("sum(paceline_host_runs{{{sel}}})")) == Some(6.0));
    // Issue 43: the submit→running histogram as Prometheus reads it. Its
    // +Inf bucket is its count (it was 15 times the count), and the median
    // of six tasks that each ran within seconds is seconds, where buckets
    // summed twice put it past 10 s.
    let submit = "paceline_task_submit_to_running_seconds";
    eventually(30, "six tasks in submit_to_running", || one(&url, &format!("{submit}_count{{{sel}}}")) == Some(6.0));
    assert_eq!(one(&url, &format!("{submit}_bucket{{{sel},le=\"+Inf\"}}")), Some(6.0));
    let median = one(&url, &format!("histogram_quantile(0.5, sum by (le) ({submit}_bucket{{{sel}}}))"));
    assert!(median.is_some_and(|m| m > 0.0 && m <= 10.0), "median submit->running: {median:?}");
    let pools = json(api, &["pool", "list"]);
    let team = pools
        .get("pools")
        .unwrap_or(&pools)
        .as_array()
        .and_then(|p| p.iter().find(|p| p["path"] == "/team"))
        .cloned()
        .unwrap_or_else(|| panic!("no /team in {pools}"));
    let team_cpu = team["allocation"]["cpu_millis"].as_f64().unwrap_or_else(|| panic!("no allocation in {team}"));
    assert_eq!(team_cpu, 4000.0, "{team}");
    eventually(30, "/team's cpu allocation as the API says", || {
        one(&url, &format!("paceline_pool_allocation{{{sel},pool=\"/team\",kind=\"cpu\"}}")) == Some(team_cpu)
    });
    eventually(30, "the gang waiting in /team", || {
        one(&url, &format!("sum(paceline_pending_gangs{{{sel},pool=\"/team\"}})")) == Some(1.0)
    });
    eventually(30, "the swapped version active", || {
        one(
            &url,
            &format!(
                "paceline_plugin_active_version_info{{{sel},slot=\"placement/batch\",version=\"spread@metrics-1\"}}"
            ),
        ) == Some(1.0)
    });
    let calls_now = || -> f64 {
        let plugins = json(api, &["plugin", "list"]);
        plugins
            .as_array()
            .and_then(|slots| slots.iter().find(|s| s["slot"] == "placement/batch"))
            .and_then(|s| s["versions"].as_array())
            .and_then(|vs| vs.iter().find(|v| v["id"] == "spread@metrics-1"))
            .and_then(|v| v["calls"].as_str().and_then(|c| c.parse().ok()).or_else(|| v["calls"].as_f64()))
            .unwrap_or(0.0)
    };
    let calls = calls_now();
    assert!(calls >= 1.0, "the new version placed the swapped job");
    eventually(30, "the new version's calls as the API counts them", || {
        one(
            &url,
            &format!("paceline_plugin_calls_total{{{sel},slot=\"placement/batch\",version=\"spread@metrics-1\"}}"),
        ) == Some(calls)
    });

    // Every query of the dashboard, scoped to this cluster, answers.
    // Rates need two samples in their window: one more scrape or two.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let text = std::fs::read_to_string(repo().join("deploy/grafana/paceline.json")).expect("dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard is JSON");
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(str::to_string))
        .collect();
    assert!(exprs.len() >= 20, "the dashboard has its queries: {}", exprs.len());
    let mut empty = Vec::new();
    for expr in &exprs {
        let scoped = expr.replace("job=~\"$job\"", &format!("job=~\".+\", {sel}")).replace("$pool", ".*");
        assert!(!scoped.contains('$'), "a dashboard variable left in {scoped}");
        if query(&url, &scoped).is_empty() {
            empty.push(scoped);
        }
    }
    assert!(empty.is_empty(), "dashboard queries without data:\n{}", empty.join("\n"));

    // The alert rules are loaded and none fires on a healthy cluster.
    let out = Command::new("curl").args(["-fsS", &format!("{url}/api/v1/rules")]).output().expect("curl");
    let rules: serde_json::Value = serde_json::from_slice(&out.stdout).expect("rules JSON");
    let names: Vec<&str> = rules["data"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|r| r["name"].as_str())
        .collect();
    for alert in ["PacelinePluginFaultRate", "PacelineNoLeader", "PacelineHostsLost"] {
        assert!(names.contains(&alert), "{alert} not loaded: {names:?}");
    }
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    if prometheus().is_none() {
        return;
    }
    let dir = repo().join("deploy/prometheus");
    for args in [vec!["check", "rules", "rules.yml"], vec!["test", "rules", "rules_test.yml"]] {
        let out = Command::new("promtool").args(&args).current_dir(&dir).output().expect("promtool runs");
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
