//! Prometheus metrics of a `paceline` process, served as `GET /metrics`.
//!
//! Two kinds of figures, kept apart on purpose:
//! - **recorded** ones ([`Metrics`]'s counters and histograms), updated by
//!   the process's loops once per placement round or per burst of host
//!   events, never once per task or per host, so the hot path pays a few
//!   atomic adds per round;
//! - **read at scrape time** ones ([`ClusterCollector`], [`ProcessCollector`]):
//!   pools, pending gangs, hosts, plugin slots and the process itself are
//!   read from the roles' existing state when Prometheus asks, so nothing
//!   is kept up to date between scrapes.
//!
//! Labels are bounded: pools, plugin slots and versions, host states,
//! resource kinds, pending reasons and API methods. No label names a task
//! or a host. The exposition itself is `prometheus-client`'s: this module
//! says what the figures are, never how they are written.
//!
//! Where it is served: the API port (behind the API's authentication,
//! any principal may read it), and, when `metrics_listen` is set, a
//! listener of its own without authentication (see docs/operations.md,
//! "Metrics"). Decision: docs/decisions/0022-metrics.md.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use paceline_model::pool::PerKind;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

mod collectors;
mod usage;

pub use collectors::{
    AuditCollector, ClusterCollector, HostsCollector, PluginsCollector, ProcessCollector, SubmitLatencyCollector,
};
pub use usage::UsageCollector;

/// Seconds buckets for rounds and API calls: 100 µs to ~100 s.
fn seconds_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.0001, 4.0, 11)
}

