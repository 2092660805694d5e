//! `paceline sim run|compare|generate|import` and `paceline trace record`.

use std::collections::BTreeMap;
use std::io::{BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use paceline_sim::Report;
use paceline_sim::render;
use paceline_sim_runner::{Arrival, Options, PolicySource, Progress, builtin, replay};

/// `paceline sim …`.
#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Replay a trace under a set of policies and report what they did.
    Run(RunArgs),
    /// Replay a trace under two sets of policies and show them side by side.
    Compare(CompareArgs),
    /// Write a seeded synthetic trace.
    Generate(GenerateArgs),
    /// Turn a public trace into a Paceline trace.
    #[command(subcommand)]
    Import(ImportCommand),
}

/// `paceline trace …`.
#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Export a live cluster's history (jobs, tasks, hosts, pools) as a trace.
    Record(RecordArgs),
}

/// Options every replay takes.
#[derive(Debug, Args)]
pub struct ReplayOpts {
    /// A component other policies or the trace's `policy` lines may name: NAME=PATH.wasm.
    #[arg(long = "plugin", value_name = "NAME=PATH")]
    plugins: Vec<String>,
    /// Passed to the simulator; recorded in the report.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Loop period and time resolution of the replay, ms.
    #[arg(long, default_value_t = 1_000)]
    tick_ms: u64,
    /// Stop at this trace time (ms) even if work remains.
    #[arg(long)]
    until_ms: Option<u64>,
    /// Samples in the report's series.
    #[arg(long, default_value_t = 240)]
    samples: u64,
    /// Host attribute whose spread over each job's tasks is reported.
    #[arg(long, default_value = "zone")]
    spread_key: String,
    /// Most tasks a placement round takes per job kind.
    #[arg(long, default_value_t = 1_000)]
    batch_size: usize,
    /// Leave wall-clock figures (plugin latency, replay time) out of every
    /// output, so the same trace, policies and seed give identical bytes.
    #[arg(long)]
    reproducible: bool,
    /// Ignore arrival times: submit the trace's jobs in order, each once the
    /// one before is placed, runs never ending, and stop at the first job
    /// that cannot be placed whole ("arrive until full": how much work the
    /// cluster holds at once under the placement policy).
    #[arg(long)]
    arrive_until_full: bool,
    /// With --arrive-until-full: go on through the whole trace, leaving the
    /// jobs that do not fit waiting, instead of stopping at the first.
    #[arg(long, requires = "arrive_until_full")]
    keep_going: bool,
    /// With --arrive-until-full: go on (as --keep-going) until the GPU asked
    /// for by the jobs submitted reaches PCT% of the cluster's GPU capacity,
    /// offering the trace's jobs again when it runs out; the report's
    /// `fill.gpu_curve` is the allocation as the arrived work grew.
    #[arg(long, value_name = "PCT", requires = "arrive_until_full")]
    until_gpu_pct: Option<u32>,
    /// With --arrive-until-full: the trace's jobs arrive in a random order
    /// drawn from SEED (hosts and pools first), and each time the trace is
    /// offered again, in a new order (the paper's `--shuffle-pod`; run
    /// several seeds and average, as it does).
    #[arg(long, value_name = "SEED", requires = "arrive_until_full")]
    shuffle: Option<u64>,
    /// Tasks whose shapes make the workload mix handed to GPU-aware policies
    /// (`gpu-request.workload`): the last N the engine took. The server's
    /// default is 256.
    #[arg(long, value_name = "N", default_value_t = paceline_placement::workload::WINDOW)]
    workload_window: usize,
    /// Put every task's runs (placement time, host, end) and outcome into
    /// the JSON report (large for large traces).
    #[arg(long)]
    tasks: bool,
    /// Feasible hosts offered to each placement policy per group of alike
    /// tasks (decision 0054): `auto` (the server's default), `all` (no
    /// narrowing) or a host count.
    #[arg(long, default_value = "auto", value_parser = paceline_plugin::Candidates::parse)]
    candidates: paceline_plugin::Candidates,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the report as a self-contained HTML page here.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Also write the report, HTML and JSON, into this directory as
    /// NAME.html and NAME.json: a server whose `sim_reports_dir` it is lists
    /// them on its web UI's Simulations page.
    #[arg(long, value_name = "DIR")]
    report_dir: Option<PathBuf>,
    /// NAME in --report-dir (letters, digits, `.`, `_`, `-`); default
    /// `run-<ms since the epoch>` or `compare-<ms>`. An existing report of
    /// that name is replaced.
    #[arg(long, value_name = "NAME", requires = "report_dir")]
    report_name: Option<String>,
    /// What to print on stdout.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    output: Print,
}

