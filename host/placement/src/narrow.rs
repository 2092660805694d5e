//! Candidate narrowing: at most K feasible hosts per group of alike tasks go
//! to the plugin, not every host leased (decision 0054, issue 48).
//!
//! A placement call costs the policy about (tasks × hosts) in the worst
//! case, and an interpreted policy (Python, TypeScript) pays far more per
//! host than Rust; kube-scheduler and Nomad score a sample of the feasible
//! nodes for the same reason. Here, after feasibility (hard constraints are
//! already in the request's eligible lists):
//!
//! 1. The tasks are grouped by what decides where they may go: their
//!    constraint set, their GPU ask's kind (none, a share of one device,
//!    whole devices) and accepted models. Demands within a group differ;
//!    the group's smallest demand decides which hosts are *feasible* (a
//!    host that cannot take the smallest takes none), its mean demand the
//!    pre-score and how many tasks a host holds.
//! 2. A group with more feasible hosts than its limit
//!    ([`Candidates::limit`], adaptive to the cluster) keeps half the limit
//!    from the **tightest fit** (least room left after the mean demand, as a
//!    best-fit or packing policy chooses) and half from the **most free**
//!    (as a spreading policy chooses, and where a fragmentation-aware one
//!    finds whole devices). Ties are broken by a hash of the host and the
//!    round: the same request narrows the same way every time.
//! 3. The limit is raised until the kept hosts hold every task of the group
//!    (by the mean demand, at most `max_per_host` per job on a host), so a
//!    gang or a round of many tasks is never left unplaced by narrowing.
//! 4. Whatever a policy needs beyond the group's candidates is kept too:
//!    each task's preferred host, and the hosts already running a job that
//!    spreads over an attribute (its spread is counted on them).
//!
//! The narrowed request is a request like any other (indices renumbered,
//! eligible lists, attribute columns, job counts and GPU devices cut to the
//! kept hosts); the answer's host indices are mapped back by
//! [`Narrowed::hosts`]. No float decides anything.

use paceline_plugin::Candidates;
use paceline_plugin_sdk::types::{
    AttributeColumn, ConstraintSet, DEVICE_MILLI, GpuHost, HostCount, HostFilter, HostOffer, JobInfo, PlacementRequest,
    PlacementResult, Resources, Task,
};

/// A request cut to its candidates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Narrowed {
    /// The request over the kept hosts only.
    pub request: PlacementRequest,
    /// For each host of `request`, its index in the original request.
    pub hosts: Vec<u32>,
}

impl Narrowed {
    /// `result` (an answer to [`Narrowed::request`]) in the original
    /// request's host indices. Task indices and device grants are unchanged
    /// (tasks are not narrowed; devices are per host).
    pub fn widen(&self, result: PlacementResult) -> PlacementResult {
        widen(&self.hosts, result)
    }
}

/// [`Narrowed::widen`] with the kept hosts alone. An index past them
/// (which the registry's validation refuses before this) becomes one past
/// every host, so it can never name a wrong host.
pub fn widen(hosts: &[u32], mut result: PlacementResult) -> PlacementResult {
    for a in &mut result.assignments {
        a.host = hosts.get(a.host as usize).copied().unwrap_or(u32::MAX);
    }
    result
}

/// What narrowing did to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Narrowing {
    /// The cut request, or `None` when every host is kept (the original
    /// request goes to the plugin as it is).
    pub narrowed: Option<Narrowed>,
    /// Hosts feasible for some group of the request (all hosts when
    /// narrowing is off).
    pub feasible: usize,
    /// Hosts the plugin is offered.
    pub offered: usize,
}

/// One group of alike tasks.
struct Group<'a> {
    constraints: u32,
    /// 0: no GPU; 1: a share of one device; 2: whole devices.
    gpu_kind: u8,
    models: &'a [u32],
    tasks: u64,
    min: Resources,
    sum: Resources,
    min_milli: u32,
    sum_milli: u64,
    /// Distinct jobs, and the sum of their `max_per_host` (`None`: some
    /// job has no limit).
    jobs: Vec<u32>,
}

