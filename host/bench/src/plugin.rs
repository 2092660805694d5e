//! `paceline bench plugin`: Wasm vs native placement, the round trip,
//! activation and deploy costs, and (`--languages`) binpack's Python and
//! TypeScript ports.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use paceline_plugin::{DeployOptions, DirStore, MemoryStore, PluginRuntime, Registry, RuntimeConfig, World};
use paceline_plugin_sdk::PlacementPolicy;
use paceline_plugin_sdk::types::*;

use crate::BenchEnv;

/// Arguments of `bench plugin`.
#[derive(Debug, Args)]
pub struct PluginBenchArgs {
    /// Tasks in the large placement round.
    #[arg(long, default_value_t = 1000)]
    tasks: u32,
    /// Hosts in the large placement round.
    #[arg(long, default_value_t = 10_000)]
    hosts: u32,
    /// Repetitions of the large round (the median is reported).
    #[arg(long, default_value_t = 5)]
    repeat: u32,
    /// Also measure binpack's Python and TypeScript ports next to Rust
    /// (builds them with plugins/examples/build.sh first).
    #[arg(long)]
    languages: bool,
    /// Repetitions of the large round per language with --languages.
    #[arg(long, default_value_t = 1)]
    language_repeat: u32,
    /// Feasible hosts offered to the policy per group of alike tasks, as
    /// the placement engine offers them (decision 0054): `auto` (the
    /// default, adaptive to the cluster), `all` (no narrowing) or a count.
    #[arg(long, default_value = "auto", value_parser = paceline_plugin::Candidates::parse)]
    candidates: paceline_plugin::Candidates,
}

