//! "Why pending" for people: the kind of wait a task is in (a small, stable
//! set, used as a metric label and by tools) and a host census like
//! Kubernetes' FailedScheduling ("0/5 hosts fit: 3 insufficient cpu, 2 not
//! rack=r1"), from which the text is built.
//!
//! The census is a pure function of a task's shape (demand, constraints, job)
//! and the hosts as the host manager sees them now. It is computed when
//! someone asks (the API), once per distinct shape, never in a placement
//! round: the round's hot path is unchanged (decision 0026).
//!
//! No text built here names an internal identifier: hosts are counted, not
//! named, and gangs are named by job and instance numbers by the caller.

use std::collections::BTreeMap;
use std::fmt;

use crate::constraint::Constraint;
use crate::host::MaintenanceState;
use crate::pool::ResourceKind;
use crate::resources::Resources;
use crate::view::HostView;

/// The kind of wait a pending task is in. [`PendingKind::as_str`] is stable:
/// it is a metric label value and part of the API (`Task.pending_kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PendingKind {
    /// No host in the cluster could hold it even empty (too small, or no host
    /// has the attributes its constraints ask for). It waits until a host
    /// that can joins, or its job is changed.
    NeverFits,
    /// Some host could hold it, but none has the room now (or the per-host
    /// limits and task-label constraints rule the rest out).
    WaitingForCapacity,
    /// Its pool is over its entitlement or reservation (or can never hold
    /// what it needs): the resource manager has not admitted it.
    OverEntitlement,
    /// The placement plugin left it unplaced for a reason of its own.
    DeferredByPlugin,
    /// It waits on a gang: its own gang (placed all or none) did not fit
    /// whole, or another gang ahead of it in its pool's queue is blocked.
    BlockedByGang,
    /// Nothing is wrong: it waits its turn (not yet evaluated by admission,
    /// or admitted and waiting for the next placement round).
    AdmissionOrder,
}

impl PendingKind {
    /// Every kind.
    pub const ALL: [PendingKind; 6] = [
        PendingKind::NeverFits,
        PendingKind::WaitingForCapacity,
        PendingKind::OverEntitlement,
        PendingKind::DeferredByPlugin,
        PendingKind::BlockedByGang,
        PendingKind::AdmissionOrder,
    ];

    /// A stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NeverFits => "never_fits",
            Self::WaitingForCapacity => "waiting_for_capacity",
            Self::OverEntitlement => "over_entitlement",
            Self::DeferredByPlugin => "deferred_by_plugin",
            Self::BlockedByGang => "blocked_by_gang",
            Self::AdmissionOrder => "admission_order",
        }
    }

    /// Parses [`PendingKind::as_str`]'s names.
    pub fn parse(name: &str) -> Option<PendingKind> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// How a job summary counts tasks of this kind ("2 never fit").
    pub fn summary_phrase(self) -> &'static str {
        match self {
            Self::NeverFits => "never fit",
            Self::WaitingForCapacity => "waiting for capacity",
            Self::OverEntitlement => "held by their pool",
            Self::DeferredByPlugin => "deferred by the placement plugin",
            Self::BlockedByGang => "blocked by a gang",
            Self::AdmissionOrder => "waiting in admission order",
        }
    }
}

impl fmt::Display for PendingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a task is pending: its kind and a sentence a person can act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Why {
    /// The kind.
    pub kind: PendingKind,
    /// The sentence.
    pub text: String,
    /// A few words for a job's summary beside the kind's phrase, such as
    /// which of its pool's bounds holds it ("controller limit of /spark");
    /// empty when the phrase says enough.
    pub detail: String,
}

/// A host as the census counts it: its view and whether it takes new work.
#[derive(Clone, Debug)]
pub struct CensusHost {
    /// Capacity, allocation, attributes, what it runs: the host manager's
    /// own copy, shared (a census on every CreateJob must not copy every
    /// host's job counts).
    pub view: std::sync::Arc<HostView>,
    /// Maintenance state.
    pub state: MaintenanceState,
    /// Within its heartbeat deadline.
    pub reachable: bool,
}