/// Narrows `request` to at most `candidates` feasible hosts per group of
/// alike tasks (see the module docs). [`Candidates::All`] keeps every host.
pub fn narrow(request: &PlacementRequest, candidates: Candidates) -> Narrowing {
    let n_hosts = request.hosts.len();
    let untouched = |feasible| Narrowing { narrowed: None, feasible, offered: n_hosts };
    let small = candidates == Candidates::Auto && n_hosts <= Candidates::FLOOR;
    if small || matches!(candidates, Candidates::All | Candidates::Count(0)) {
        return untouched(n_hosts);
    }
    let gpu = !request.gpu_tasks.is_empty();
    let groups = groups(request);

    let mut keep = vec![false; n_hosts];
    let mut feasible_any = vec![false; n_hosts];
    let mut feasible: Vec<u32> = Vec::with_capacity(n_hosts);
    let mut scored: Vec<(u64, u64, u32)> = Vec::new();
    for g in &groups {
        feasible.clear();
        let eligible: Box<dyn Iterator<Item = u32> + '_> = match &request.constraints.get(g.constraints as usize) {
            Some(ConstraintSet { eligible: HostFilter::Only(only), .. }) => Box::new(only.iter().copied()),
            _ => Box::new(0..n_hosts as u32),
        };
        for h in eligible {
            if fits(request, h, &g.min, g.gpu_kind, g.min_milli, g.models) {
                feasible.push(h);
                if let Some(f) = feasible_any.get_mut(h as usize) {
                    *f = true;
                }
            }
        }
        let limit = candidates.limit(feasible.len());
        if limit >= feasible.len() {
            for &h in &feasible {
                keep[h as usize] = true;
            }
            continue;
        }
        // The mean demand: what a typical task of the group takes.
        let tasks = g.tasks.max(1);
        let mean = Resources {
            cpu_millis: g.sum.cpu_millis / tasks,
            memory_mib: g.sum.memory_mib / tasks,
            disk_mib: g.sum.disk_mib / tasks,
            gpus: g.sum.gpus / tasks,
            ports: g.sum.ports / tasks,
        };
        let mean_milli = u32::try_from(g.sum_milli / tasks).unwrap_or(u32::MAX);
        scored.clear();
        let rule = rule();
        scored.extend(feasible.iter().map(|&h| {
            let room = if rule == Rule::Sample { 0 } else { room_left(request, h, &mean, gpu) };
            (room, mix(h, request.round), h)
        }));
        scored.sort_unstable();
        // Tightest half from the front, most free half from the back.
        let tight = match rule {
            Rule::Mixed => limit.div_ceil(2),
            Rule::Tight | Rule::Sample => limit,
            Rule::Free => 0,
        };
        let free = limit - tight;
        let cap = per_host_cap(request, &g.jobs);
        let holds = |h: u32| holds(request, h, &mean, g.gpu_kind, mean_milli, cap);
        let mut held: u64 = 0;
        for &(_, _, h) in &scored[..tight] {
            keep[h as usize] = true;
            held = held.saturating_add(holds(h));
        }
        let mut back = scored.len();
        for _ in 0..free {
            back -= 1;
            keep[scored[back].2 as usize] = true;
            held = held.saturating_add(holds(scored[back].2));
        }
        // Raised until the kept hosts hold the whole group: from the most
        // free side inward (most room per host added).
        while held < g.tasks && back > tight {
            back -= 1;
            keep[scored[back].2 as usize] = true;
            held = held.saturating_add(holds(scored[back].2));
        }
    }
    // Preferred hosts, and where spreading jobs already run.
    for t in &request.tasks {
        if let Some(h) = t.preferred_host.and_then(|h| keep.get_mut(h as usize)) {
            *h = true;
        }
    }
    for j in request.jobs.iter().filter(|j| j.spread_over.is_some()) {
        for c in &j.existing {
            if let Some(h) = keep.get_mut(c.host as usize) {
                *h = true;
            }
        }
    }
    let feasible = feasible_any.iter().filter(|f| **f).count();
    let offered = keep.iter().filter(|k| **k).count();
    if offered == n_hosts {
        return untouched(feasible);
    }
    Narrowing { narrowed: Some(cut(request, &keep, offered)), feasible, offered }
}

