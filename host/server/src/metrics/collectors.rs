//! The collectors read at scrape time: what the roles hold now (pools,
//! pending gangs, hosts, plugin slots), the audit writer's counts, the
//! submit→running histogram and the process itself. Nothing here is kept up
//! to date between scrapes.

use std::sync::{Arc, Mutex};

use paceline_hostmgr::HostAccess;
use paceline_plugin::Registry as Plugins;
use paceline_resmgr::ResourceManager;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use super::{KINDS, counters, gauge, gauges, per_kind, resources};

/// What the cluster's roles hold, read at scrape time: pools (spec and
/// the resource manager's figures), pending gangs by reason, hosts by state,
/// plugin slots. Each scrape takes the resource manager's lock once, for
/// one pass over its pools and queued gangs.
pub struct ClusterCollector {
    resmgr: Arc<Mutex<ResourceManager>>,
    hosts: Arc<dyn HostAccess>,
    plugins: Arc<Plugins>,
    per_host: bool,
}

impl std::fmt::Debug for ClusterCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterCollector").finish_non_exhaustive()
    }
}

impl ClusterCollector {
    /// Reads these roles at every scrape.
    pub fn new(resmgr: Arc<Mutex<ResourceManager>>, hosts: Arc<dyn HostAccess>, plugins: Arc<Plugins>) -> Self {
        ClusterCollector { resmgr, hosts, plugins, per_host: false }
    }

    /// Also writes each host's capacity and allocation, labelled by host
    /// (`metrics_per_host`: for small clusters; off by default, as a label
    /// per host grows the series with the cluster).
    pub fn per_host(mut self, on: bool) -> Self {
        self.per_host = on;
        self
    }
}

/// One pool's row: its path and its figures per kind.
struct PoolRow {
    path: String,
    figures: [[u64; 4]; 5],
    queued_gangs: u64,
    live_tasks: u64,
}

impl Collector for ClusterCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        // Copy under the lock, encode after it: the scheduling loop waits
        // on this lock, the encoding need not hold it.
        let (pools, pending, capacity) = match self.resmgr.lock() {
            Ok(rm) => {
                let tree = rm.tree();
                let pools: Vec<PoolRow> = tree
                    .paths()
                    .into_iter()
                    .filter_map(|path| rm.pool_status(&path))
                    .map(|s| PoolRow {
                        figures: [
                            per_kind(&s.spec.reservation),
                            per_kind(&s.spec.limit),
                            resources(&s.entitlement),
                            resources(&s.allocation),
                            resources(&s.demand),
                        ],
                        queued_gangs: s.queued_gangs,
                        live_tasks: s.live_tasks,
                        path: s.path,
                    })
                    .collect();
                (pools, rm.pending_counts(), resources(&rm.capacity()))
            }
            Err(_) => (Vec::new(), Vec::new(), [0; 4]),
        };
        let figures = [
            ("pool_reservation", "Reserved (guaranteed) amount of a pool per resource kind"),
            ("pool_limit", "Limit of a pool per resource kind (2^63-1 or more: unlimited)"),
            ("pool_entitlement", "Non-revocable entitlement of a pool per resource kind"),
            ("pool_allocation", "Held by a pool's non-revocable tasks per resource kind"),
            ("pool_demand", "Non-revocable demand of a pool (allocation and queued gangs) per resource kind"),
        ];
        for (i, (name, help)) in figures.iter().enumerate() {
            gauges(
                &mut encoder,
                name,
                &format!("{help}; cpu in millicores, memory and disk in MiB, gpu in devices"),
                pools.iter().flat_map(|p| {
                    KINDS.iter().zip(p.figures[i]).map(|(kind, v)| ([("pool", p.path.as_str()), ("kind", *kind)], v))
                }),
            )?;
        }
        gauges(
            &mut encoder,
            "pool_queued_gangs",
            "Gangs queued in a pool (subtree sums for interior pools)",
            pools.iter().map(|p| ([("pool", p.path.as_str())], p.queued_gangs)),
        )?;
        gauges(
            &mut encoder,
            "pool_live_tasks",
            "Admitted tasks of a pool not yet ended (subtree sums for interior pools)",
            pools.iter().map(|p| ([("pool", p.path.as_str())], p.live_tasks)),
        )?;
        gauges(
            &mut encoder,
            "pending_gangs",
            "Queued gangs per pool and the reason they wait",
            pending.iter().map(|c| ([("pool", c.pool.as_str()), ("reason", c.reason)], c.gangs)),
        )?;
        gauges(
            &mut encoder,
            "pending_tasks",
            "Tasks of the queued gangs per pool and the reason they wait",
            pending.iter().map(|c| ([("pool", c.pool.as_str()), ("reason", c.reason)], c.tasks)),
        )?;
        gauges(
            &mut encoder,
            "cluster_capacity",
            "What the reachable hosts that take tasks offer, per resource kind",
            KINDS.iter().zip(capacity).map(|(kind, v)| ([("kind", *kind)], v)),
        )?;

        encode_hosts(self.hosts.as_ref(), self.per_host, &mut encoder)?;
        encode_plugins(&self.plugins, &mut encoder)
    }
}