/// A task's shape: what the census needs to know of it.
#[derive(Clone, Copy, Debug)]
pub struct Shape<'a> {
    /// Its job's id (for `max_per_host`).
    pub job: &'a str,
    /// What one run needs.
    pub demand: &'a Resources,
    /// Hard and engine-enforced constraints.
    pub constraints: &'a [Constraint],
}

/// Hosts counted against one shape.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Hosts known (every state).
    pub hosts: u32,
    /// Hosts that could take it now.
    pub fit_now: u32,
    /// Hosts in service that could take it if they were empty.
    pub fit_empty: u32,
    /// Hosts that do not fit now, by the first reason found (in the order:
    /// out of service, constraints, per-host limit, size, free room).
    pub reasons: BTreeMap<String, u32>,
    /// In service hosts that satisfy its attribute constraints: the largest
    /// capacity of each kind among them (for "largest host has 32 cpu").
    pub largest: Option<Resources>,
    /// The first kind the demand exceeds `largest` in, with both amounts.
    pub short: Option<(ResourceKind, u64, u64)>,
    /// Hosts out of service (draining, drained, down, unreachable).
    pub out_of_service: u32,
}

impl Census {
    /// Counts `hosts` against `shape`: one pass, no allocation per host (the
    /// reasons are counted by a small key and worded once at the end).
    pub fn of<'a>(shape: Shape<'_>, hosts: impl IntoIterator<Item = &'a CensusHost>) -> Census {
        let mut c = Census::default();
        let mut counts: Vec<(Ruled, u32)> = Vec::new();
        let mut bump = |key: Ruled| match counts.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += 1,
            None => counts.push((key, 1)),
        };
        let max_per_host = shape.constraints.iter().find_map(|k| match k {
            Constraint::MaxPerHost { max } => Some(*max),
            _ => None,
        });
        for h in hosts {
            c.hosts += 1;
            let out_of_service = match h.state {
                MaintenanceState::Up if h.reachable => None,
                MaintenanceState::Up => Some("unreachable"),
                MaintenanceState::Draining => Some("draining"),
                MaintenanceState::Drained => Some("drained"),
                MaintenanceState::Down => Some("down"),
            };
            if let Some(reason) = out_of_service {
                bump(Ruled::OutOfService(reason));
                continue;
            }
            // Attribute constraints never change while the host is up: a host
            // failing one can never take the task.
            if let Some(i) = shape.constraints.iter().position(|k| is_attribute(k) && k.admits(&h.view) == Some(false))
            {
                bump(Ruled::Constraint(i));
                continue;
            }
            c.largest = Some(c.largest.map_or(h.view.total, |l| l.max(&h.view.total)));
            let big_enough = shape.demand.fits_in(&h.view.total);
            if big_enough {
                c.fit_empty += 1;
            }
            if let Some(i) = shape.constraints.iter().position(|k| !is_attribute(k) && k.admits(&h.view) == Some(false))
            {
                bump(Ruled::Constraint(i));
                continue;
            }
            if let Some(max) = max_per_host
                && h.view.job_counts.get(shape.job).is_some_and(|n| *n >= max)
            {
                bump(Ruled::MaxPerHost(max));
                continue;
            }
            if !big_enough {
                bump(Ruled::TooSmall(first_short(shape.demand, &h.view.total)));
                continue;
            }
            let free = h.view.free();
            if !shape.demand.fits_in(&free) {
                bump(Ruled::Insufficient(first_short(shape.demand, &free)));
                continue;
            }
            c.fit_now += 1;
        }
        for (key, n) in counts {
            let words = match key {
                Ruled::OutOfService(state) => state.to_string(),
                Ruled::Constraint(i) => constraint_phrase(&shape.constraints[i]),
                Ruled::MaxPerHost(max) => format!("max {max} per host reached"),
                Ruled::TooSmall(kind) => format!("too small ({kind})"),
                Ruled::Insufficient(kind) => format!("insufficient {kind}"),
            };
            if matches!(key, Ruled::OutOfService(_)) {
                c.out_of_service += n;
            }
            *c.reasons.entry(words).or_default() += n;
        }
        if let Some(largest) = c.largest {
            c.short = ResourceKind::ALL
                .into_iter()
                .map(|k| (k, amount(shape.demand, k), amount(&largest, k)))
                .find(|(_, need, has)| need > has);
        }
        c
    }

    /// Whether a host could ever take `shape`, as [`Census::of`] counts it
    /// in `fit_empty`: in service, every attribute constraint met, and big
    /// enough when empty. One such host means the shape does not
    /// [`Census::never_fits`]; a caller that only wants that answer can stop
    /// at the first one instead of counting every host.
    pub fn could_ever_take(shape: &Shape<'_>, view: &HostView, state: MaintenanceState, reachable: bool) -> bool {
        state == MaintenanceState::Up
            && reachable
            && !shape.constraints.iter().any(|k| is_attribute(k) && k.admits(view) == Some(false))
            && shape.demand.fits_in(&view.total)
    }

    /// No host in service could ever take it (and there are hosts: an empty
    /// cluster is waiting for hosts, not a task that never fits).
    pub fn never_fits(&self) -> bool {
        self.hosts > self.out_of_service && self.fit_empty == 0
    }

    /// Why it never fits, in a few words: "needs 64 cpu; largest host has
    /// 32", or that no host matches its constraints.
    pub fn shortfall(&self) -> String {
        match (self.short, self.largest) {
            (Some((kind, need, has)), _) => {
                format!("needs {}; largest host has {}", human(kind, need), human(kind, has))
            }
            (None, None) => "no host in service matches its constraints".to_string(),
            (None, Some(_)) => "no single host is big enough in every resource at once".to_string(),
        }
    }
}

