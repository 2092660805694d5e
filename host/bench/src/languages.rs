//! `paceline bench plugin --languages`: what a placement policy costs in
//! each language, `binpack` in Rust next to its Python and TypeScript ports
//! (`plugins/examples`, built by `plugins/examples/build.sh`): component
//! size, cold deploy (compile, world check, self-test, store), deploy from
//! the compile cache, a fresh instance, linear memory of an instance, the
//! small round (1 task x 10 hosts, warm instance) and the large round (1,000
//! tasks x 10,000 hosts). Every answer is checked against the native Rust
//! policy's.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use paceline_plugin::{DeployOptions, MemoryStore, PluginRuntime, Registry, RuntimeConfig, World};
use paceline_plugin_sdk::PlacementPolicy;

/// One language's component.
struct Candidate {
    label: &'static str,
    bytes: Vec<u8>,
}

fn candidates(checkout: &Path) -> anyhow::Result<Vec<Candidate>> {
    let script = checkout.join("plugins/examples/build.sh");
    let out = Command::new(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    anyhow::ensure!(out.status.success(), "{} failed", script.display());
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let read = |name: &str| std::fs::read(dir.join(format!("{name}.wasm"))).with_context(|| format!("{name}.wasm"));
    Ok(vec![
        Candidate { label: "rust", bytes: paceline_plugin_artifacts::BINPACK.to_vec() },
        Candidate { label: "python", bytes: read("binpack-py")? },
        Candidate { label: "js", bytes: read("binpack-ts")? },
    ])
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Prints the per-language table. `large` is the large round, `repeat` how
/// many times it runs per language (the median is shown).
pub fn report(
    large: &paceline_plugin_sdk::types::PlacementRequest,
    repeat: u32,
    checkout: &Path,
) -> anyhow::Result<()> {
    println!("\nbinpack per language (plugins/examples; same answers as native Rust checked on every call):");
    let small = crate::plugin::workload(1, 10, 7);
    let native_small = plugin_binpack::Binpack::place(&small);
    let native_large = plugin_binpack::Binpack::place(large);
    let mut rows = Vec::new();
    for c in candidates(checkout)? {
        let dir = tempfile::tempdir()?;
        let config = RuntimeConfig {
            cache_dir: Some(dir.path().join("cache")),
            // The large round in an interpreted language takes far longer
            // than the default 2 s deadline; here it is measured, not cut.
            call_deadline: Duration::from_secs(600),
            ..RuntimeConfig::default()
        };
        let runtime = Arc::new(PluginRuntime::new(config)?);
        let registry = Registry::open(runtime.clone(), Arc::new(MemoryStore::default()))?;
        let started = Instant::now();
        let d = registry.deploy("placement/batch", "binpack", "1", &c.bytes, DeployOptions::default())?;
        let cold = started.elapsed();
        anyhow::ensure!(!d.from_cache, "{}: the first deploy should compile", c.label);
        let started = Instant::now();
        let d = registry.deploy("placement/batch", "binpack", "2", &c.bytes, DeployOptions::default())?;
        let cached = started.elapsed();
        anyhow::ensure!(d.from_cache, "{}: the second deploy should come from the cache", c.label);

        let prepared = runtime.load(&c.bytes, World::Placement)?;
        let n_inst = 20u32;
        let mut inst = Duration::ZERO;
        for _ in 0..n_inst {
            inst += runtime.instantiate_time(&prepared).context("instantiate")?;
        }
        let memory = runtime.placement_instance_memory(&prepared, &small).context("memory")?;

        // Small round on a warm (reused) instance.
        anyhow::ensure!(runtime.place(&prepared, &small)? == native_small, "{}: small round differs", c.label);
        let n_small = if c.label == "rust" { 20_000u32 } else { 2_000 };
        let started = Instant::now();
        for _ in 0..n_small {
            std::hint::black_box(runtime.place(&prepared, &small)?);
        }
        let small_mean = started.elapsed() / n_small;

        let mut times = Vec::new();
        for _ in 0..repeat.max(1) {
            let started = Instant::now();
            let answer = runtime.place(&prepared, large)?;
            times.push(started.elapsed());
            anyhow::ensure!(answer == native_large, "{}: large round differs from native Rust", c.label);
        }
        times.sort();
        let large_t = times[times.len() / 2];
        rows.push((c.label, c.bytes.len(), cold, cached, inst / n_inst, memory, small_mean, large_t));
    }
    println!(
        "  {:<7} {:>11} {:>11} {:>10} {:>12} {:>10} {:>12} {:>12}",
        "lang", "size", "cold deploy", "cached", "instantiate", "memory", "small round", "large round"
    );
    for (label, size, cold, cached, inst, memory, small, large_t) in &rows {
        println!(
            "  {label:<7} {:>8.2} MB {:>8.0} ms {:>7.1} ms {:>9.2} ms {:>6.1} MiB {:>9.1} us {:>9.0} ms",
            *size as f64 / 1e6,
            ms(*cold),
            ms(*cached),
            ms(*inst),
            *memory as f64 / f64::from(1 << 20),
            small.as_secs_f64() * 1e6,
            ms(*large_t),
        );
    }
    println!(
        "  budgets: small round <= 1 ms warm (python, js); cached deploy <= 500 ms; the default call deadline is 2000 ms"
    );
    for (label, _, _, cached, _, _, small, large_t) in &rows {
        if *label == "rust" {
            continue;
        }
        println!(
            "  {label}: small round {} the 1 ms budget; cached deploy {} 500 ms; large round {} the default deadline{}",
            if *small <= Duration::from_millis(1) { "meets" } else { "MISSES" },
            if *cached <= Duration::from_millis(500) { "meets" } else { "MISSES" },
            if *large_t <= Duration::from_secs(2) { "fits" } else { "does NOT fit" },
            if *large_t <= Duration::from_secs(2) {
                String::new()
            } else {
                format!(
                    " (set its own: paceline plugin deploy ... --deadline-ms {})",
                    (ms(*large_t) * 2.0).ceil() as u64
                )
            }
        );
    }
    Ok(())
}