/// Which hosts of a group's feasible ones are kept: the rule of decision
/// 0054 and the alternatives it was measured against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    /// Half the tightest fit, half the most free (the rule).
    Mixed,
    /// All from the tightest fit.
    Tight,
    /// All from the most free.
    Free,
    /// A deterministic sample (hash order).
    Sample,
}

/// The rule: [`Rule::Mixed`], unless `PACELINE_NARROW_RULE` names an
/// alternative (`tight`, `free`, `sample`) — an experiment's knob, read
/// once, so that `bench plugin` and `sim compare` can measure the
/// alternatives with the same binary (docs/benchmarks.md).
fn rule() -> Rule {
    static RULE: std::sync::OnceLock<Rule> = std::sync::OnceLock::new();
    *RULE.get_or_init(|| match std::env::var("PACELINE_NARROW_RULE").as_deref() {
        Ok("tight") => Rule::Tight,
        Ok("free") => Rule::Free,
        Ok("sample") => Rule::Sample,
        _ => Rule::Mixed,
    })
}

/// The request's tasks grouped by constraint set, GPU kind and models, in
/// order of first appearance.
fn groups(request: &PlacementRequest) -> Vec<Group<'_>> {
    let mut groups: Vec<Group<'_>> = Vec::new();
    for (i, t) in request.tasks.iter().enumerate() {
        let (milli, models): (u32, &[u32]) =
            request.gpu_tasks.get(i).map_or((0, &[][..]), |g| (g.milli, g.models.as_slice()));
        let gpu_kind = match milli {
            0 => 0,
            m if m < DEVICE_MILLI => 1,
            _ => 2,
        };
        // Few groups per request: a linear search beats hashing a slice.
        let found =
            groups.iter_mut().find(|g| g.constraints == t.constraints && g.gpu_kind == gpu_kind && g.models == models);
        let g = match found {
            Some(g) => g,
            None => {
                groups.push(Group {
                    constraints: t.constraints,
                    gpu_kind,
                    models,
                    tasks: 0,
                    min: t.demand,
                    sum: Resources::default(),
                    min_milli: milli,
                    sum_milli: 0,
                    jobs: Vec::new(),
                });
                groups.last_mut().expect("just pushed")
            }
        };
        g.tasks += 1;
        g.min = min(&g.min, &t.demand);
        g.sum = add(&g.sum, &t.demand);
        g.min_milli = g.min_milli.min(milli);
        g.sum_milli += u64::from(milli);
        if !g.jobs.contains(&t.job) {
            g.jobs.push(t.job);
        }
    }
    groups
}

fn min(a: &Resources, b: &Resources) -> Resources {
    Resources {
        cpu_millis: a.cpu_millis.min(b.cpu_millis),
        memory_mib: a.memory_mib.min(b.memory_mib),
        disk_mib: a.disk_mib.min(b.disk_mib),
        gpus: a.gpus.min(b.gpus),
        ports: a.ports.min(b.ports),
    }
}

fn add(a: &Resources, b: &Resources) -> Resources {
    Resources {
        cpu_millis: a.cpu_millis.saturating_add(b.cpu_millis),
        memory_mib: a.memory_mib.saturating_add(b.memory_mib),
        disk_mib: a.disk_mib.saturating_add(b.disk_mib),
        gpus: a.gpus.saturating_add(b.gpus),
        ports: a.ports.saturating_add(b.ports),
    }
}

/// Whether host `h` takes `demand` (and the GPU ask, of accepted models).
fn fits(request: &PlacementRequest, h: u32, demand: &Resources, gpu_kind: u8, milli: u32, models: &[u32]) -> bool {
    let Some(HostOffer { free, .. }) = request.hosts.get(h as usize) else { return false };
    let room = free.cpu_millis >= demand.cpu_millis
        && free.memory_mib >= demand.memory_mib
        && free.disk_mib >= demand.disk_mib
        && free.ports >= demand.ports
        && free.gpus >= demand.gpus;
    if !room || gpu_kind == 0 {
        return room;
    }
    let accepted = |model: u32| models.is_empty() || models.contains(&model);
    let devices = request.gpu_hosts.get(h as usize).map_or(&[][..], |g| g.devices.as_slice());
    match gpu_kind {
        1 => devices.iter().any(|d| d.free_milli >= milli && accepted(d.model)),
        _ => {
            let whole = devices.iter().filter(|d| d.free_milli == DEVICE_MILLI && accepted(d.model)).count() as u64;
            whole >= u64::from(milli / DEVICE_MILLI).max(demand.gpus)
        }
    }
}

