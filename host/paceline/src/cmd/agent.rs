//! `paceline agent`: the node agent of one machine.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use paceline_agent::{AgentConfig, IsolationChoice, TaskUserChoice};

/// Arguments of `paceline agent`. Flags override the config file.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// YAML file with an `AgentConfig` (fields as in docs/hosts.md).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Host manager address the agent dials; several, comma-separated, for
    /// highly available servers (tried in turn; only the leader accepts).
    #[arg(long, env = "PACELINE_HOSTMGR")]
    manager: Option<String>,
    /// Where runs, sandboxes, volumes and the status outbox live.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Host name reported to the manager (default: the OS host name).
    #[arg(long)]
    hostname: Option<String>,
    /// CPU in millicores (default: detected).
    #[arg(long)]
    cpu_millis: Option<u64>,
    /// Memory in MiB (default: detected).
    #[arg(long)]
    memory_mib: Option<u64>,
    /// Disk in MiB (default: detected).
    #[arg(long)]
    disk_mib: Option<u64>,
    /// GPUs (default: detected through nvidia-smi or /dev/nvidia*).
    #[arg(long)]
    gpus: Option<u64>,
    /// A host attribute, `key=value`; repeatable.
    #[arg(long = "attribute", value_name = "KEY=VALUE")]
    attributes: Vec<String>,
    /// Host ports handed to tasks, `first-last`.
    #[arg(long, value_name = "FIRST-LAST")]
    port_range: Option<String>,
    /// Use rlimits even where a delegated cgroup v2 would work.
    #[arg(long)]
    rlimits: bool,
    /// Which OS user tasks run as: `auto` (a uid of its own per run when the
    /// agent is root, else the agent's own user, with a warning), `per-run`
    /// (refuse to start without it) or `agent` (the agent's own user).
    #[arg(long, value_name = "auto|per-run|agent", value_parser = parse_task_user)]
    task_user: Option<TaskUserChoice>,
    /// The uids handed to runs, `first-last` (default 70000-79999; gid = uid).
    #[arg(long, value_name = "FIRST-LAST")]
    task_uids: Option<String>,
    /// How often the running tasks' CPU and memory use is sampled, in ms
    /// (default 5000; 0: not measured). The figures reach `task get` with
    /// the next heartbeat.
    #[arg(long, value_name = "MS")]
    usage_interval_ms: Option<u64>,
    /// Print the detected host (resources, attributes, isolation, task users) and exit.
    #[arg(long)]
    detect: bool,
    /// Stop (as on SIGTERM: tasks keep running) when standard input reaches
    /// end of file. `paceline dev` starts its agents so, with stdin a pipe it
    /// holds: when dev ends in any way, even SIGKILL, its agents follow.
    #[arg(long)]
    stop_when_stdin_closes: bool,
    /// Serve this agent's process metrics (`GET /metrics`, Prometheus text, no
    /// authentication) here, e.g. 127.0.0.1:9465. Default: none.
    #[arg(long)]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Serve --metrics-listen even on an address that is not loopback (it has no authentication).
    #[arg(long)]
    metrics_listen_public: bool,
    /// A join token (`paceline agent-token create` prints it): used once, when this agent has
    /// no certificate in its data dir yet, to get one. Prefer the environment variable: a
    /// command line is visible to every user of the machine.
    #[arg(long, value_name = "TOKEN", env = "PACELINE_JOIN_TOKEN", hide_env_values = true)]
    join: Option<String>,
    /// `sha256:<hex>` of the cluster CA certificate (printed with the token): the agent trusts
    /// the host manager only if its certificate chain holds this CA.
    #[arg(long, value_name = "sha256:HEX", env = "PACELINE_CA_HASH")]
    ca_hash: Option<String>,
}