/// Labels of an API call: its method (a gRPC method or a web route) and
/// the answer's code.
type CallLabels = [(&'static str, String); 2];

/// The recorded figures of one process and the registry that serves them
/// with the scrape-time collectors.
pub struct Metrics {
    registry: Registry,
    round_seconds: Histogram,
    rounds_idle: Counter,
    tasks_taken: Counter,
    tasks_placed: Counter,
    tasks_deferred: Counter,
    launch_failures: Counter,
    tasks_dropped: Counter,
    port_errors: Counter,
    hosts_feasible: Counter,
    hosts_offered: Counter,
    host_events: Counter,
    run_updates: Counter,
    run_updates_failed: Counter,
    api_calls: Family<CallLabels, Counter>,
    api_seconds: Family<[(&'static str, String); 1], Histogram>,
    leader_epoch: Gauge,
    elections: Family<[(&'static str, String); 1], Counter>,
    role_leading: Family<[(&'static str, String); 1], Gauge>,
    scrape_seconds: Histogram,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// The recorded figures, the process collector and `collectors` (for a
    /// cluster, [`ClusterCollector`]), all named `paceline_*`.
    pub fn new(collectors: Vec<Box<dyn Collector>>) -> Metrics {
        Metrics::build(true, collectors)
    }

    /// The process's own figures only (memory, threads, descriptors, build):
    /// what `paceline agent --metrics-listen` serves.
    pub fn process_only() -> Metrics {
        Metrics::build(false, Vec::new())
    }

    fn build(server: bool, collectors: Vec<Box<dyn Collector>>) -> Metrics {
        // A process that is no server registers nothing but the collectors,
        // so its endpoint shows no scheduler figures stuck at zero.
        let mut all = Registry::with_prefix("paceline");
        let mut unused = Registry::default();
        let registry = if server { &mut all } else { &mut unused };
        let round_seconds = Histogram::new(seconds_buckets());
        registry.register(
            "placement_round_seconds",
            "Wall time of placement rounds that took tasks (take, feasible, select, commit and launch)",
            round_seconds.clone(),
        );
        let counter = |registry: &mut Registry, name: &str, help: &str| {
            let c = Counter::default();
            registry.register(name, help, c.clone());
            c
        };
        let rounds_idle = counter(registry, "placement_rounds_idle", "Placement rounds that found no task ready");
        let tasks_taken = counter(registry, "placement_tasks_taken", "Tasks taken from the ready queues by rounds");
        let tasks_placed =
            counter(registry, "placement_tasks_placed", "Tasks placed and launched by rounds (launches)");
        let tasks_deferred = counter(
            registry,
            "placement_tasks_deferred",
            "Tasks a round sent back to the ready queue with a reason (no host fitted, deferred)",
        );
        let launch_failures = counter(
            registry,
            "launch_failures",
            "Placed tasks whose host refused the launch (they go back to READY under a new run)",
        );
        let tasks_dropped = counter(
            registry,
            "placement_tasks_dropped",
            "Placed tasks that no longer waited at the commit (killed or preempted meanwhile)",
        );
        let port_errors = counter(
            registry,
            "placement_port_errors",
            "Calls of a round to the ready queue or the host side that failed",
        );
        let hosts_feasible = counter(
            registry,
            "placement_hosts_feasible",
            "Hosts feasible for some task of a plugin call, summed over calls (decision 0054)",
        );
        let hosts_offered = counter(
            registry,
            "placement_hosts_offered",
            "Hosts offered to the placement plugin, summed over calls: below feasible where candidates were narrowed",
        );
        let host_events = counter(registry, "host_events", "Events from the host manager handled (runs and inventory)");
        let run_updates = counter(registry, "run_updates", "Run updates from hosts handled by the job manager");
        let run_updates_failed =
            counter(registry, "run_updates_failed", "Run updates the job manager could not write (they come again)");
        let api_calls = Family::<CallLabels, Counter>::default();
        registry.register("api_requests", "API requests by method and answer code", api_calls.clone());
        let api_seconds = Family::<[(&'static str, String); 1], Histogram>::new_with_constructor(
            (|| Histogram::new(seconds_buckets())) as fn() -> Histogram,
        );
        registry.register(
            "api_request_seconds",
            "Time to the API's answer (its head, for streams) by method",
            api_seconds.clone(),
        );
        let leading: Gauge = Gauge::default();
        registry.register(
            "membership_leading",
            "1 on a server that runs the scheduling roles (it leads them, or its membership is embedded)",
            leading.clone(),
        );
        // Only a server that runs the roles builds these metrics (a standby
        // serves no /metrics until it leads).
        leading.set(1);
        let leader_epoch: Gauge = Gauge::default();
        registry.register(
            "membership_epoch",
            "Fencing epoch this server leads under (0: not leading, or an embedded membership)",
            leader_epoch.clone(),
        );
        let elections = Family::<[(&'static str, String); 1], Counter>::default();
        registry.register(
            "membership_elections_won",
            "Elections this process won, per role (jobmgr, resmgr, hostmgr, placement)",
            elections.clone(),
        );
        let role_leading = Family::<[(&'static str, String); 1], Gauge>::default();
        registry.register(
            "membership_role_leading",
            "1 per role this process leads (with an embedded membership: every role it runs)",
            role_leading.clone(),
        );
        let scrape_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 12));
        registry.register(
            "scrape_seconds",
            "Time to gather and encode earlier scrapes of this endpoint",
            scrape_seconds.clone(),
        );
        all.register_collector(Box::new(ProcessCollector));
        for c in collectors {
            all.register_collector(c);
        }
        Metrics {
            registry: all,
            round_seconds,
            rounds_idle,
            tasks_taken,
            tasks_placed,
            tasks_deferred,
            launch_failures,
            tasks_dropped,
            port_errors,
            hosts_feasible,
            hosts_offered,
            host_events,
            run_updates,
            run_updates_failed,
            api_calls,
            api_seconds,
            leader_epoch,
            elections,
            role_leading,
            scrape_seconds,
        }
    }

    /// Records one placement round: a handful of atomic adds.
    pub fn round(&self, report: &paceline_placement::RoundReport, took: Duration) {
        if report.taken == 0 {
            // Idle rounds run every loop period; timing them would fill the
            // histogram with nothing and hide the rounds that did work.
            self.rounds_idle.inc();
            return;
        }
        self.round_seconds.observe(took.as_secs_f64());
        self.tasks_taken.inc_by(report.taken as u64);
        self.tasks_placed.inc_by(report.placed as u64);
        self.tasks_deferred.inc_by(report.unplaced as u64);
        self.launch_failures.inc_by(report.refused as u64);
        self.tasks_dropped.inc_by(report.dropped as u64);
        self.port_errors.inc_by(report.port_errors as u64);
        self.hosts_feasible.inc_by(report.hosts_feasible as u64);
        self.hosts_offered.inc_by(report.hosts_offered as u64);
    }

    /// Records one burst of host events.
    pub fn host_events(&self, events: usize, run_updates: usize, failed: usize) {
        self.host_events.inc_by(events as u64);
        self.run_updates.inc_by(run_updates as u64);
        self.run_updates_failed.inc_by(failed as u64);
    }

    /// Records the roles this process leads and, when it won an election
    /// for them, the epoch it leads under (`None`: an embedded membership,
    /// no election).
    pub fn leading(&self, roles: &[&str], epoch: Option<u64>) {
        for role in roles {
            let label = [("role", (*role).to_string())];
            self.role_leading.get_or_create(&label).set(1);
            // The series exists from the start (0 on an embedded membership),
            // so that `increase()` sees the first election.
            let won = self.elections.get_or_create(&label);
            if epoch.is_some() {
                won.inc();
            }
        }
        if let Some(epoch) = epoch {
            self.leader_epoch.set(i64::try_from(epoch).unwrap_or(i64::MAX));
        }
    }

    /// Records one API call (see [`paceline_api::CallObserver`]).
    fn api_call(&self, method: &str, code: &str, took: Duration) {
        let method = method.to_string();
        self.api_calls.get_or_create(&[("method", method.clone()), ("code", code.to_string())]).inc();
        self.api_seconds.get_or_create(&[("method", method)]).observe(took.as_secs_f64());
    }

    /// Every figure in the Prometheus text format (0.0.4), or in OpenMetrics
    /// text when `openmetrics`.
    pub fn encode(&self, openmetrics: bool) -> Result<String, std::fmt::Error> {
        let started = std::time::Instant::now();
        let mut out = String::with_capacity(64 * 1024);
        if openmetrics {
            prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        } else {
            prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)?;
        }
        self.scrape_seconds.observe(started.elapsed().as_secs_f64());
        Ok(out)
    }
}

impl paceline_api::CallObserver for Metrics {
    fn observe(&self, method: &str, code: &str, took: Duration) {
        self.api_call(method, code, took);
    }
}

/// `GET /metrics` over `metrics`, for the API port (behind its
/// authentication) or a scrape listener of its own.
pub fn routes(metrics: Arc<Metrics>) -> Router {
    Router::new().route(
        "/metrics",
        get(move |headers: HeaderMap| {
            let metrics = metrics.clone();
            async move { scrape(&metrics, &headers) }
        }),
    )
}

fn scrape(metrics: &Metrics, headers: &HeaderMap) -> Response {
    // Prometheus asks for OpenMetrics first when it can read it.
    let openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains("application/openmetrics-text"));
    match metrics.encode(openmetrics) {
        Ok(body) => {
            let content_type = if openmetrics {
                "application/openmetrics-text; version=1.0.0; charset=utf-8"
            } else {
                prometheus_client::encoding::prometheus_text::CONTENT_TYPE
            };
            ([(header::CONTENT_TYPE, content_type)], body).into_response()
        }
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "encoding the metrics failed\n").into_response(),
    }
}

/// Serves `GET /metrics` without authentication on `listener` until
/// `shutdown` resolves: the scrape listener (`metrics_listen`), meant for
/// loopback or a network only Prometheus reaches.
pub async fn serve_scrape(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, routes(metrics)).with_graceful_shutdown(shutdown).await
}

/// Refuses a scrape listener address that is not loopback unless
/// `acknowledged` (`metrics_listen_public: true`, `--metrics-listen-public`):
/// the listener has no authentication, and every pool, plugin and host
/// figure is on it, so serving it on a routable address must be a decision,
/// not a typo of `0.0.0.0` for `127.0.0.1`.
pub fn check_scrape_address(addr: SocketAddr, acknowledged: bool) -> Result<(), String> {
    if addr.ip().is_loopback() || acknowledged {
        return Ok(());
    }
    Err(format!(
        "metrics_listen {addr} is not a loopback address, and the scrape listener has no authentication: \
         anyone who reaches it reads every figure. Use 127.0.0.1:PORT, scrape the API port with a token, \
         or acknowledge it with `metrics_listen_public: true` (--metrics-listen-public)"
    ))
}

/// Binds `addr` for [`serve_scrape`] and serves in the background; returns
/// the bound address (the real port when `addr` said 0).
pub async fn spawn_scrape_listener(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tracing::info!(addr = %bound, "metrics listening (no authentication)");
    let task = tokio::spawn(async move {
        if let Err(e) = serve_scrape(listener, metrics, shutdown).await {
            tracing::error!(error = %e, "metrics listener stopped");
        }
    });
    Ok((bound, task))
}

/// Writes one gauge family of rows.
pub(crate) fn gauges<L: EncodeLabelSet, V: prometheus_client::encoding::EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (L, V)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in rows {
        family.encode_family(&labels)?.encode_gauge(&value)?;
    }
    Ok(())
}

/// Writes one gauge without labels.
pub(crate) fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    encoder.encode_descriptor(name, help, None, MetricType::Gauge)?.encode_gauge(&value)
}

/// Writes one counter family of rows (totals kept elsewhere, read now).
pub(crate) fn counters<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (L, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in rows {
        family.encode_family(&labels)?.encode_counter::<NoLabelSet, u64, u64>(&value, None)?;
    }
    Ok(())
}

pub(crate) const KINDS: [&str; 4] = ["cpu", "memory", "disk", "gpu"];

/// A pool's amounts per kind, in the units pools are specified in
/// (millicores, MiB, MiB, devices).
pub(crate) fn per_kind(p: &PerKind<u64>) -> [u64; 4] {
    [p.cpu, p.memory, p.disk, p.gpu]
}

pub(crate) fn resources(r: &paceline_model::Resources) -> [u64; 4] {
    [r.cpu_millis, r.memory_mib, r.disk_mib, r.gpu_milli]
}

#[cfg(test)]
mod tests {
    use super::collectors::encode_submit_latency;
    use super::*;

    #[test]
    fn a_scrape_listener_off_loopback_needs_an_acknowledgement() {
        for addr in ["127.0.0.1:9464", "[::1]:9464", "127.0.0.2:0"] {
            assert_eq!(check_scrape_address(addr.parse().expect("addr"), false), Ok(()), "{addr}");
        }
        for addr in ["0.0.0.0:9464", "10.0.0.5:9464", "[::]:9464"] {
            let e = check_scrape_address(addr.parse().expect("addr"), false).expect_err(addr);
            assert!(e.contains("--metrics-listen-public") && e.contains(addr), "{e}");
            assert_eq!(check_scrape_address(addr.parse().expect("addr"), true), Ok(()), "{addr} acknowledged");
        }
    }

    fn line<'a>(text: &'a str, start: &str) -> Option<&'a str> {
        text.lines().find(|l| l.starts_with(start))
    }

    #[test]
    fn a_round_is_counted_once_and_an_idle_round_is_not_timed() {
        let m = Metrics::new(Vec::new());
        let busy = paceline_placement::RoundReport {
            taken: 5,
            placed: 3,
            unplaced: 1,
            refused: 1,
            hosts_feasible: 900,
            hosts_offered: 400,
            ..Default::default()
        };
        m.round(&busy, Duration::from_millis(2));
        m.round(&paceline_placement::RoundReport::default(), Duration::from_millis(1));
        let text = m.encode(false).expect("encodes");
        assert_eq!(
            line(&text, "paceline_placement_tasks_placed_total "),
            Some("paceline_placement_tasks_placed_total 3")
        );
        assert_eq!(
            line(&text, "paceline_placement_tasks_deferred_total "),
            Some("paceline_placement_tasks_deferred_total 1")
        );
        assert_eq!(line(&text, "paceline_launch_failures_total "), Some("paceline_launch_failures_total 1"));
        assert_eq!(
            line(&text, "paceline_placement_hosts_offered_total "),
            Some("paceline_placement_hosts_offered_total 400")
        );
        assert_eq!(
            line(&text, "paceline_placement_hosts_feasible_total "),
            Some("paceline_placement_hosts_feasible_total 900")
        );
        assert_eq!(
            line(&text, "paceline_placement_rounds_idle_total "),
            Some("paceline_placement_rounds_idle_total 1")
        );
        assert_eq!(
            line(&text, "paceline_placement_round_seconds_count "),
            Some("paceline_placement_round_seconds_count 1")
        );
    }

    #[test]
    fn openmetrics_is_served_when_asked_for_and_ends_with_eof() {
        let m = Metrics::new(Vec::new());
        let text = m.encode(true).expect("encodes");
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(!m.encode(false).expect("encodes").contains("# EOF"));
    }

    #[test]
    fn submit_to_running_is_a_histogram_in_seconds() {
        #[derive(Debug)]
        struct Fixed(paceline_jobmgr::latency::LatencySnapshot);
        impl Collector for Fixed {
            fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
                encode_submit_latency(&mut encoder, &self.0)
            }
        }
        let h = paceline_jobmgr::latency::LatencyHistogram::default();
        h.observe(200);
        h.observe(90_000);
        let text = Metrics::new(vec![Box::new(Fixed(h.snapshot()))]).encode(false).expect("encodes");
        assert_eq!(
            line(&text, "paceline_task_submit_to_running_seconds_count "),
            Some("paceline_task_submit_to_running_seconds_count 2")
        );
        assert_eq!(
            line(&text, "paceline_task_submit_to_running_seconds_sum "),
            Some("paceline_task_submit_to_running_seconds_sum 90.2")
        );
        assert_eq!(
            line(&text, "paceline_task_submit_to_running_seconds_bucket{le=\"0.25\"} "),
            Some("paceline_task_submit_to_running_seconds_bucket{le=\"0.25\"} 1")
        );
    }

    #[test]
    fn an_agent_serves_only_its_process() {
        let text = Metrics::process_only().encode(false).expect("encodes");
        assert!(text.contains("paceline_build_info{"), "{text}");
        assert!(!text.contains("placement"), "{text}");
        assert!(!text.contains("api_requests"), "{text}");
    }
}
