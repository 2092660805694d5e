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