/// What `sim run` and `sim compare` print.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Print {
    /// A table.
    Table,
    /// The report's JSON.
    Json,
    /// Nothing (files only).
    None,
}

/// Arguments of `sim run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The trace (JSON lines, docs/sim.md).
    trace: PathBuf,
    /// A policy for a slot: SLOT=PATH.wasm or SLOT=BUILTIN; SLOT is
    /// `placement` (every placement slot), `placement/<kind>`, `preemption`
    /// or `lifecycle/<kind>`. Slots not named keep the built-in defaults.
    #[arg(long = "policy", value_name = "SLOT=SOURCE")]
    policies: Vec<String>,
    #[command(flatten)]
    opts: ReplayOpts,
}

/// Arguments of `sim compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The trace.
    trace: PathBuf,
    /// A policy of set A (as `sim run --policy`).
    #[arg(long = "a", value_name = "SLOT=SOURCE")]
    a: Vec<String>,
    /// A policy of set B.
    #[arg(long = "b", value_name = "SLOT=SOURCE")]
    b: Vec<String>,
    /// Name of set A in the output.
    #[arg(long, default_value = "A")]
    name_a: String,
    /// Name of set B in the output.
    #[arg(long, default_value = "B")]
    name_b: String,
    /// Candidates of set A, instead of --candidates (compare narrowing:
    /// `--a-candidates all --b-candidates auto` with the same policies).
    #[arg(long, value_name = "auto|all|N", value_parser = paceline_plugin::Candidates::parse)]
    a_candidates: Option<paceline_plugin::Candidates>,
    /// Candidates of set B, instead of --candidates.
    #[arg(long, value_name = "auto|all|N", value_parser = paceline_plugin::Candidates::parse)]
    b_candidates: Option<paceline_plugin::Candidates>,
    #[command(flatten)]
    opts: ReplayOpts,
}

/// Arguments of `sim generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Where to write the trace.
    #[arg(short = 'o', long = "out")]
    out: PathBuf,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Hosts.
    #[arg(long, default_value_t = 100)]
    hosts: usize,
    /// Tasks (summed over jobs).
    #[arg(long, default_value_t = 2_000)]
    tasks: u64,
    /// Span of the arrivals, hours.
    #[arg(long, default_value_t = 1.0)]
    hours: f64,
    /// Work offered as a fraction of the cluster's CPU.
    #[arg(long, default_value_t = 0.7)]
    load: f64,
    /// Zones.
    #[arg(long, default_value_t = 3)]
    zones: u32,
    /// Share of GPU work (and of GPU hosts).
    #[arg(long, default_value_t = 0.1)]
    gpu_share: f64,
    /// Log-normal shape of run times (heavier tail when larger).
    #[arg(long, default_value_t = 1.5)]
    sigma: f64,
}

/// `sim import …`.
#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// Alibaba cluster-trace-gpu-v2023 (openb node and pod lists).
    Openb(OpenbArgs),
    /// Alibaba cluster-trace-v2018 batch workloads (machine_meta.csv, batch_task.csv).
    #[command(name = "alibaba-2018")]
    Alibaba2018(AlibabaArgs),
}

/// What to do with fractional GPU requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FractionalGpu {
    /// A share of one GPU device (`gpu_milli`), as the trace asks.
    Share,
    /// One whole GPU.
    RoundUp,
    /// Leave the pod out.
    Drop,
}

/// Arguments of `sim import openb`.
#[derive(Debug, Args)]
pub struct OpenbArgs {
    /// openb_node_list_*.csv
    #[arg(long)]
    nodes: PathBuf,
    /// openb_pod_list_*.csv
    #[arg(long)]
    pods: PathBuf,
    /// Fractional GPU requests (num_gpu 1, gpu_milli < 1000).
    #[arg(long, value_enum, default_value = "share")]
    fractional_gpu: FractionalGpu,
    /// Where to write the trace.
    #[arg(short = 'o', long = "out")]
    out: PathBuf,
}