/// Resolves when stdin reaches end of file (or fails). Read on a plain
/// thread, not tokio's blocking pool, so a pending read never holds up the
/// runtime's shutdown.
async fn stdin_closed() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let spawned = std::thread::Builder::new().name("stdin-watch".into()).spawn(move || {
        let mut buf = [0u8; 256];
        let mut stdin = std::io::stdin().lock();
        loop {
            match std::io::Read::read(&mut stdin, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let _ = tx.send(());
    });
    if spawned.is_err() {
        return std::future::pending().await;
    }
    let _ = rx.await;
}

fn parse_task_user(s: &str) -> Result<TaskUserChoice, String> {
    match s {
        "auto" => Ok(TaskUserChoice::Auto),
        "per-run" => Ok(TaskUserChoice::PerRun),
        "agent" => Ok(TaskUserChoice::Agent),
        _ => Err(format!("{s:?}: expected auto, per-run or agent")),
    }
}

/// Builds the config from the file and the flags.
fn config(args: &AgentArgs) -> anyhow::Result<AgentConfig> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?
        }
        None => AgentConfig::default(),
    };
    if let Some(m) = &args.manager {
        config.manager = m.clone();
    }
    if let Some(d) = &args.data_dir {
        config.data_dir = d.clone();
    }
    if args.hostname.is_some() {
        config.hostname = args.hostname.clone();
    }
    if let Some(ms) = args.usage_interval_ms {
        config.usage_interval_ms = ms;
    }
    config.resources.cpu_millis = args.cpu_millis.or(config.resources.cpu_millis);
    config.resources.memory_mib = args.memory_mib.or(config.resources.memory_mib);
    config.resources.disk_mib = args.disk_mib.or(config.resources.disk_mib);
    config.resources.gpus = args.gpus.or(config.resources.gpus);
    for a in &args.attributes {
        let Some((k, v)) = a.split_once('=') else { bail!("--attribute {a:?}: expected KEY=VALUE") };
        if k.is_empty() {
            bail!("--attribute {a:?}: the key is empty");
        }
        config.attributes.insert(k.to_string(), v.to_string());
    }
    if let Some(r) = &args.port_range {
        let parsed =
            r.split_once('-').and_then(|(a, b)| Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?)));
        let Some((first, last)) = parsed.filter(|(a, b)| a <= b) else {
            bail!("--port-range {r:?}: expected FIRST-LAST with FIRST <= LAST")
        };
        config.port_range_first = first;
        config.port_range_last = last;
    }
    if args.rlimits {
        config.isolation = IsolationChoice::Rlimits;
    }
    if let Some(choice) = args.task_user {
        config.task_user = choice;
    }
    if let Some(r) = &args.task_uids {
        let parsed =
            r.split_once('-').and_then(|(a, b)| Some((a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?)));
        let Some((first, last)) = parsed.filter(|(a, b)| 0 < *a && a <= b) else {
            bail!("--task-uids {r:?}: expected FIRST-LAST with 0 < FIRST <= LAST")
        };
        config.task_uid_first = first;
        config.task_uid_last = last;
    }
    Ok(config)
}

/// Runs the agent until SIGINT or SIGTERM.
pub fn run(args: AgentArgs) -> anyhow::Result<ExitCode> {
    let config = config(&args)?;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the async runtime")?;
    if args.detect {
        let host = config.detect_host().context("detecting the host")?;
        println!("{host:#?}");
        return Ok(ExitCode::SUCCESS);
    }
    let watch_stdin = args.stop_when_stdin_closes;
    let join = match (&args.join, &args.ca_hash) {
        (Some(token), Some(ca_hash)) => Some(paceline_agent::JoinSettings {
            token: paceline_agent::JoinToken::new(token.clone()),
            ca_hash: ca_hash.clone(),
        }),
        (Some(_), None) => bail!("--join needs --ca-hash (or PACELINE_CA_HASH): the hash printed with the token"),
        _ => None,
    };
    let metrics_listen = args.metrics_listen;
    if let Some(addr) = metrics_listen {
        paceline_server::metrics::check_scrape_address(addr, args.metrics_listen_public).map_err(anyhow::Error::msg)?;
    }
    runtime.block_on(async move {
        // The scrape listener lives as long as the runtime: it ends with the process.
        if let Some(addr) = metrics_listen {
            let metrics = std::sync::Arc::new(paceline_server::metrics::Metrics::process_only());
            let (bound, _task) =
                paceline_server::metrics::spawn_scrape_listener(addr, metrics, std::future::pending::<()>())
                    .await
                    .with_context(|| format!("listening for metrics on {addr}"))?;
            println!("paceline agent: metrics on http://{bound}/metrics");
        }
        let shutdown = async {
            tokio::select! {
                () = super::process::until_signal() => {}
                () = stdin_closed(), if watch_stdin => {
                    tracing::info!("stdin closed (the process that started this agent is gone); stopping");
                }
            }
        };
        paceline_agent::run(config, join, shutdown).await.context("agent stopped")
    })?;
    Ok(ExitCode::SUCCESS)
}