/// Hosts by state, leases and runs, read from the host manager at scrape
/// time: what a `--roles hostmgr` process serves beside its own figures.
/// The flag: also each host's capacity and allocation (see
/// [`ClusterCollector::per_host`]).
pub struct HostsCollector(pub Arc<dyn HostAccess>, pub bool);

impl std::fmt::Debug for HostsCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostsCollector").finish_non_exhaustive()
    }
}

impl Collector for HostsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        encode_hosts(self.0.as_ref(), self.1, &mut encoder)
    }
}

/// Plugin slots, versions, calls, faults, fallbacks and shadows, read at
/// scrape time from the registry the handle holds now: what a `--roles
/// placement` process serves. The process opens a new registry when a slot
/// changes, and puts it in the handle; until the first, nothing is written.
pub struct PluginsCollector(pub Arc<Mutex<Option<Arc<Plugins>>>>);

impl std::fmt::Debug for PluginsCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginsCollector").finish_non_exhaustive()
    }
}

impl Collector for PluginsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let current = self.0.lock().ok().and_then(|r| r.clone());
        match current {
            Some(registry) => encode_plugins(&registry, &mut encoder),
            None => Ok(()),
        }
    }
}

/// What became of audit records ([`paceline_api::audit::AuditCounters`]):
/// written, dropped on a full queue, lost to a failed write, pruned.
pub struct AuditCollector(pub paceline_api::audit::Auditor);

impl std::fmt::Debug for AuditCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditCollector").finish_non_exhaustive()
    }
}

impl Collector for AuditCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        use std::sync::atomic::Ordering::Relaxed;
        let c = self.0.counters();
        counters(
            &mut encoder,
            "audit_records",
            "Audit records by outcome: written to the store, dropped (queue full), failed (the store write failed; lost), pruned (retention)",
            [
                ([("outcome", "written")], c.written.load(Relaxed)),
                ([("outcome", "dropped")], c.dropped.load(Relaxed)),
                ([("outcome", "failed")], c.failed.load(Relaxed)),
                ([("outcome", "pruned")], c.pruned.load(Relaxed)),
            ],
        )?;
        // Calls, not records: a flood shows here while the log grows by one
        // aggregate record per source and window.
        counters(
            &mut encoder,
            "audit_refusals_aggregated",
            "Refused calls counted into an aggregate audit record (past the per-source share of a window) instead of one record each",
            [([] as [(&str, &str); 0], c.refusals_counted.load(Relaxed))],
        )
    }
}