/// Arguments of `sim import alibaba-2018`.
#[derive(Debug, Args)]
pub struct AlibabaArgs {
    /// machine_meta.csv
    #[arg(long)]
    machines: PathBuf,
    /// batch_task.csv
    #[arg(long)]
    tasks: PathBuf,
    /// MiB of one normalised memory unit.
    #[arg(long, default_value_t = 1_024.0)]
    memory_mib_per_unit: f64,
    /// Import at most this many task rows.
    #[arg(long)]
    max_tasks: Option<u64>,
    /// Where to write the trace.
    #[arg(short = 'o', long = "out")]
    out: PathBuf,
}

/// Arguments of `trace record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Where to write the trace.
    #[arg(short = 'o', long = "out")]
    out: PathBuf,
    /// A name for the trace.
    #[arg(long, default_value = "recorded")]
    name: String,
    // The client options without `-o/--output` (a trace has one format, and
    // `-o` names the file here, as for `sim generate` and `sim import`):
    // flattening `ClientOpts` made clap refuse the command, `-o` twice.
    /// The server's API address; several, comma-separated, for a highly
    /// available deployment (the leader is found and used).
    #[arg(long, env = "PACELINE_SERVER", default_value = super::client::DEFAULT_SERVER)]
    server: String,
    /// Bearer token sent with every call (prefer the environment variable).
    #[arg(long, env = "PACELINE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Read the bearer token from this file instead.
    #[arg(long, env = "PACELINE_TOKEN_FILE", conflicts_with = "token")]
    token_file: Option<PathBuf>,
    /// PEM certificate of the authority that signed an `https://` server's certificate.
    #[arg(long, env = "PACELINE_CA_CERT")]
    ca_cert: Option<PathBuf>,
}

pub fn run(cmd: SimCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        SimCommand::Run(a) => run_one(a),
        SimCommand::Compare(a) => compare(a),
        SimCommand::Generate(a) => generate(a),
        SimCommand::Import(ImportCommand::Openb(a)) => import_openb(a),
        SimCommand::Import(ImportCommand::Alibaba2018(a)) => import_alibaba(a),
    }
}

pub fn trace(cmd: TraceCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        TraceCommand::Record(a) => {
            let client = super::client::ClientOpts {
                server: a.server,
                output: super::client::Output::Table,
                token: a.token,
                token_file: a.token_file,
                ca_cert: a.ca_cert,
            };
            super::record::record(a.out, a.name, client)
        }
    }
}

fn parse_policy(spec: &str) -> anyhow::Result<(String, PolicySource)> {
    let (slot, source) =
        spec.split_once('=').with_context(|| format!("--policy {spec}: expected SLOT=PATH.wasm or SLOT=BUILTIN"))?;
    if slot != "placement" && paceline_plugin::slot_world(slot).is_err() {
        bail!("--policy {spec}: `{slot}` is not a slot (placement, placement/<kind>, preemption, lifecycle/<kind>)");
    }
    let path = Path::new(source);
    let src = if source.ends_with(".wasm") || path.is_file() {
        let bytes = std::fs::read(path).with_context(|| format!("--policy {spec}: reading {source}"))?;
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("plugin").to_string();
        PolicySource::Wasm { name, bytes }
    } else if builtin(source).is_some() {
        PolicySource::Builtin(source.to_string())
    } else {
        bail!(
            "--policy {spec}: `{source}` is neither a .wasm file nor a built-in policy (binpack, spread, gang-gpu, priority-preempt, batch, stateless, stateful, daemon)"
        );
    };
    Ok((slot.to_string(), src))
}

