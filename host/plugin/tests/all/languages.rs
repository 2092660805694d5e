//! Plugins written in Python and TypeScript, built into real components by
//! their toolchains (componentize-py, componentize-js; `plugins/examples/build.sh`),
//! loaded by this runtime:
//! - the ports of `binpack` and `priority-preempt` decide exactly as the Rust
//!   policies on every scenario file and on generated rounds (1,000 of each
//!   world by default; `PACELINE_EQUIV_ROUNDS` asks for more);
//! - the GPU worlds (decision 0056): the `binpack` ports build
//!   `placement-gpu` and decide as the Rust `binpack` on 1,000 generated GPU
//!   rounds too; the Python port of `gpu-fgd`
//!   (`placement-gpu`) decides exactly as the Rust `gpu-fgd`, device grants
//!   included, on every GPU scenario file and on 1,000 generated GPU
//!   rounds; the `priority-preempt` ports build `preemption-gpu` and decide
//!   as the Rust policy in milli-GPUs on its GPU scenarios and on the
//!   generated rounds that carry a GPU side;
//! - hostile guests in both languages that loop, exhaust memory, raise, and
//!   look at the clock and the filesystem are contained as Rust guests are:
//!   deadline (here a deadline of the version's own), memory cap, fallback
//!   to the previous good version, automatic rollback, a frozen world.
//!
//! Compiling an 18 MB component takes tens of seconds in a debug build, so
//! every test shares one runtime whose compile cache lives in
//! `target/plugin-cache/tests`, reused across runs and test binaries.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use paceline_plugin::{DeployOptions, FaultKind, PluginRuntime, Registry, RuntimeConfig, ServedBy, VersionState};
use paceline_plugin_artifacts as artifacts;
use paceline_plugin_sdk::harness::{Decision, Input, load_dir};
use paceline_plugin_sdk::types::*;
use paceline_plugin_sdk::{PlacementPolicy, PreemptionPolicy};

use crate::support::registry;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds (or finds up to date) the Python and TypeScript components once per process.
fn examples() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let started = Instant::now();
        let out = Command::new(root().join("plugins/examples/build.sh"))
            .output()
            .expect("run plugins/examples/build.sh (needs python3 and node; it installs the rest)");
        assert!(out.status.success(), "plugins/examples/build.sh failed:\n{}", String::from_utf8_lossy(&out.stderr));
        eprintln!("python/js components ready in {:.1} s", started.elapsed().as_secs_f64());
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

