//! `paceline demo`: deploys the default plugins into a registry, activates
//! them, and places a sample workload (a batch job, a service spread over
//! zones, a GPU gang) on sample hosts, one plugin call per slot.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use paceline_model::view::HostView;
use paceline_model::{Constraint, Resources};
use paceline_placement::{TaskView, build_placement_request};
use paceline_plugin::{DeployOptions, DirStore, PluginRuntime, Registry, RuntimeConfig};

/// Arguments of `demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where plugin versions and compiled artifacts are kept (default: a temporary directory).
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

pub fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let temp;
    let dir = match args.data_dir {
        Some(d) => d,
        None => {
            temp = tempfile::tempdir().context("cannot create a temporary directory")?;
            temp.path().to_path_buf()
        }
    };
    let config = RuntimeConfig { cache_dir: Some(dir.join("cache")), ..RuntimeConfig::default() };
    let runtime = Arc::new(PluginRuntime::new(config)?);
    let store = Arc::new(DirStore::open(dir.join("plugins")).map_err(anyhow::Error::msg)?);
    let registry = Registry::open(runtime, store)?;

    // The server's defaults for the slots the sample workload uses, and
    // `gang-gpu` for its GPU job's slot (a slot no new cluster fills).
    use paceline_plugin::builtins::{by_name, default_for};
    let pick = |slot: &'static str, b: Option<&'static paceline_plugin::builtins::Builtin>| {
        b.map(|b| (slot, b.name, b.bytes)).ok_or_else(|| anyhow::anyhow!("no built-in policy for {slot}"))
    };
    let defaults = [
        pick("placement/batch", default_for("placement/batch"))?,
        pick("placement/stateless", default_for("placement/stateless"))?,
        pick("placement/gpu", by_name("gang-gpu"))?,
        pick("preemption", default_for("preemption"))?,
    ];
    println!("Deploying the default plugins into {}", dir.display());
    for (slot, name, wasm) in defaults {
        let id = format!("{name}@{}", env!("CARGO_PKG_VERSION"));
        if registry.active(slot)?.as_deref() != Some(id.as_str()) {
            let started = Instant::now();
            let d = registry.deploy(slot, name, env!("CARGO_PKG_VERSION"), wasm, DeployOptions::default())?;
            registry.activate(slot, &id)?;
            println!(
                "  {slot:<20} {id:<24} {:>6} bytes  deployed in {:>6.1} ms{}",
                wasm.len(),
                started.elapsed().as_secs_f64() * 1e3,
                if d.from_cache { " (compiled artifact from cache)" } else { "" }
            );
        } else {
            println!("  {slot:<20} {id:<24} already active");
        }
    }

    let hosts = sample_hosts();
    println!("\n{} hosts in zones a, b, c; hosts 10 and 11 have 4 GPUs each.\n", hosts.len());
    let workloads = [
        (
            "placement/batch",
            "etl (batch, 6 x 1 cpu / 2 GiB)",
            tasks("etl", 6, Resources::new(1000, 2048, 0, 0), vec![], false),
        ),
        (
            "placement/stateless",
            "web (service, 4 x 0.5 cpu, spread over zone, max 1 per host)",
            tasks(
                "web",
                4,
                Resources::new(500, 512, 0, 0),
                vec![Constraint::SpreadOver { key: "zone".into() }, Constraint::MaxPerHost { max: 1 }],
                false,
            ),
        ),
        (
            "placement/gpu",
            "train (gang of 4 x 2 GPUs)",
            tasks("train", 4, Resources::new(4000, 16_384, 0, 2_000), vec![], true),
        ),
    ];
    for (round, (slot, title, ts)) in workloads.into_iter().enumerate() {
        let request = build_placement_request(round as u64, &hosts, &ts);
        let started = Instant::now();
        let answer = registry.place(slot, &request)?;
        let took = started.elapsed();
        let served_by = match &answer.served_by {
            paceline_plugin::ServedBy::Version(v) => format!("plugin {v}"),
            paceline_plugin::ServedBy::Native(n) => format!("built-in native {n} (fallback)"),
        };
        println!("{title}\n  slot {slot}, served by {served_by}, one call, {:.2} ms", took.as_secs_f64() * 1e3);
        for asg in &answer.value.assignments {
            let t = &ts[asg.task as usize];
            let h = &hosts[asg.host as usize];
            println!(
                "    {}-{} -> {} (zone {})",
                t.job,
                t.instance,
                h.name,
                h.attributes.get("zone").map_or("-", String::as_str)
            );
        }
        for u in &answer.value.unplaced {
            let t = &ts[u.task as usize];
            println!("    {}-{} not placed: {}", t.job, t.instance, u.reason.as_str());
        }
        println!();
    }
    Ok(ExitCode::SUCCESS)
}

fn sample_hosts() -> Vec<HostView> {
    (0..12)
        .map(|i| {
            let gpu_host = i >= 10;
            let total = if gpu_host {
                Resources::new(16_000, 65_536, 100_000, 4_000)
            } else {
                Resources::new(8000, 32_768, 100_000, 0)
            };
            let mut h = HostView::new(format!("host-{i:02}"), total);
            h.attributes.insert("zone".into(), ["a", "b", "c"][i % 3].into());
            // Some CPU hosts are already partly used, so best fit has something to prefer.
            if !gpu_host {
                h.allocated = Resources::new((i as u64 % 4) * 1500, (i as u64 % 4) * 4096, 0, 0);
            }
            h
        })
        .collect()
}

fn tasks(job: &str, n: u32, demand: Resources, constraints: Vec<Constraint>, gang: bool) -> Vec<TaskView> {
    (0..n)
        .map(|i| TaskView {
            job: job.into(),
            instance: i,
            gang: if gang { 0 } else { i },
            priority: 1,
            demand,
            constraints: constraints.clone(),
            ..TaskView::default()
        })
        .collect()
}