fn options(opts: &ReplayOpts, policies: &[String], label: &str) -> anyhow::Result<Options> {
    let mut plugins = BTreeMap::new();
    for p in &opts.plugins {
        let (name, path) = p.split_once('=').with_context(|| format!("--plugin {p}: expected NAME=PATH.wasm"))?;
        plugins.insert(name.to_string(), std::fs::read(path).with_context(|| format!("--plugin {p}: reading {path}"))?);
    }
    let policies = policies.iter().map(|p| parse_policy(p)).collect::<anyhow::Result<Vec<_>>>()?;
    let progress: Option<Progress> = if std::io::stderr().is_terminal() {
        let label = label.to_string();
        Some(Box::new(move |now: u64, span: Option<u64>, arrived: u64| {
            let bar = match span {
                Some(s) if s > 0 => {
                    let f = (now as f64 / s as f64).clamp(0.0, 1.0);
                    let n = (f * 30.0) as usize;
                    format!("[{}{}] {:>3.0}%", "#".repeat(n), ".".repeat(30 - n), f * 100.0)
                }
                _ => String::new(),
            };
            eprint!("\r{label}{bar}  virtual {:.1} h  tasks arrived {arrived}   ", now as f64 / 3_600_000.0);
            let _ = std::io::stderr().flush();
        }))
    } else {
        None
    };
    Ok(Options {
        tick_ms: opts.tick_ms,
        seed: opts.seed,
        policies,
        plugins,
        samples: opts.samples,
        spread_key: opts.spread_key.clone(),
        until_ms: opts.until_ms,
        batch_size: opts.batch_size,
        workload_window: opts.workload_window,
        progress,
        arrival: if opts.arrive_until_full {
            Arrival::UntilFull {
                stop_at_first_unplaced: !opts.keep_going && opts.until_gpu_pct.is_none(),
                until_gpu_pct: opts.until_gpu_pct,
                shuffle: opts.shuffle,
            }
        } else {
            Arrival::ByTime
        },
        list_tasks: opts.tasks,
        candidates: opts.candidates,
    })
}

/// Replays on a current-thread runtime (the runner's determinism needs it).
fn replay_file(trace: &Path, options: Options) -> anyhow::Result<Report> {
    let file = std::fs::File::open(trace).with_context(|| format!("opening {}", trace.display()))?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let with_bar = options.progress.is_some();
    let report = rt.block_on(replay(BufReader::new(file), options));
    if with_bar {
        eprintln!();
    }
    Ok(report?)
}

fn write_file(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Writes beside `path` under a hidden name, then renames: a server listing
/// the directory (which skips hidden names) never serves half a report.
fn write_whole(path: &Path, text: &str) -> anyhow::Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let partial = path.with_file_name(format!(".{name}.partial"));
    write_file(&partial, text)?;
    std::fs::rename(&partial, path).with_context(|| format!("renaming {} to {}", partial.display(), path.display()))
}

/// Where `--report-dir`/`--report-name` put a report: the two paths
/// (`.html`, `.json`), checked before the replay runs; none without
/// `--report-dir`.
fn report_paths(opts: &ReplayOpts, kind: &str) -> anyhow::Result<Option<(PathBuf, PathBuf)>> {
    let Some(dir) = &opts.report_dir else { return Ok(None) };
    let name = match &opts.report_name {
        Some(n) => n.clone(),
        None => {
            let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
            format!("{kind}-{ms}")
        }
    };
    paceline_api::web::sim_reports::check_stem(&name).map_err(|e| anyhow::anyhow!("--report-name `{name}`: {e}"))?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(Some((dir.join(format!("{name}.html")), dir.join(format!("{name}.json")))))
}

fn run_one(a: RunArgs) -> anyhow::Result<ExitCode> {
    let into_dir = report_paths(&a.opts, "run")?;
    let options = options(&a.opts, &a.policies, "")?;
    let mut report = replay_file(&a.trace, options)?;
    if a.opts.reproducible {
        report.measured = None;
    }
    if let Some(p) = &a.opts.json {
        write_file(p, &report.to_json())?;
    }
    if let Some(p) = &a.opts.html {
        write_file(p, &render::html(&report))?;
    }
    if let Some((html, json)) = &into_dir {
        write_whole(html, &render::html(&report))?;
        write_whole(json, &report.to_json())?;
        eprintln!("report: {} and {}", html.display(), json.display());
    }
    match a.opts.output {
        Print::Table => print!("{}", render::table_text(&report)),
        Print::Json => print!("{}", report.to_json()),
        Print::None => {}
    }
    Ok(ExitCode::SUCCESS)
}