fn component(name: &str) -> Vec<u8> {
    let path = examples().join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn config() -> RuntimeConfig {
    RuntimeConfig {
        // Debug builds and a loaded machine: the point here is decisions, not speed.
        call_deadline: Duration::from_secs(60),
        cache_dir: Some(root().join("target/plugin-cache/tests")),
        ..RuntimeConfig::default()
    }
}

/// One runtime for every test of this module, so a component compiles once.
fn runtime() -> Arc<PluginRuntime> {
    static RT: OnceLock<Arc<PluginRuntime>> = OnceLock::new();
    RT.get_or_init(|| {
        let rt = Arc::new(PluginRuntime::new(config()).expect("runtime starts"));
        // Fill the compile cache once, one component at a time (wasmtime
        // compiles each on every core), before the tests ask for them in
        // parallel and compile the same component twice at once.
        for name in
            [&PLACEMENT_PORTS[..], &GPU_PLACEMENT_PORTS, &PREEMPTION_PORTS, &["hostile-py", "hostile-ts"]].concat()
        {
            let started = Instant::now();
            let (_, info) = rt.compile(&component(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            eprintln!(
                "{name}: compiled in {:.1} s (from the cache: {})",
                started.elapsed().as_secs_f64(),
                info.from_cache
            );
        }
        rt
    })
    .clone()
}

/// A registry with `name` deployed (self-tested) and active in `slot`.
fn serving(slot: &str, name: &str) -> Registry {
    let reg = registry(runtime());
    let started = Instant::now();
    let d = reg.deploy(slot, name, "1", &component(name), DeployOptions::default()).expect("deploys");
    eprintln!(
        "{name}: deployed in {:.0} ms (compile cache hit: {})",
        started.elapsed().as_secs_f64() * 1e3,
        d.from_cache
    );
    reg.activate(slot, &format!("{name}@1")).expect("activates");
    reg
}

const PLACEMENT_PORTS: [&str; 2] = ["binpack-py", "binpack-ts"];
const PREEMPTION_PORTS: [&str; 2] = ["priority-preempt-py", "priority-preempt-ts"];
/// Ports built against `placement-gpu` (WIT 0.1.2).
const GPU_PLACEMENT_PORTS: [&str; 1] = ["gpu-fgd-py"];

/// The Rust `gpu-fgd`'s answer as the runtime serves a native policy's:
/// grants completed (a no-op for `gpu-fgd`, which names every device).
fn rust_fgd(req: &PlacementRequest) -> PlacementResult {
    let mut out = paceline_gpu_policies::Fgd::place(req);
    paceline_plugin_sdk::placement::complete_grants(req, &mut out);
    out
}

#[test]
fn ports_decide_as_the_rust_policies_on_every_scenario_file() {
    let dir = |p: &str| root().join("plugins").join(p).join("scenarios");
    for name in PLACEMENT_PORTS {
        let reg = serving("placement/batch", name);
        for s in load_dir(dir("binpack")).expect("scenarios") {
            let Input::Placement(req) = &s.input else { panic!("{}: placement scenario", s.name) };
            let a = reg.place("placement/batch", req).expect("answers");
            assert_eq!(a.served_by, ServedBy::Version(format!("{name}@1")), "{name}: {}: {:?}", s.name, a.faults);
            assert_eq!(a.value, plugin_binpack::Binpack::place(req), "{name}: {}", s.name);
            s.check(&Decision::Placement(a.value)).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
    // Every GPU placement scenario file: gpu-fgd's own (shares, models,
    // gangs, per-host maxima) and gang-gpu's (whole GPUs, no GPU side). The
    // expectations of gang-gpu's files are that policy's: here only the
    // agreement with the Rust gpu-fgd and the host's checks count.
    for name in GPU_PLACEMENT_PORTS {
        let reg = serving("placement/gpu", name);
        let mut seen = 0;
        for plugin in ["gpu-fgd", "gang-gpu"] {
            for s in load_dir(dir(plugin)).expect("scenarios") {
                let Input::Placement(req) = &s.input else { panic!("{}: placement scenario", s.name) };
                let a = reg.place("placement/gpu", req).expect("answers");
                assert_eq!(a.served_by, ServedBy::Version(format!("{name}@1")), "{name}: {}: {:?}", s.name, a.faults);
                assert_eq!(a.value, rust_fgd(req), "{name}: {}", s.name);
                if plugin == "gpu-fgd" {
                    s.check(&Decision::Placement(a.value)).unwrap_or_else(|e| panic!("{name}: {e}"));
                } else {
                    paceline_plugin_sdk::validate::check_placement(req, &a.value)
                        .unwrap_or_else(|e| panic!("{name}: {}: {e}", s.name));
                }
                seen += 1;
            }
        }
        assert!(seen >= 8, "{name}: {seen} scenario files");
    }
    for name in PREEMPTION_PORTS {
        let reg = serving("preemption", name);
        let gpu = root().join("plugins/priority-preempt/scenarios-gpu");
        let table = load_dir(dir("priority-preempt")).expect("scenarios");
        for s in table.into_iter().chain(load_dir(gpu).expect("gpu scenarios")) {
            let Input::Preemption(req) = &s.input else { panic!("{}: preemption scenario", s.name) };
            let a = reg.select_victims(req).expect("answers");
            assert_eq!(a.served_by, ServedBy::Version(format!("{name}@1")), "{name}: {}: {:?}", s.name, a.faults);
            // The ports build `preemption-gpu` (decision 0056): they see
            // the GPU side, count shares in milli-GPUs as the Rust policy
            // does, and are judged in milli-GPUs (WIT 0.1.3, decision 0036).
            assert_eq!(a.value, plugin_priority_preempt::PriorityPreempt::select_victims(req), "{name}: {}", s.name);
            assert_eq!(a.gpu_unit, paceline_plugin::GpuUnit::Milli, "{name}: {}", s.name);
            s.check(&Decision::Preemption(a.value)).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}

fn rounds() -> u64 {
    std::env::var("PACELINE_EQUIV_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000)
}

#[test]
fn placement_ports_decide_as_rust_binpack_on_generated_rounds() {
    let n = rounds();
    for name in PLACEMENT_PORTS {
        let reg = serving("placement/batch", name);
        let started = Instant::now();
        let (mut placed, mut unplaced) = (0, 0);
        for seed in 0..n {
            let req = rounds_gen::placement(seed);
            let a = reg.place("placement/batch", &req).expect("answers");
            assert_eq!(a.served_by, ServedBy::Version(format!("{name}@1")), "{name} seed {seed}: {:?}", a.faults);
            let native = plugin_binpack::Binpack::place(&req);
            assert_eq!(a.value, native, "{name} seed {seed}: differs from Rust binpack on {req:?}");
            placed += native.assignments.len();
            unplaced += native.unplaced.len();
        }
        eprintln!(
            "{name}: {n} rounds ({placed} tasks placed, {unplaced} unplaced) identical to Rust in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        // The generator must exercise both outcomes, or the comparison proves little.
        assert!(placed > 1000 && unplaced > 1000, "placed {placed}, unplaced {unplaced}");
        // GPU rounds (the ports build `placement-gpu`): the same devices
        // as the Rust binpack, which leaves them to the runtime's default.
        let started = Instant::now();
        let mut grants = 0;
        for seed in 0..n {
            let req = rounds_gen::gpu_placement(seed);
            let a = reg.place("placement/batch", &req).expect("answers");
            assert_eq!(a.served_by, ServedBy::Version(format!("{name}@1")), "{name} GPU seed {seed}: {:?}", a.faults);
            let mut native = plugin_binpack::Binpack::place(&req);
            paceline_plugin_sdk::placement::complete_grants(&req, &mut native);
            assert_eq!(a.value, native, "{name} GPU seed {seed}: differs from Rust binpack on {req:?}");
            grants += native.grants.len();
        }
        eprintln!(
            "{name}: {n} GPU rounds ({grants} device grants) identical to Rust in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        assert!(grants > 1000, "grants {grants}");
    }
}

#[test]
fn gpu_fgd_port_decides_as_rust_gpu_fgd_on_generated_gpu_rounds() {
    let n = rounds();
    for name in GPU_PLACEMENT_PORTS {
        let reg = serving("placement/gpu", name);
        let started = Instant::now();
        let (mut placed, mut unplaced, mut shares, mut whole) = (0, 0, 0, 0);
        for seed in 0..n {
            let req = rounds_gen::gpu_placement(seed);
            let a = reg.place("placement/gpu", &req).expect("answers");
            assert_eq!(a.served_by, ServedBy::Version(format!("{name}@1")), "{name} seed {seed}: {:?}", a.faults);
            let native = rust_fgd(&req);
            assert_eq!(a.value, native, "{name} seed {seed}: differs from Rust gpu-fgd on {req:?}");
            placed += native.assignments.len();
            unplaced += native.unplaced.len();
            for g in &native.grants {
                match req.gpu_tasks[g.task as usize].milli {
                    m if m < DEVICE_MILLI => shares += 1,
                    _ => whole += 1,
                }
            }
        }
        eprintln!(
            "{name}: {n} GPU rounds ({placed} tasks placed: {shares} shares and {whole} whole-GPU grants; {unplaced} \
             unplaced) identical to Rust gpu-fgd in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        // Both outcomes and both kinds of grant, or the comparison proves little.
        assert!(placed > 1000 && unplaced > 500, "placed {placed}, unplaced {unplaced}");
        assert!(shares > 1000 && whole > 300, "shares {shares}, whole {whole}");
    }
}

#[test]
fn preemption_ports_decide_as_rust_priority_preempt_on_generated_rounds() {
    let n = rounds();
    for name in PREEMPTION_PORTS {
        let reg = serving("preemption", name);
        let started = Instant::now();
        let mut victims = 0;
        let mut empty = 0;
        let (mut gpu_rounds, mut gpu_victims) = (0, 0);
        for seed in 0..n {
            let req = rounds_gen::preemption(seed);
            let a = reg.select_victims(&req).expect("answers");
            assert_eq!(a.served_by, ServedBy::Version(format!("{name}@1")), "{name} seed {seed}: {:?}", a.faults);
            let native = plugin_priority_preempt::PriorityPreempt::select_victims(&req);
            assert_eq!(a.value, native, "{name} seed {seed}: differs from Rust priority-preempt on {req:?}");
            victims += native.len();
            empty += usize::from(native.is_empty());
            if req.has_gpu_side() {
                gpu_rounds += 1;
                gpu_victims += native.iter().filter(|v| req.gpu_running[v.task as usize] > 0).count();
            }
        }
        eprintln!(
            "{name}: {n} rounds ({victims} victims; {gpu_rounds} rounds in milli-GPUs, {gpu_victims} victims \
             holding GPU) identical to Rust in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        assert!(victims > 1000 && empty > 50, "victims {victims}, rounds without any {empty}");
        assert!(gpu_rounds > 300 && gpu_victims > 300, "GPU rounds {gpu_rounds}, victims holding GPU {gpu_victims}");
    }
}

/// Rust binpack active as the good version, the hostile guest on top with a
/// deadline of its own (the runtime's is 60 s here).
fn hostile_slot(guest: &str, deadline: Duration) -> Registry {
    let reg = registry(runtime());
    reg.deploy("placement/batch", "binpack", "1", artifacts::BINPACK, DeployOptions::default()).expect("deploys");
    reg.activate("placement/batch", "binpack@1").expect("activates");
    // No self-test: its round-1 sample would loop; the point is what happens when it serves.
    reg.deploy("placement/batch", guest, "1", &component(guest), DeployOptions { self_test: false }).expect("deploys");
    reg.set_deadline("placement/batch", &format!("{guest}@1"), Some(deadline)).expect("sets the deadline");
    reg.activate("placement/batch", &format!("{guest}@1")).expect("activates");
    reg
}

fn round(n: u64) -> PlacementRequest {
    let mut req = crate::support::workload(20, 10, 3);
    req.round = n;
    req
}

#[test]
fn hostile_python_and_js_guests_are_contained_as_rust_guests_are() {
    for guest in ["hostile-py", "hostile-ts"] {
        let deadline = Duration::from_millis(500);
        let reg = hostile_slot(guest, deadline);
        let listed = reg.list();
        let record = &listed[0].versions.iter().find(|v| v.record.name == guest).expect("listed").record;
        assert_eq!(record.deadline_ms, Some(500));
        let mut messages = Vec::new();
        for (n, kind) in [(1, FaultKind::Deadline), (2, FaultKind::MemoryCap), (3, FaultKind::Trap)] {
            if n == 2 {
                // Round 1 showed the deadline stops a loop. Rounds 2 and 3
                // are about the memory cap and a trap: a deadline far
                // beyond them, so a starved CPU (CI runs test binaries
                // side by side) cannot make the deadline answer first.
                reg.set_deadline("placement/batch", &format!("{guest}@1"), Some(Duration::from_secs(30)))
                    .expect("sets the deadline");
            }
            let req = round(n);
            let started = Instant::now();
            let a = reg.place("placement/batch", &req).expect("the slot still answers");
            let took = started.elapsed();
            assert_eq!(a.served_by, ServedBy::Version("binpack@1".into()), "{guest} round {n}");
            assert_eq!(a.value, plugin_binpack::Binpack::place(&req), "{guest} round {n}: the fallback's answer");
            assert_eq!(a.faults.len(), 1, "{guest} round {n}: {:?}", a.faults);
            let f = &a.faults[0];
            // A raised exception traps; with a message that does not say
            // "panicked" it is a plain trap, as for any Wasm trap.
            let kind_ok = f.kind == kind || (kind == FaultKind::Trap && f.kind == FaultKind::Panic);
            assert!(kind_ok, "{guest} round {n}: expected {kind}, got {f}");
            assert_eq!(f.version, format!("{guest}@1"));
            if n == 1 {
                // Its own deadline stopped it, not the runtime's 60 s.
                assert!(took < Duration::from_secs(20), "{guest}: the loop ran {took:?}");
            }
            eprintln!("{guest} round {n}: {} after {:.0} ms: {:.160}", f.kind, took.as_secs_f64() * 1e3, f.message);
            messages.push(f.message.clone());
        }
        assert!(messages[2].contains("policy gave up on round 3"), "{guest}: {}", messages[2]);
        // Three faults in a row: rolled back on its own, marked failed.
        assert_eq!(reg.active("placement/batch").expect("slot").as_deref(), Some("binpack@1"), "{guest}");
        let listed = reg.list();
        let v = listed[0].versions.iter().find(|v| v.record.name == guest).expect("listed");
        assert_eq!(v.record.state, VersionState::Failed, "{guest}");
        let a = reg.place("placement/batch", &round(9)).expect("answers");
        assert!(a.faults.is_empty(), "{guest}: served directly after the rollback");
    }
}

#[test]
fn python_and_js_guests_see_a_frozen_clock_no_files_and_no_environment() {
    for (guest, wall) in [("hostile-py", "wall=1704067200000000000 "), ("hostile-ts", "wall=1704067200000 ")] {
        let look = || {
            let reg = registry(runtime());
            reg.deploy("placement/x", guest, "1", &component(guest), DeployOptions { self_test: false })
                .expect("deploys");
            reg.activate("placement/x", &format!("{guest}@1")).expect("activates");
            let a = reg.place("placement/x", &round(4)).expect("answers");
            assert_eq!(a.served_by, ServedBy::Version(format!("{guest}@1")), "{guest}: {:?}", a.faults);
            a.value.unplaced[0].detail.clone()
        };
        let detail = look();
        eprintln!("{guest} sees: {detail}");
        assert!(detail.starts_with(wall), "{guest}: {detail}");
        if guest == "hostile-py" {
            assert!(detail.contains("mono=0 "), "{detail}");
            assert!(!detail.contains("fs=read"), "{guest} read a file: {detail}");
            assert!(
                !detail.contains(" ls=")
                    || !detail.split(" ls=").nth(1).is_some_and(|s| s.starts_with(char::is_numeric)),
                "{guest} listed a directory: {detail}"
            );
            assert!(detail.contains("env=0 "), "{detail}");
        } else {
            assert!(detail.contains("env=none"), "{detail}");
        }
        // Another instance, later: the same world, the same "random" bits.
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(look(), detail, "{guest}");
    }
}

/// Deterministic generators of rounds that cover what the policies branch on.
mod rounds_gen {
    use paceline_plugin_sdk::types::*;

    /// SplitMix64.
    pub struct Mix(u64);
    impl Mix {
        pub fn new(seed: u64) -> Self {
            Mix(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5eed)
        }
        pub fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        pub fn below(&mut self, n: u64) -> u64 {
            if n == 0 { 0 } else { self.next() % n }
        }
        pub fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }
    }

    fn amount(r: &mut Mix, unit: u64, max_units: u64) -> u64 {
        unit * r.below(max_units + 1)
    }

    /// A placement round: up to 40 hosts of several shapes (some with zero
    /// capacity in a kind, some with GPUs and ports, some full), up to 30
    /// tasks in gangs of 1 to 4, jobs with per-host limits, existing tasks
    /// and spread, constraint sets with eligible lists (some empty) and
    /// preferences (attributes missing on some hosts), preferred hosts,
    /// and demands that need GPUs, ports, or nothing of a kind.
    pub fn placement(seed: u64) -> PlacementRequest {
        let r = &mut Mix::new(seed);
        let n_hosts = r.below(41) as u32;
        let hosts: Vec<HostOffer> = (0..n_hosts)
            .map(|_| {
                let total = Resources {
                    cpu_millis: if r.chance(5) { 0 } else { 1000 * (1 + r.below(32)) },
                    memory_mib: if r.chance(5) { 0 } else { 1024 * (1 + r.below(64)) },
                    disk_mib: if r.chance(30) { 0 } else { 10_000 * (1 + r.below(50)) },
                    gpus: if r.chance(20) { 1 + r.below(8) } else { 0 },
                    ports: if r.chance(30) { 1 + r.below(20) } else { 0 },
                };
                let free = if r.chance(10) {
                    Resources::ZERO
                } else {
                    Resources {
                        cpu_millis: total.cpu_millis - r.below(total.cpu_millis + 1),
                        memory_mib: total.memory_mib - r.below(total.memory_mib + 1),
                        disk_mib: total.disk_mib - r.below(total.disk_mib + 1),
                        gpus: total.gpus - r.below(total.gpus + 1),
                        ports: total.ports - r.below(total.ports + 1),
                    }
                };
                HostOffer { free, total }
            })
            .collect();
        let n_symbols = 1 + r.below(4) as u32;
        let n_attrs = r.below(3) as u32;
        let attributes: Vec<AttributeColumn> = (0..n_attrs)
            .map(|a| AttributeColumn {
                key: format!("attr{a}"),
                values: (0..n_hosts)
                    .map(|_| if r.chance(10) { NO_VALUE } else { r.below(u64::from(n_symbols)) as u32 })
                    .collect(),
            })
            .collect();
        let n_jobs = 1 + r.below(4) as u32;
        let jobs: Vec<JobInfo> = (0..n_jobs)
            .map(|_| JobInfo {
                priority: r.below(10) as u32,
                max_per_host: if r.chance(35) { 1 + r.below(3) as u32 } else { 0 },
                spread_over: if n_attrs > 0 && r.chance(20) { Some(r.below(u64::from(n_attrs)) as u32) } else { None },
                existing: if n_hosts > 0 && r.chance(40) {
                    let mut hosts: Vec<u32> = (0..1 + r.below(4)).map(|_| r.below(u64::from(n_hosts)) as u32).collect();
                    hosts.sort_unstable();
                    hosts.dedup();
                    hosts.into_iter().map(|host| HostCount { host, count: 1 + r.below(2) as u32 }).collect()
                } else {
                    Vec::new()
                },
            })
            .collect();
        let n_sets = 1 + r.below(4) as u32;
        let constraints: Vec<ConstraintSet> = (0..n_sets)
            .map(|c| ConstraintSet {
                eligible: if c == 0 || r.chance(40) {
                    HostFilter::All
                } else {
                    HostFilter::Only((0..n_hosts).filter(|_| r.chance(50)).collect())
                },
                preferences: if n_attrs > 0 && r.chance(40) {
                    (0..1 + r.below(2))
                        .map(|_| Preference {
                            attribute: r.below(u64::from(n_attrs)) as u32,
                            value: r.below(u64::from(n_symbols)) as u32,
                            weight: r.below(21) as i32 - 10,
                        })
                        .collect()
                } else {
                    Vec::new()
                },
            })
            .collect();
        let n_tasks = r.below(31) as usize;
        let mut tasks = Vec::with_capacity(n_tasks);
        let mut gang = 0;
        while tasks.len() < n_tasks {
            let max_size = if r.chance(70) { 1 } else { 4 };
            let size = (1 + r.below(max_size) as usize).min(n_tasks - tasks.len());
            let job = r.below(u64::from(n_jobs)) as u32;
            let set = if r.chance(50) { 0 } else { r.below(u64::from(n_sets)) as u32 };
            let demand = Resources {
                cpu_millis: amount(r, 250, 24),
                memory_mib: amount(r, 512, 32),
                disk_mib: if r.chance(50) { 0 } else { amount(r, 5_000, 20) },
                gpus: if r.chance(15) { 1 + r.below(4) } else { 0 },
                ports: if r.chance(15) { 1 + r.below(3) } else { 0 },
            };
            for i in 0..size {
                tasks.push(Task {
                    job,
                    instance: i as u32,
                    gang,
                    demand,
                    constraints: set,
                    preferred_host: if n_hosts > 0 && r.chance(15) {
                        Some(r.below(u64::from(n_hosts)) as u32)
                    } else {
                        None
                    },
                });
            }
            gang += 1 + r.below(3) as u32;
        }
        PlacementRequest {
            gpu_hosts: Vec::new(),
            gpu_tasks: Vec::new(),
            gpu_workload: Vec::new(),
            round: seed,
            hosts,
            attributes,
            symbols: (0..n_symbols).map(|s| format!("v{s}")).collect(),
            jobs,
            constraints,
            tasks,
        }
    }

    /// A preemption request: up to 5 pools (some under their reservation),
    /// up to 30 running tasks (preemptible or not, revocable or not, equal
    /// priorities and start times for the tie-breaks), up to 4 needs that
    /// name their own pool, other pools, or any.
    pub fn preemption(seed: u64) -> PreemptionRequest {
        let r = &mut Mix::new(seed ^ 0xface);
        let res = |r: &mut Mix, scale: u64| Resources {
            cpu_millis: 500 * r.below(scale),
            memory_mib: if r.chance(60) { 512 * r.below(scale) } else { 0 },
            disk_mib: 0,
            gpus: if r.chance(10) { r.below(3) } else { 0 },
            ports: 0,
        };
        let n_pools = 1 + r.below(5) as u32;
        let pools: Vec<PoolView> = (0..n_pools)
            .map(|p| PoolView {
                path: format!("/p{p}"),
                reservation: res(r, 10),
                entitlement: res(r, 12),
                allocation: res(r, 20),
            })
            .collect();
        let running: Vec<RunningTask> = (0..r.below(31))
            .map(|_| RunningTask {
                pool: r.below(u64::from(n_pools)) as u32,
                priority: r.below(6) as u32,
                preemptible: r.chance(75),
                revocable: r.chance(20),
                started_at_ms: 100 * r.below(8),
                resources: res(r, 5),
            })
            .collect();
        let needs: Vec<Need> = (0..1 + r.below(4))
            .map(|_| {
                let pool = r.below(u64::from(n_pools)) as u32;
                Need {
                    pool,
                    priority: r.below(8) as u32,
                    resources: res(r, 8),
                    from_pools: match r.below(3) {
                        0 => Vec::new(),
                        1 => vec![pool],
                        _ => (0..n_pools).filter(|_| r.chance(50)).collect(),
                    },
                }
            })
            .collect();
        let mut req = PreemptionRequest { pools, running, needs, ..PreemptionRequest::default() };
        // A GPU side (WIT 0.1.3) on about two rounds in five, drawn after
        // the rest so the other rounds are those of earlier runs.
        if r.chance(40) {
            add_gpu_side(r, &mut req);
        }
        req
    }

    /// Milli-GPUs for running tasks and needs: shares of one device, whole
    /// devices and none; `gpus` set to the whole devices they round up to,
    /// as the resource manager sends them. Pools' amounts are the sums of
    /// their non-revocable tasks' (allocation) and drawn (reservation,
    /// entitlement), some reservations above what is held.
    fn add_gpu_side(r: &mut Mix, req: &mut PreemptionRequest) {
        const SHAPES: [u64; 8] = [0, 0, 250, 300, 500, 700, 1000, 2000];
        let draw = |r: &mut Mix| SHAPES[r.below(SHAPES.len() as u64) as usize];
        req.gpu_running = req.running.iter().map(|_| draw(r)).collect();
        for (t, &m) in req.running.iter_mut().zip(&req.gpu_running) {
            t.resources.gpus = m.div_ceil(u64::from(DEVICE_MILLI));
        }
        req.gpu_needs = req.needs.iter().map(|_| [0, 250, 500, 1000, 1500, 3000][r.below(6) as usize]).collect();
        for (n, &m) in req.needs.iter_mut().zip(&req.gpu_needs) {
            n.resources.gpus = m.div_ceil(u64::from(DEVICE_MILLI));
        }
        let mut held = vec![0u64; req.pools.len()];
        for (t, &m) in req.running.iter().zip(&req.gpu_running) {
            if !t.revocable {
                held[t.pool as usize] += m;
            }
        }
        req.gpu_pools = held
            .iter()
            .map(|&allocation_milli| GpuPool {
                reservation_milli: 250 * r.below(9),
                entitlement_milli: 250 * r.below(13),
                allocation_milli,
            })
            .collect();
        for (p, g) in req.pools.iter_mut().zip(&req.gpu_pools) {
            p.reservation.gpus = g.reservation_milli.div_ceil(u64::from(DEVICE_MILLI));
            p.entitlement.gpus = g.entitlement_milli.div_ceil(u64::from(DEVICE_MILLI));
            p.allocation.gpus = g.allocation_milli.div_ceil(u64::from(DEVICE_MILLI));
        }
    }

    /// A GPU placement round (WIT 0.1.2): up to 12 hosts, most with 1 to 8
    /// devices (wholly free, partly used by shares, or full; of two models
    /// or unknown), some short of CPU or memory, in half the rounds all of
    /// one shape; up to 16 tasks in gangs of
    /// 1 to 3 asking for shares, whole devices, several devices or none,
    /// some for one model only; jobs with per-host limits and existing
    /// tasks, eligible lists, and a workload of up to 6 classes (weights
    /// from 0). Kept this small because the Python port runs it in an
    /// interpreter inside the component: 1,000 rounds must fit a test.
    pub fn gpu_placement(seed: u64) -> PlacementRequest {
        let r = &mut Mix::new(seed ^ 0x0067_7075);
        const ASKS: [u32; 10] = [0, 0, 100, 250, 300, 500, 700, 1000, 2000, 4000];
        let n_hosts = r.below(13) as u32;
        let symbols: Vec<String> = vec!["model-a".into(), "model-b".into()];
        // Half the rounds on hosts of one shape with CPU and memory wholly
        // free: hosts then differ only in their devices, so the policies'
        // GPU tie-breakers (milli-GPUs left, the fullest device) decide.
        let uniform = if r.chance(50) { Some((1000 * (4 + r.below(61)), 1024 * (8 + r.below(249)))) } else { None };
        let mut hosts = Vec::new();
        let mut gpu_hosts = Vec::new();
        for _ in 0..n_hosts {
            let n_devices = if r.chance(80) { 1 + r.below(8) } else { 0 };
            let model = match r.below(3) {
                0 => NO_VALUE,
                m => (m - 1) as u32,
            };
            let devices: Vec<GpuDevice> = (0..n_devices)
                .map(|_| GpuDevice {
                    free_milli: if r.chance(60) {
                        DEVICE_MILLI
                    } else {
                        [0, 100, 250, 300, 500, 700, 900][r.below(7) as usize]
                    },
                    model,
                })
                .collect();
            let (cpu, memory) = uniform.unwrap_or_else(|| (1000 * (4 + r.below(61)), 1024 * (8 + r.below(249))));
            let total = Resources { cpu_millis: cpu, memory_mib: memory, gpus: n_devices, ..Resources::ZERO };
            let free = if uniform.is_some() {
                Resources { gpus: devices.iter().filter(|d| d.free_milli == DEVICE_MILLI).count() as u64, ..total }
            } else {
                Resources {
                    cpu_millis: if r.chance(15) {
                        r.below(2000)
                    } else {
                        total.cpu_millis - r.below(total.cpu_millis / 2 + 1)
                    },
                    memory_mib: total.memory_mib - r.below(total.memory_mib / 2 + 1),
                    gpus: devices.iter().filter(|d| d.free_milli == DEVICE_MILLI).count() as u64,
                    ..Resources::ZERO
                }
            };
            hosts.push(HostOffer { free, total });
            gpu_hosts.push(GpuHost { devices });
        }
        let n_jobs = 1 + r.below(3) as u32;
        let jobs: Vec<JobInfo> = (0..n_jobs)
            .map(|_| {
                let max_per_host = if r.chance(30) { 1 + r.below(2) as u32 } else { 0 };
                let existing = if n_hosts > 0 && max_per_host > 0 && r.chance(50) {
                    vec![HostCount { host: r.below(u64::from(n_hosts)) as u32, count: 1 }]
                } else {
                    Vec::new()
                };
                JobInfo { priority: r.below(5) as u32, max_per_host, spread_over: None, existing }
            })
            .collect();
        let mut constraints = vec![ConstraintSet::default()];
        if r.chance(40) {
            constraints.push(ConstraintSet {
                eligible: HostFilter::Only((0..n_hosts).filter(|_| r.chance(50)).collect()),
                preferences: Vec::new(),
            });
        }
        let n_tasks = r.below(17) as usize;
        let (mut tasks, mut gpu_tasks) = (Vec::new(), Vec::new());
        let mut gang = 0;
        while tasks.len() < n_tasks {
            let max_size = if r.chance(75) { 1 } else { 3 };
            let size = (1 + r.below(max_size) as usize).min(n_tasks - tasks.len());
            let job = r.below(u64::from(n_jobs)) as u32;
            let milli = ASKS[r.below(ASKS.len() as u64) as usize];
            let models = if milli > 0 && r.chance(15) { vec![r.below(2) as u32] } else { Vec::new() };
            let demand = Resources {
                cpu_millis: 500 * (1 + r.below(16)),
                memory_mib: 1024 * (1 + r.below(32)),
                gpus: u64::from(milli / DEVICE_MILLI),
                ..Resources::ZERO
            };
            let set = r.below(constraints.len() as u64) as u32;
            for i in 0..size {
                tasks.push(Task { job, instance: i as u32, gang, demand, constraints: set, preferred_host: None });
                gpu_tasks.push(GpuTask { milli, models: models.clone() });
            }
            gang += 1;
        }
        let gpu_workload: Vec<TaskClass> = (0..r.below(7))
            .map(|_| TaskClass {
                cpu_millis: 500 * (1 + r.below(16)),
                memory_mib: 1024 * (1 + r.below(32)),
                milli: ASKS[r.below(ASKS.len() as u64) as usize],
                weight: r.below(50) as u32,
            })
            .collect();
        PlacementRequest {
            round: seed,
            hosts,
            attributes: Vec::new(),
            symbols,
            jobs,
            constraints,
            tasks,
            gpu_hosts,
            gpu_tasks,
            gpu_workload,
        }
    }
}