/// The pre-score: the room host `h` has left after `mean`, as permille of
/// its capacity summed over CPU, memory and (on a GPU side) GPU. Smaller
/// is a tighter fit.
fn room_left(request: &PlacementRequest, h: u32, mean: &Resources, gpu: bool) -> u64 {
    let Some(HostOffer { free, total }) = request.hosts.get(h as usize) else { return u64::MAX };
    let share = |free: u64, used: u64, total: u64| {
        free.saturating_sub(used).saturating_mul(1000).checked_div(total).unwrap_or(0)
    };
    let mut room = share(free.cpu_millis, mean.cpu_millis, total.cpu_millis)
        + share(free.memory_mib, mean.memory_mib, total.memory_mib);
    if gpu && let Some(g) = request.gpu_hosts.get(h as usize) {
        let free_milli: u64 = g.devices.iter().map(|d| u64::from(d.free_milli)).sum();
        let total_milli = g.devices.len() as u64 * u64::from(DEVICE_MILLI);
        room += share(free_milli, 0, total_milli);
    }
    room
}

/// Most tasks of `mean` host `h` holds, at most `cap`.
fn holds(request: &PlacementRequest, h: u32, mean: &Resources, gpu_kind: u8, milli: u32, cap: u64) -> u64 {
    let Some(HostOffer { free, .. }) = request.hosts.get(h as usize) else { return 0 };
    let dims = [
        (free.cpu_millis, mean.cpu_millis),
        (free.memory_mib, mean.memory_mib),
        (free.disk_mib, mean.disk_mib),
        (free.ports, mean.ports),
        (free.gpus, mean.gpus),
    ];
    let mut n = dims.iter().filter(|(_, d)| *d > 0).map(|(f, d)| f / d).min().unwrap_or(cap);
    if gpu_kind == 1 && milli > 0 {
        let devices = request.gpu_hosts.get(h as usize).map_or(&[][..], |g| g.devices.as_slice());
        n = n.min(devices.iter().map(|d| u64::from(d.free_milli / milli)).sum());
    }
    n.min(cap)
}

/// Tasks of the group's jobs one host may take: the sum of their
/// `max_per_host`, unlimited when a job has none.
fn per_host_cap(request: &PlacementRequest, jobs: &[u32]) -> u64 {
    let mut cap: u64 = 0;
    for &j in jobs {
        match request.jobs.get(j as usize).map_or(0, |j| j.max_per_host) {
            0 => return u64::MAX,
            m => cap += u64::from(m),
        }
    }
    cap
}