fn encode_hosts(
    hosts: &dyn HostAccess,
    per_host: bool,
    encoder: &mut DescriptorEncoder<'_>,
) -> Result<(), std::fmt::Error> {
    let mut by_state: std::collections::BTreeMap<(&'static str, bool), u64> = Default::default();
    for state in ["up", "draining", "drained", "down"] {
        for reachable in [true, false] {
            by_state.insert((state, reachable), 0);
        }
    }
    let (mut leased, mut runs) = (0u64, 0u64);
    let all = hosts.hosts();
    if per_host {
        encode_per_host(&all, encoder)?;
    }
    for h in all {
        *by_state.entry((state_label(h.state), h.reachable)).or_default() += 1;
        leased += u64::from(h.lease.is_some());
        runs += h.runs.len() as u64;
    }
    gauges(
        encoder,
        "hosts",
        "Hosts by maintenance state and whether they are reachable (registered, heartbeat on time)",
        by_state.iter().map(|((state, reachable), n)| {
            ([("state", *state), ("reachable", if *reachable { "true" } else { "false" })], *n)
        }),
    )?;
    gauge(encoder, "hosts_leased", "Hosts leased to a placement engine right now (offers outstanding)", leased)?;
    gauge(encoder, "host_runs", "Runs holding resources on hosts (tasks launched and not yet ended)", runs)
}

/// `host_capacity` and `host_allocated` per host and kind (opt-in).
fn encode_per_host(
    hosts: &[paceline_hostmgr::HostInfo],
    encoder: &mut DescriptorEncoder<'_>,
) -> Result<(), std::fmt::Error> {
    gauges(
        encoder,
        "host_capacity",
        "What a host offers per resource kind (metrics_per_host); cpu in millicores, memory and disk in MiB, gpu in devices",
        hosts.iter().flat_map(|h| {
            KINDS
                .iter()
                .zip(resources(&h.view.total))
                .map(|(kind, v)| ([("host", h.view.name.as_str()), ("kind", *kind)], v))
        }),
    )?;
    gauges(
        encoder,
        "host_allocated",
        "What a host's runs hold per resource kind (metrics_per_host)",
        hosts.iter().flat_map(|h| {
            KINDS
                .iter()
                .zip(resources(&h.view.allocated))
                .map(|(kind, v)| ([("host", h.view.name.as_str()), ("kind", *kind)], v))
        }),
    )
}

fn encode_plugins(plugins: &Plugins, encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
    let slots = plugins.list();
    {
        let mut family = encoder.encode_descriptor(
            "plugin_active_version",
            "The version each plugin slot runs (no row: the native policy serves the slot)",
            None,
            MetricType::Info,
        )?;
        for s in &slots {
            if let Some(active) = &s.active {
                family.encode_info(&[("slot", s.slot.as_str()), ("version", active.as_str())])?;
            }
        }
    }
    counters(
        encoder,
        "plugin_calls",
        "Calls into a plugin version (shadow calls included)",
        slots.iter().flat_map(|s| {
            s.versions.iter().map(|v| ([("slot", s.slot.clone()), ("version", version_id(&v.record))], v.metrics.calls))
        }),
    )?;
    counters(
        encoder,
        "plugin_faults",
        "Failed plugin calls by fault kind (deadline, memory_cap, panic, stack_overflow, out_of_fuel, trap, invalid_answer, instantiate, refused_downstream)",
        slots.iter().flat_map(|s| {
            // Every kind, zeros included: a series that exists before its
            // first fault lets `rate()` see that fault.
            s.versions.iter().flat_map(|v| {
                paceline_plugin::FaultKind::ALL.iter().map(|kind| {
                    let n = v.metrics.errors.get(kind.as_str()).copied().unwrap_or(0);
                    (
                        [
                            ("slot", s.slot.clone()),
                            ("version", version_id(&v.record)),
                            ("kind", kind.as_str().to_string()),
                        ],
                        n,
                    )
                })
            })
        }),
    )?;
    counters(
        encoder,
        "plugin_fallbacks",
        "Calls answered by an earlier version or the native policy after the version tried first failed",
        slots.iter().map(|s| ([("slot", s.slot.as_str())], s.fallbacks)),
    )?;
    {
        let mut family = encoder.encode_descriptor(
            "plugin_call_seconds",
            "Latency of calls into a plugin version",
            None,
            MetricType::Histogram,
        )?;
        for s in &slots {
            for v in &s.versions {
                let m = &v.metrics;
                let buckets: Vec<(f64, u64)> = m
                    .latency_us
                    .iter()
                    .map(|(bound, n)| (if *bound == u64::MAX { f64::INFINITY } else { *bound as f64 / 1e6 }, *n))
                    .collect();
                // Per-bucket counts (the encoder accumulates them); the
                // count is their total, so +Inf equals _count even when a
                // call was counted between the two reads of the snapshot.
                let count: u64 = buckets.iter().map(|(_, n)| n).sum();
                let sum = (m.mean_us as f64 * count as f64) / 1e6;
                let labels = [("slot", s.slot.clone()), ("version", version_id(&v.record))];
                family.encode_family(&labels)?.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
            }
        }
    }
    let shadows: Vec<(String, String, u64, u64)> = slots
        .iter()
        .filter_map(|s| {
            let report = plugins.shadow_report(&s.slot).ok()??;
            let differing = report.compared.saturating_sub(report.identical + report.candidate_faults);
            Some((s.slot.clone(), report.candidate, report.compared, differing))
        })
        .collect();
    gauges(
        encoder,
        "plugin_shadow_compared",
        "Inputs the running shadow candidate of a slot was compared on",
        shadows.iter().map(|(slot, c, n, _)| ([("slot", slot.as_str()), ("candidate", c.as_str())], *n)),
    )?;
    gauges(
        encoder,
        "plugin_shadow_disagreements",
        "Inputs on which the running shadow candidate decided differently from the active version",
        shadows.iter().map(|(slot, c, _, d)| ([("slot", slot.as_str()), ("candidate", c.as_str())], *d)),
    )
}

/// A maintenance state as a label: lower case, as in the CLI's flags.
fn state_label(state: paceline_model::host::MaintenanceState) -> &'static str {
    use paceline_model::host::MaintenanceState as S;
    match state {
        S::Up => "up",
        S::Draining => "draining",
        S::Drained => "drained",
        S::Down => "down",
    }
}