fn compare(a: CompareArgs) -> anyhow::Result<ExitCode> {
    let into_dir = report_paths(&a.opts, "compare")?;
    let mut oa = options(&a.opts, &a.a, &format!("{} ", a.name_a))?;
    oa.candidates = a.a_candidates.unwrap_or(oa.candidates);
    let ra = replay_file(&a.trace, oa)?;
    let mut ob = options(&a.opts, &a.b, &format!("{} ", a.name_b))?;
    ob.candidates = a.b_candidates.unwrap_or(ob.candidates);
    let rb = replay_file(&a.trace, ob)?;
    let (mut ra, mut rb) = (ra, rb);
    if a.opts.reproducible {
        ra.measured = None;
        rb.measured = None;
    }
    let names = [a.name_a.as_str(), a.name_b.as_str()];
    if let Some(p) = &a.opts.json {
        let both =
            serde_json::json!({ "compare": "paceline-sim-compare", "version": 1, "names": names, "a": ra, "b": rb });
        write_file(p, &(serde_json::to_string_pretty(&both)? + "\n"))?;
    }
    if let Some(p) = &a.opts.html {
        write_file(p, &render::compare_html(&ra, &rb, names))?;
    }
    if let Some((html, json)) = &into_dir {
        let both =
            serde_json::json!({ "compare": "paceline-sim-compare", "version": 1, "names": names, "a": ra, "b": rb });
        write_whole(html, &render::compare_html(&ra, &rb, names))?;
        write_whole(json, &(serde_json::to_string_pretty(&both)? + "\n"))?;
        eprintln!("report: {} and {}", html.display(), json.display());
    }
    match a.opts.output {
        Print::Table => print!("{}", render::compare_table(&ra, &rb, names)),
        Print::Json => {
            let both = serde_json::json!({ "compare": "paceline-sim-compare", "version": 1, "names": names, "a": ra, "b": rb });
            println!("{}", serde_json::to_string_pretty(&both)?);
        }
        Print::None => {}
    }
    Ok(ExitCode::SUCCESS)
}

fn write_trace(out: &Path, header: &paceline_sim::Header, events: &[paceline_sim::Timed]) -> anyhow::Result<u64> {
    let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut w = paceline_sim::trace::Writer::new(std::io::BufWriter::new(file), header)?;
    for e in events {
        w.event(e.at, &e.event)?;
    }
    let lines = w.lines();
    w.finish()?;
    Ok(lines)
}

fn generate(a: GenerateArgs) -> anyhow::Result<ExitCode> {
    if a.hours.is_nan() || a.hours <= 0.0 || a.hosts == 0 || a.tasks == 0 {
        bail!("--hours, --hosts and --tasks must be above 0");
    }
    let cfg = paceline_sim::generate::GenConfig {
        seed: a.seed,
        hosts: a.hosts,
        tasks: a.tasks,
        duration_ms: (a.hours * 3_600_000.0) as u64,
        load: a.load,
        zones: a.zones,
        gpu_share: a.gpu_share,
        sigma: a.sigma,
    };
    let (header, events) = paceline_sim::generate::generate(&cfg);
    let lines = write_trace(&a.out, &header, &events)?;
    eprintln!("{}: {lines} lines ({})", a.out.display(), header.notes.join("; "));
    Ok(ExitCode::SUCCESS)
}

fn open(path: &Path) -> anyhow::Result<BufReader<std::fs::File>> {
    Ok(BufReader::new(std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?))
}

fn import_openb(a: OpenbArgs) -> anyhow::Result<ExitCode> {
    use paceline_sim::import::openb;
    let opts = openb::Options {
        fractional: match a.fractional_gpu {
            FractionalGpu::Share => openb::Fractional::Share,
            FractionalGpu::RoundUp => openb::Fractional::RoundUp,
            FractionalGpu::Drop => openb::Fractional::Drop,
        },
        ..openb::Options::default()
    };
    let imported = openb::import(open(&a.nodes)?, open(&a.pods)?, &opts)?;
    let lines = write_trace(&a.out, &imported.header, &imported.events)?;
    eprintln!("{}: {lines} lines", a.out.display());
    for s in &imported.summary {
        eprintln!("  {s}");
    }
    Ok(ExitCode::SUCCESS)
}

fn import_alibaba(a: AlibabaArgs) -> anyhow::Result<ExitCode> {
    use paceline_sim::import::alibaba2018;
    let opts = alibaba2018::Options {
        memory_mib_per_unit: a.memory_mib_per_unit,
        max_tasks: a.max_tasks,
        ..alibaba2018::Options::default()
    };
    let imported = alibaba2018::import(open(&a.machines)?, open(&a.tasks)?, &opts)?;
    let lines = write_trace(&a.out, &imported.header, &imported.events)?;
    eprintln!("{}: {lines} lines", a.out.display());
    for s in &imported.summary {
        eprintln!("  {s}");
    }
    Ok(ExitCode::SUCCESS)
}