/// A deterministic tie-breaker for host `h` in `round` (SplitMix64): alike
/// hosts are not always taken in index order, and the same request always
/// narrows the same way.
fn mix(h: u32, round: u64) -> u64 {
    let mut z = round.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(h).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The request over the hosts `keep` marks (`offered` of them).
fn cut(request: &PlacementRequest, keep: &[bool], offered: usize) -> Narrowed {
    let mut hosts = Vec::with_capacity(offered);
    let mut new_index = vec![u32::MAX; keep.len()];
    for (i, _) in keep.iter().enumerate().filter(|(_, k)| **k) {
        new_index[i] = hosts.len() as u32;
        hosts.push(i as u32);
    }
    let at = |old: u32| new_index.get(old as usize).copied().filter(|&i| i != u32::MAX);
    let pick = |i: &u32| *i as usize;
    let out = PlacementRequest {
        round: request.round,
        hosts: hosts.iter().map(|&h| request.hosts[pick(&h)]).collect(),
        attributes: request
            .attributes
            .iter()
            .map(|c| AttributeColumn {
                key: c.key.clone(),
                values: hosts.iter().map(|&h| c.values.get(pick(&h)).copied().unwrap_or(u32::MAX)).collect(),
            })
            .collect(),
        symbols: request.symbols.clone(),
        jobs: request
            .jobs
            .iter()
            .map(|j| JobInfo {
                priority: j.priority,
                max_per_host: j.max_per_host,
                spread_over: j.spread_over,
                existing: j
                    .existing
                    .iter()
                    .filter_map(|c| Some(HostCount { host: at(c.host)?, count: c.count }))
                    .collect(),
            })
            .collect(),
        constraints: request
            .constraints
            .iter()
            .map(|s| ConstraintSet {
                eligible: match &s.eligible {
                    HostFilter::All => HostFilter::All,
                    HostFilter::Only(only) => HostFilter::Only(only.iter().filter_map(|&h| at(h)).collect()),
                },
                preferences: s.preferences.clone(),
            })
            .collect(),
        tasks: request.tasks.iter().map(|t| Task { preferred_host: t.preferred_host.and_then(at), ..*t }).collect(),
        gpu_hosts: if request.gpu_hosts.is_empty() {
            Vec::new()
        } else {
            hosts.iter().map(|&h| request.gpu_hosts.get(pick(&h)).cloned().unwrap_or_else(GpuHost::default)).collect()
        },
        gpu_tasks: request.gpu_tasks.clone(),
        gpu_workload: request.gpu_workload.clone(),
    };
    Narrowed { request: out, hosts }
}

#[cfg(test)]
mod tests {
    use paceline_plugin_sdk::types::{GpuDevice, GpuTask};

    use super::*;

    /// `n` hosts of 16 cores and 64 GiB, host i using i/2n of it.
    fn request(n: u32, tasks: u32) -> PlacementRequest {
        let total = Resources { cpu_millis: 16_000, memory_mib: 65_536, disk_mib: 1 << 20, gpus: 0, ports: 100 };
        PlacementRequest {
            round: 3,
            hosts: (0..n)
                .map(|i| {
                    let used = Resources {
                        cpu_millis: 8_000 * u64::from(i) / u64::from(n),
                        memory_mib: 32_768 * u64::from(i) / u64::from(n),
                        ..Resources::default()
                    };
                    HostOffer {
                        free: Resources {
                            cpu_millis: total.cpu_millis - used.cpu_millis,
                            memory_mib: total.memory_mib - used.memory_mib,
                            ..total
                        },
                        total,
                    }
                })
                .collect(),
            jobs: vec![JobInfo::default()],
            constraints: vec![ConstraintSet::default()],
            tasks: (0..tasks)
                .map(|i| Task {
                    instance: i,
                    gang: 0,
                    demand: Resources { cpu_millis: 1_000, memory_mib: 1_024, ..Resources::default() },
                    ..Task::default()
                })
                .collect(),
            ..PlacementRequest::default()
        }
    }

    #[test]
    fn auto_keeps_the_floor_and_both_ends_of_the_fit() {
        let req = request(1_000, 10);
        let n = narrow(&req, Candidates::Auto);
        let cut = n.narrowed.expect("1,000 hosts are narrowed");
        assert_eq!((n.feasible, n.offered), (1_000, 420), "50 - 1000/125 = 42% of 1,000");
        assert_eq!(cut.request.hosts.len(), 420);
        // Host 999 is the fullest (tightest fit), host 0 the emptiest.
        assert!(cut.hosts.contains(&999) && cut.hosts.contains(&0), "both ends kept");
        assert!(!cut.hosts.contains(&500), "the middle goes");
        assert!(cut.hosts.windows(2).all(|w| w[0] < w[1]), "original order kept");
        // Fixed counts, the floor, and every host.
        assert_eq!(narrow(&req, Candidates::Count(50)).offered, 50);
        assert_eq!(narrow(&request(100, 10), Candidates::Auto).narrowed, None, "at the floor, no narrowing");
        assert_eq!(narrow(&request(100, 10), Candidates::Count(50)).offered, 50, "an explicit count is kept");
        assert_eq!(narrow(&req, Candidates::All).narrowed, None);
        assert_eq!(narrow(&req, Candidates::Count(0)).narrowed, None);
    }

    #[test]
    fn the_same_request_narrows_the_same_way() {
        let req = request(5_000, 30);
        let a = narrow(&req, Candidates::Auto);
        assert_eq!(a, narrow(&req, Candidates::Auto));
        assert_eq!(a.offered, 500);
    }

    #[test]
    fn preferred_hosts_and_spread_hosts_are_kept_and_renumbered() {
        let mut req = request(1_000, 4);
        req.tasks[1].preferred_host = Some(500);
        req.jobs[0].spread_over = Some(0);
        req.jobs[0].existing = vec![HostCount { host: 501, count: 2 }];
        req.attributes = vec![AttributeColumn { key: "zone".into(), values: (0..1_000).map(|i| i % 3).collect() }];
        req.symbols = vec!["a".into(), "b".into(), "c".into()];
        let cut = narrow(&req, Candidates::Count(10)).narrowed.expect("narrowed");
        let at = |old: u32| cut.hosts.iter().position(|&h| h == old).map(|i| i as u32);
        assert_eq!(cut.request.tasks[1].preferred_host, at(500).map(Some).expect("500 kept"));
        assert_eq!(cut.request.jobs[0].existing, vec![HostCount { host: at(501).expect("501 kept"), count: 2 }]);
        let zone = &cut.request.attributes[0].values;
        assert_eq!(zone[at(500).expect("kept") as usize], 500 % 3, "attribute columns follow the hosts");
        assert_eq!(cut.request.hosts.len(), 12);
    }

    #[test]
    fn the_limit_grows_until_the_group_fits() {
        // 3,000 tasks of one core: the emptiest hosts hold 16 each, the
        // fullest 8; 100 hosts cannot hold them all.
        let req = request(1_000, 3_000);
        let n = narrow(&req, Candidates::Count(100));
        let cut = n.narrowed.expect("narrowed");
        let room: u64 = cut.request.hosts.iter().map(|h| h.free.cpu_millis / 1_000).sum();
        assert!(room >= 3_000, "kept hosts hold {room} tasks");
        assert!(n.offered > 100 && n.offered < 1_000, "{}", n.offered);
    }

    #[test]
    fn a_gang_one_per_host_gets_a_host_per_member() {
        let mut req = request(1_000, 150);
        req.jobs[0].max_per_host = 1;
        let n = narrow(&req, Candidates::Count(100));
        assert!(n.offered >= 150, "150 members one per host need 150 hosts: {}", n.offered);
    }

    #[test]
    fn constraints_are_applied_first_and_eligible_lists_renumbered() {
        let mut req = request(1_000, 2);
        let only: Vec<u32> = (0..1_000).filter(|h| h % 2 == 0).collect();
        req.constraints = vec![ConstraintSet { eligible: HostFilter::Only(only), preferences: Vec::new() }];
        let n = narrow(&req, Candidates::Count(120));
        assert_eq!(n.feasible, 500);
        let cut = n.narrowed.expect("narrowed");
        assert!(cut.hosts.iter().all(|h| h % 2 == 0), "only eligible hosts");
        assert_eq!(cut.request.constraints[0].eligible, HostFilter::Only((0..120).collect()));
    }

    #[test]
    fn gpu_tasks_see_only_hosts_with_room_on_a_device_of_their_model() {
        let mut req = request(300, 1);
        req.symbols = vec!["A100".into(), "T4".into()];
        req.gpu_hosts = (0..300u32)
            .map(|i| GpuHost {
                devices: vec![GpuDevice { free_milli: if i % 3 == 0 { 1000 } else { 200 }, model: i % 2 }],
            })
            .collect();
        req.gpu_tasks = vec![GpuTask { milli: 500, models: vec![0] }];
        let n = narrow(&req, Candidates::Count(200));
        assert_eq!(n.feasible, 50, "a free half device, model A100: i % 6 == 0");
        assert_eq!(n.narrowed.expect("narrowed").request.gpu_hosts.len(), 50);
    }

    #[test]
    fn answers_are_widened_back_to_the_original_hosts() {
        let req = request(1_000, 1);
        let cut = narrow(&req, Candidates::Count(10)).narrowed.expect("narrowed");
        let answer = PlacementResult {
            assignments: vec![paceline_plugin_sdk::types::Assignment { task: 0, host: 7 }],
            ..PlacementResult::default()
        };
        let wide = cut.widen(answer);
        assert_eq!(wide.assignments[0].host, cut.hosts[7]);
        assert_ne!(cut.hosts[7], 7, "the index changed");
    }
}