/// `name@version`, as the CLI and the API name versions.
fn version_id(r: &paceline_plugin::VersionRecord) -> String {
    r.id()
}

/// Submit→running latency (issue 22), read from the job manager's
/// histogram at scrape time: per task, its first run's first RUNNING minus
/// its job's creation.
pub struct SubmitLatencyCollector {
    jobs: Arc<paceline_jobmgr::JobManager>,
}

impl std::fmt::Debug for SubmitLatencyCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubmitLatencyCollector").finish_non_exhaustive()
    }
}

impl SubmitLatencyCollector {
    /// Reads `jobs` at every scrape.
    pub fn new(jobs: Arc<paceline_jobmgr::JobManager>) -> Self {
        SubmitLatencyCollector { jobs }
    }
}

impl Collector for SubmitLatencyCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        encode_submit_latency(&mut encoder, &self.jobs.submit_to_running())
    }
}

pub(super) fn encode_submit_latency(
    encoder: &mut DescriptorEncoder<'_>,
    s: &paceline_jobmgr::latency::LatencySnapshot,
) -> Result<(), std::fmt::Error> {
    // The snapshot's counts are cumulative, and the encoder adds them up
    // once more (it takes a count per bucket): hand it the differences, or
    // every bucket past the first is summed twice and +Inf exceeds _count.
    let buckets: Vec<(f64, u64)> = s
        .buckets
        .iter()
        .scan(0u64, |below, (bound, cumulative)| {
            let n = cumulative.saturating_sub(*below);
            *below = (*below).max(*cumulative);
            Some((if *bound == u64::MAX { f64::INFINITY } else { *bound as f64 / 1e3 }, n))
        })
        .collect();
    encoder
        .encode_descriptor(
            "task_submit_to_running_seconds",
            "Time from a job's creation to each of its tasks first RUNNING (first run, first config), once per task",
            None,
            MetricType::Histogram,
        )?
        .encode_histogram::<NoLabelSet>(s.sum_ms as f64 / 1e3, s.count, &buckets, None)
}

/// The process's resident memory, threads and open file descriptors, read
/// from `/proc/self` at scrape time (Linux; elsewhere nothing is written).
#[derive(Debug)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let Ok(status) = std::fs::read_to_string("/proc/self/status") else { return Ok(()) };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok())
        };
        if let Some(kib) = field("VmRSS:") {
            gauge(&mut encoder, "process_resident_memory_bytes", "Resident memory of this process.", kib * 1024)?;
        }
        if let Some(threads) = field("Threads:") {
            gauge(&mut encoder, "process_threads", "Threads of this process.", threads)?;
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            gauge(&mut encoder, "process_open_fds", "Open file descriptors of this process.", fds.count() as u64)?;
        }
        encoder
            .encode_descriptor("build", "The paceline build serving these metrics", None, MetricType::Info)?
            .encode_info(&[("version", env!("CARGO_PKG_VERSION"))])
    }
}