/// SplitMix64: a deterministic generator, so every run measures the same input.
struct Mix(u64);
impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A round of `tasks` single-task gangs of mixed sizes over `hosts` hosts of
/// three shapes, some partly used.
pub fn workload(tasks: u32, hosts: u32, seed: u64) -> PlacementRequest {
    let mut r = Mix(seed);
    let shapes = [
        Resources::new(16_000, 65_536, 500_000, 0),
        Resources::new(32_000, 131_072, 1_000_000, 0),
        Resources::new(8_000, 32_768, 250_000, 0),
    ];
    let hosts = (0..hosts)
        .map(|_| {
            let total = shapes[r.below(3) as usize];
            let used = Resources::new(
                r.below(total.cpu_millis / 2),
                r.below(total.memory_mib / 2),
                r.below(total.disk_mib / 2),
                0,
            );
            HostOffer { free: total.saturating_sub(&used), total }
        })
        .collect();
    let tasks = (0..tasks)
        .map(|i| Task {
            job: 0,
            instance: i,
            gang: i,
            demand: Resources::new(250 * (1 + r.below(8)), 512 * (1 + r.below(16)), 1024 * (1 + r.below(4)), 0),
            constraints: 0,
            preferred_host: None,
        })
        .collect();
    PlacementRequest {
        round: seed,
        hosts,
        jobs: vec![JobInfo::default()],
        constraints: vec![ConstraintSet::default()],
        tasks,
        ..PlacementRequest::default()
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Runs `bench plugin`.
pub fn run(args: PluginBenchArgs, env: &BenchEnv) -> anyhow::Result<ExitCode> {
    let binpack = paceline_plugin_artifacts::BINPACK;
    println!(
        "paceline bench plugin (binpack; {} build)",
        if cfg!(debug_assertions) { "DEBUG - figures not meaningful" } else { "release" }
    );

    // 1. The large round, native vs Wasm, deadline enforcement off and on;
    // narrowed first as the engine narrows it (`--candidates`).
    let full = workload(args.tasks, args.hosts, 42);
    let narrowing =
        median((0..args.repeat).map(|_| time(|| paceline_placement::narrow(&full, args.candidates)).0).collect());
    let n = paceline_placement::narrow(&full, args.candidates);
    println!(
        "\ncandidates {}: {} hosts feasible, {} offered to the policy; narrowing took {:.2} ms (median of {})",
        args.candidates,
        n.feasible,
        n.offered,
        ms(narrowing),
        args.repeat
    );
    let req = match n.narrowed {
        Some(cut) => {
            let wide = plugin_binpack::Binpack::place(&full).assignments.len();
            let narrow = plugin_binpack::Binpack::place(&cut.request).assignments.len();
            println!("  tasks placed by native binpack: {wide} offered every host, {narrow} offered the candidates");
            cut.request
        }
        None => full,
    };
    let native_answer = plugin_binpack::Binpack::place(&req);
    let native = median((0..args.repeat).map(|_| time(|| plugin_binpack::Binpack::place(&req)).0).collect());
    let mut rows = Vec::new();
    for enforce in [false, true] {
        let rt = PluginRuntime::new(RuntimeConfig {
            deadline_enforcement: enforce,
            call_deadline: Duration::from_secs(60),
            ..RuntimeConfig::default()
        })?;
        let prepared = rt.load(binpack, World::Placement)?;
        let (_, first) = time(|| rt.place(&prepared, &req));
        let wasm_answer = first?;
        anyhow::ensure!(wasm_answer == native_answer, "the Wasm answer differs from the native one");
        let t = median((0..args.repeat).map(|_| time(|| rt.place(&prepared, &req)).0).collect());
        rows.push((enforce, t));
    }
    let placed = native_answer.assignments.len();
    println!(
        "\nplace({} tasks x {} hosts), median of {}: {placed} placed, same answer native and Wasm",
        args.tasks, args.hosts, args.repeat
    );
    println!("  native                      {:>9.2} ms", ms(native));
    for (enforce, t) in &rows {
        let label = if *enforce { "wasm, deadline on (epoch)" } else { "wasm, deadline off" };
        println!(
            "  {label:<27} {:>9.2} ms   ratio {:.2}x  (budget {})",
            ms(*t),
            t.as_secs_f64() / native.as_secs_f64(),
            if *enforce { "<= 2.0" } else { "<= 1.5" }
        );
    }
    let validate = median(
        (0..args.repeat)
            .map(|_| time(|| paceline_plugin_sdk::validate::check_placement(&req, &native_answer)).0)
            .collect(),
    );
    println!("  host-side validation        {:>9.2} ms   (added to every plugin call by the registry)", ms(validate));

    // 2. Round trip with a small payload.
    let small = workload(1, 10, 7);
    let rt = PluginRuntime::new(RuntimeConfig::default())?;
    let prepared = rt.load(binpack, World::Placement)?;
    let n = 20_000;
    for _ in 0..200 {
        rt.place(&prepared, &small)?;
    }
    let (wasm_total, _) = time(|| {
        for _ in 0..n {
            let _ = std::hint::black_box(rt.place(&prepared, &small));
        }
    });
    let (native_total, _) = time(|| {
        for _ in 0..n {
            std::hint::black_box(plugin_binpack::Binpack::place(std::hint::black_box(&small)));
        }
    });
    println!(
        "\nround trip place(1 task, 10 hosts), warm instance (reused, RuntimeConfig::reuse_instance_calls), mean of {n}:"
    );
    println!("  wasm   {:>8.2} us   (budget <= 10 us)", wasm_total.as_secs_f64() * 1e6 / f64::from(n));
    println!("  native {:>8.2} us", native_total.as_secs_f64() * 1e6 / f64::from(n));
    let mut phases = [Duration::ZERO; 3];
    for _ in 0..n {
        if let Some(p) = rt.place_phases(&prepared, &small) {
            (0..3).for_each(|i| phases[i] += p[i]);
        }
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(n);
    println!(
        "  fresh instance per call (reuse_instance_calls = 0): {:.2} us = new store {:.2} + instantiate {:.2} + call and tear down {:.2}",
        us(phases[0] + phases[1] + phases[2]),
        us(phases[0]),
        us(phases[1]),
        us(phases[2])
    );

    // 3. Activation and deploy.
    let dir = tempfile::tempdir()?;
    let cache = dir.path().join("cache");
    let runtime =
        Arc::new(PluginRuntime::new(RuntimeConfig { cache_dir: Some(cache.clone()), ..RuntimeConfig::default() })?);
    let registry = Registry::open(
        runtime.clone(),
        Arc::new(DirStore::open(dir.path().join("store")).map_err(anyhow::Error::msg)?),
    )?;
    let (cold, r) = time(|| registry.deploy("placement/batch", "binpack", "1", binpack, DeployOptions::default()));
    r?;
    let (warm, r) = time(|| registry.deploy("placement/batch", "binpack", "2", binpack, DeployOptions::default()));
    let warm_cached = r?.from_cache;
    println!("\ndeploy binpack (compile + world check + self-test + store):");
    println!("  cold (empty cache)   {:>8.2} ms   (budget <= 2000 ms)", ms(cold));
    println!("  from the cache       {:>8.2} ms   (budget <= 50 ms; cache hit: {warm_cached})", ms(warm));
    let rounds = 200;
    let (dur, r) = time(|| -> Result<(), paceline_plugin::PluginError> {
        for i in 0..rounds {
            registry.activate("placement/batch", if i % 2 == 0 { "binpack@1" } else { "binpack@2" })?;
        }
        Ok(())
    });
    r?;
    println!("\nactivate a compiled version, mean of {rounds}:");
    println!("  durable (directory store, fsync)  {:>8.3} ms   (budget <= 5 ms)", ms(dur) / f64::from(rounds));
    let mem = Registry::open(runtime, Arc::new(MemoryStore::default()))?;
    mem.deploy("placement/batch", "binpack", "1", binpack, DeployOptions { self_test: false })?;
    mem.deploy("placement/batch", "binpack", "2", binpack, DeployOptions { self_test: false })?;
    let (dur, r) = time(|| -> Result<(), paceline_plugin::PluginError> {
        for i in 0..rounds {
            mem.activate("placement/batch", if i % 2 == 0 { "binpack@1" } else { "binpack@2" })?;
        }
        Ok(())
    });
    r?;
    println!("  swap alone (in-memory store)      {:>8.3} ms", ms(dur) / f64::from(rounds));
    if args.languages {
        crate::languages::report(&req, args.language_repeat, &env.checkout)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn time<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let started = Instant::now();
    let out = f();
    (started.elapsed(), out)
}