impl fmt::Display for Census {
    /// "0/5 hosts fit: 3 insufficient cpu, 2 not rack=r1", the largest
    /// counts first.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.hosts == 0 {
            return f.write_str("no hosts in the cluster yet");
        }
        write!(f, "{}/{} hosts fit", self.fit_now, self.hosts)?;
        let mut reasons: Vec<(&String, &u32)> = self.reasons.iter().collect();
        reasons.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
        for (i, (reason, n)) in reasons.into_iter().enumerate() {
            f.write_str(if i == 0 { ": " } else { ", " })?;
            write!(f, "{n} {reason}")?;
        }
        Ok(())
    }
}

/// What ruled a host out, while counting (worded once at the end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ruled {
    OutOfService(&'static str),
    /// Index into the shape's constraints.
    Constraint(usize),
    MaxPerHost(u32),
    TooSmall(&'static str),
    Insufficient(&'static str),
}

/// Constraints on host attributes (static while the host is up), as opposed
/// to those on what the host runs (which change as tasks come and go).
fn is_attribute(c: &Constraint) -> bool {
    matches!(
        c,
        Constraint::AttributeEquals { .. }
            | Constraint::AttributeNotEquals { .. }
            | Constraint::AttributeIn { .. }
            | Constraint::AttributeExists { .. }
    )
}

/// Why a host fails `c`, in the words of the job's own spec.
fn constraint_phrase(c: &Constraint) -> String {
    match c {
        Constraint::AttributeEquals { key, value } => format!("not {key}={value}"),
        Constraint::AttributeNotEquals { key, value } => format!("{key}={value} excluded"),
        Constraint::AttributeIn { key, values } => format!("{key} not in [{}]", values.join(", ")),
        Constraint::AttributeExists { key } => format!("no {key} attribute"),
        Constraint::WithTaskLabel { key, value } => format!("no task labelled {key}={value}"),
        Constraint::WithoutTaskLabel { key, value } => format!("runs a task labelled {key}={value}"),
        Constraint::MaxPerHost { max } => format!("max {max} per host reached"),
        Constraint::SpreadOver { key } => format!("spread over {key}"),
    }
}

/// The first kind (cpu, memory, disk, gpu, then ports) `demand` exceeds
/// `room` in.
fn first_short(demand: &Resources, room: &Resources) -> &'static str {
    ResourceKind::ALL.into_iter().find(|k| amount(demand, *k) > amount(room, *k)).map_or("ports", ResourceKind::as_str)
}

fn amount(r: &Resources, kind: ResourceKind) -> u64 {
    match kind {
        ResourceKind::Cpu => r.cpu_millis,
        ResourceKind::Memory => r.memory_mib,
        ResourceKind::Disk => r.disk_mib,
        ResourceKind::Gpu => r.gpu_milli,
    }
}

/// An amount as a person writes it: cpus (not millicores), MiB, gpus (not
/// milli-GPUs).
pub fn human(kind: ResourceKind, n: u64) -> String {
    match kind {
        ResourceKind::Cpu if n.is_multiple_of(1000) => format!("{} cpu", n / 1000),
        ResourceKind::Cpu => format!("{} cpu", n as f64 / 1000.0),
        ResourceKind::Memory => format!("{n} MiB of memory"),
        ResourceKind::Disk => format!("{n} MiB of disk"),
        ResourceKind::Gpu if n.is_multiple_of(1000) => format!("{} gpu", n / 1000),
        ResourceKind::Gpu => format!("{} gpu", n as f64 / 1000.0),
    }
}

/// Instance numbers as ranges: "0-2, 5".
pub fn instance_ranges(instances: impl IntoIterator<Item = u32>) -> String {
    let mut out = String::new();
    let mut run: Option<(u32, u32)> = None;
    let flush = |out: &mut String, (a, b): (u32, u32)| {
        if !out.is_empty() {
            out.push_str(", ");
        }
        if a == b {
            out.push_str(&a.to_string());
        } else {
            out.push_str(&format!("{a}-{b}"));
        }
    };
    for i in instances {
        run = match run {
            Some((a, b)) if b.checked_add(1) == Some(i) => Some((a, i)),
            Some(r) => {
                flush(&mut out, r);
                Some((i, i))
            }
            None => Some((i, i)),
        };
    }
    if let Some(r) = run {
        flush(&mut out, r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str, cpu: u64, used: u64, rack: &str) -> HostView {
        let mut h = HostView::new(name, Resources::new(cpu, 8192, 0, 0));
        h.allocated = Resources::new(used, 0, 0, 0);
        h.attributes.insert("rack".into(), rack.into());
        h
    }

    fn up(view: &HostView) -> CensusHost {
        CensusHost { view: std::sync::Arc::new(view.clone()), state: MaintenanceState::Up, reachable: true }
    }

    #[test]
    fn counts_each_host_once_by_its_first_reason() {
        let hosts = [
            host("a", 4000, 3500, "r1"),
            host("b", 4000, 0, "r1"),
            host("c", 4000, 0, "r2"),
            host("d", 1000, 0, "r1"),
            host("e", 4000, 0, "r1"),
        ];
        let demand = Resources::new(2000, 100, 0, 0);
        let constraints = [Constraint::AttributeEquals { key: "rack".into(), value: "r1".into() }];
        let shape = Shape { job: "j", demand: &demand, constraints: &constraints };
        let mut census_hosts: Vec<_> = hosts.iter().map(up).collect();
        census_hosts[4].state = MaintenanceState::Draining;
        let c = Census::of(shape, &census_hosts);
        assert_eq!((c.hosts, c.fit_now, c.fit_empty), (5, 1, 2));
        assert_eq!(c.to_string(), "1/5 hosts fit: 1 draining, 1 insufficient cpu, 1 not rack=r1, 1 too small (cpu)");
        assert!(!c.never_fits());
    }

    #[test]
    fn could_ever_take_agrees_with_the_census() {
        let small = Resources::new(2_000, 4_096, 10_000, 0);
        let big = Resources::new(8_000, 32_768, 100_000, 0);
        let mut hosts = Vec::new();
        for (i, (total, state, reachable)) in [
            (small, MaintenanceState::Up, true),
            (big, MaintenanceState::Draining, true),
            (big, MaintenanceState::Up, false),
            (big, MaintenanceState::Up, true),
        ]
        .into_iter()
        .enumerate()
        {
            let mut view = HostView { name: format!("h{i}"), total, ..HostView::default() };
            view.attributes.insert("zone".into(), if i == 3 { "b".into() } else { "a".into() });
            hosts.push(CensusHost { view: std::sync::Arc::new(view), state, reachable });
        }
        let zone = |z: &str| Constraint::AttributeEquals { key: "zone".into(), value: z.into() };
        let cases = [
            (Resources::new(1_000, 1_024, 0, 0), vec![]),
            (Resources::new(4_000, 1_024, 0, 0), vec![]),
            (Resources::new(4_000, 1_024, 0, 0), vec![zone("a")]),
            (Resources::new(4_000, 1_024, 0, 0), vec![zone("b")]),
            (Resources::new(1_000, 1_024, 0, 0), vec![zone("c")]),
            (Resources::new(16_000, 1_024, 0, 0), vec![]),
        ];
        for (demand, constraints) in &cases {
            let shape = Shape { job: "j", demand, constraints };
            let census = Census::of(Shape { job: "j", demand, constraints }, &hosts);
            let some = hosts.iter().any(|h| Census::could_ever_take(&shape, &h.view, h.state, h.reachable));
            assert_eq!(!census.never_fits(), some, "{demand:?} {constraints:?}");
        }
    }

    #[test]
    fn never_fits_names_the_shortfall_against_the_largest_host() {
        let hosts = [host("a", 32_000, 0, "r1"), host("b", 16_000, 0, "r1")];
        let demand = Resources::new(64_000, 100, 0, 0);
        let hosts: Vec<_> = hosts.iter().map(up).collect();
        let c = Census::of(Shape { job: "j", demand: &demand, constraints: &[] }, &hosts);
        assert!(c.never_fits());
        assert_eq!(c.shortfall(), "needs 64 cpu; largest host has 32 cpu");
        assert_eq!(c.to_string(), "0/2 hosts fit: 2 too small (cpu)");
        let none = Census::of(Shape { job: "j", demand: &demand, constraints: &[] }, std::iter::empty());
        assert!(!none.never_fits(), "an empty cluster waits for hosts");
    }

    #[test]
    fn a_full_host_and_a_per_host_limit_wait_rather_than_never_fit() {
        let mut full = host("a", 4000, 4000, "r1");
        full.job_counts.insert("j".into(), 1);
        let demand = Resources::new(1000, 100, 0, 0);
        let constraints = [Constraint::MaxPerHost { max: 1 }];
        let c = Census::of(Shape { job: "j", demand: &demand, constraints: &constraints }, &[up(&full)]);
        assert!(!c.never_fits());
        assert_eq!(c.to_string(), "0/1 hosts fit: 1 max 1 per host reached");
    }

    #[test]
    fn names_round_trip_and_ranges_read_well() {
        for k in PendingKind::ALL {
            assert_eq!(PendingKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(PendingKind::parse("bored"), None);
        assert_eq!(instance_ranges([0, 1, 2, 5, 7, 8]), "0-2, 5, 7-8");
        assert_eq!(instance_ranges([3]), "3");
        assert_eq!(human(ResourceKind::Cpu, 1500), "1.5 cpu");
    }
}
