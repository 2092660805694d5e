//! `paceline server` and `paceline dev`.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};

use anyhow::Context;
use clap::Args;
use paceline_model::secret::Secret;
use paceline_server::{HostsConfig, Server, ServerConfig};

use super::process::{runtime, until_signal};

/// Arguments of `paceline server`.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// YAML config file (see docs/operations.md); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Data directory (SQLite file, plugin compile cache).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Where the gRPC API listens.
    #[arg(long)]
    api_listen: Option<SocketAddr>,
    /// Where agents dial in.
    #[arg(long)]
    agent_listen: Option<SocketAddr>,
    /// Require bearer tokens from this tokens file (overrides `tokens_file` in the config).
    #[arg(long)]
    tokens_file: Option<PathBuf>,
    /// Also accept plain HTTP requests (the web UI, /metrics) that name the server by
    /// this name (repeatable; `*.example.com` for a domain; adds to `api_allowed_hosts`).
    /// IP addresses, localhost and this machine's hostname are always accepted.
    #[arg(long = "api-allowed-host", value_name = "NAME")]
    api_allowed_hosts: Vec<String>,
    /// Serve the API without a tokens file on an address that is not loopback:
    /// anyone who reaches it acts as an admin (overrides `insecure_no_auth`).
    /// Without this flag such a start is refused.
    #[arg(long)]
    insecure_no_auth: bool,
    /// Also serve `GET /metrics` here without authentication, e.g. 127.0.0.1:9464
    /// (overrides `metrics_listen` in the config; the API port serves it behind tokens).
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// Serve --metrics-listen even on an address that is not loopback (it has no
    /// authentication; overrides `metrics_listen_public` in the config).
    #[arg(long)]
    metrics_listen_public: bool,
    /// Remove audit records older than this many days (overrides `audit.max_age_days`; default 90).
    #[arg(long)]
    audit_max_age_days: Option<u64>,
    /// Keep at most this many audit records, the oldest removed first (overrides
    /// `audit.max_rows`; default 1000000).
    #[arg(long)]
    audit_max_rows: Option<u64>,
    /// Roles this process runs: `all` (the default); `jobmgr,resmgr,hostmgr` (the core,
    /// with placement engines in other processes); `placement` (engines only, against
    /// the core named by --core; run as many as you like); `hostmgr` (the host manager
    /// alone: agents dial it); `jobmgr,resmgr` or `jobmgr,resmgr,placement` (against the
    /// host manager named by --hostmgr). See docs/operations.md, "Roles in separate processes".
    #[arg(long, default_value = "all")]
    roles: String,
    /// With `--roles jobmgr,resmgr[,placement]`: the host manager's API address (several,
    /// comma-separated, for a highly available host manager: the leader is found and followed).
    #[arg(long, env = "PACELINE_HOSTMGR")]
    hostmgr: Option<String>,
    /// With `--roles placement`: the core's API address (several, comma-separated, for a
    /// highly available core: the leader is found and followed).
    #[arg(long, env = "PACELINE_CORE")]
    core: Option<String>,
    /// With `--roles placement` or `--hostmgr`: the admin token of a core or host manager
    /// with a tokens file.
    #[arg(long, env = "PACELINE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Read that token from this file instead (one line; mode 0600).
    #[arg(long, env = "PACELINE_TOKEN_FILE", conflicts_with = "token")]
    token_file: Option<PathBuf>,
    /// With `--roles placement` or `--hostmgr`: the authority that signed an `https://`
    /// core's or host manager's certificate.
    #[arg(long, env = "PACELINE_CA_CERT")]
    ca_cert: Option<PathBuf>,
}

/// Arguments of `paceline dev`.
#[derive(Debug, Args)]
pub struct DevArgs {
    /// Local agents to start (each gets an equal share of this machine's CPU and memory; the first one takes every GPU).
    #[arg(long, default_value_t = 2)]
    agents: usize,
    /// Simulated hosts instead of agents (no processes are started for tasks).
    #[arg(long, conflicts_with = "agents")]
    sim_hosts: Option<usize>,
    /// Data directory; kept between runs (delete it for a fresh cluster).
    #[arg(long, default_value = ".paceline-dev")]
    data_dir: PathBuf,
    /// Where the gRPC API listens.
    #[arg(long, default_value = "127.0.0.1:7400")]
    api_listen: SocketAddr,
    /// Where agents dial in (0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    agent_listen: SocketAddr,
    /// Require bearer tokens from this tokens file (default: an open API).
    #[arg(long)]
    tokens_file: Option<PathBuf>,
    /// Also accept web UI requests that name the server by this name (repeatable;
    /// `*.example.com` for a domain). IP addresses, localhost and this machine's
    /// hostname are always accepted.
    #[arg(long = "api-allowed-host", value_name = "NAME")]
    api_allowed_hosts: Vec<String>,
    /// Also serve `GET /metrics` here without authentication (e.g. 127.0.0.1:9464;
    /// the API port serves it too, behind tokens when there are any).
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// Serve --metrics-listen even on an address that is not loopback (it has no
    /// authentication; overrides `metrics_listen_public` in the config).
    #[arg(long)]
    metrics_listen_public: bool,
    /// On Ctrl-C or SIGTERM, leave the tasks running (the next `dev` on the
    /// same data dir takes them over) instead of stopping them.
    #[arg(long)]
    keep_tasks_on_exit: bool,
}

pub fn server(args: ServerArgs) -> anyhow::Result<ExitCode> {
    let roles = paceline_server::ha::parse_roles(&args.roles).map_err(anyhow::Error::msg)?;
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?
        }
        None => ServerConfig::default(),
    };
    if let Some(d) = args.data_dir {
        config.data_dir = d;
    }
    if let Some(a) = args.api_listen {
        config.api_listen = a;
    }
    if let Some(a) = args.agent_listen {
        config.agent_listen = a;
    }
    if let Some(t) = args.tokens_file {
        config.tokens_file = Some(t);
    }
    config.api_allowed_hosts.extend(args.api_allowed_hosts);
    if args.insecure_no_auth {
        config.insecure_no_auth = true;
    }
    if let Some(m) = args.metrics_listen {
        config.metrics_listen = Some(m);
    }
    if args.metrics_listen_public {
        config.metrics_listen_public = true;
    }
    if let Some(days) = args.audit_max_age_days {
        anyhow::ensure!(days > 0, "--audit-max-age-days must be at least 1");
        config.audit.max_age_days = days;
    }
    if let Some(rows) = args.audit_max_rows {
        anyhow::ensure!(rows > 0, "--audit-max-rows must be at least 1");
        config.audit.max_rows = rows;
    }
    match roles {
        paceline_server::ha::RoleSet::All => {}
        paceline_server::ha::RoleSet::Core => config.placement_engine = false,
        paceline_server::ha::RoleSet::Placement => {
            if args.core.is_none() && config.membership == paceline_membership::MembershipConfig::Embedded {
                anyhow::bail!(
                    "--roles placement needs --core (or PACELINE_CORE): the core's API address, or a zookeeper membership to find its leader in"
                );
            }
            let token =
                paceline_server::resolve_token(args.token.map(Secret::new).as_ref(), args.token_file.as_deref())?;
            return super::placement::run(config, args.core, token, args.ca_cert);
        }
        paceline_server::ha::RoleSet::Jobs { placement } => {
            config.placement_engine = placement;
            if let Some(servers) = args.hostmgr {
                let servers = servers.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect();
                config.hosts = HostsConfig::Hostmgr {
                    servers,
                    token: args.token.clone().map(Secret::new),
                    token_file: args.token_file.clone(),
                    ca_cert: args.ca_cert.clone(),
                };
            }
            if !matches!(config.hosts, HostsConfig::Hostmgr { .. }) {
                if config.membership == paceline_membership::MembershipConfig::Embedded {
                    anyhow::bail!(
                        "--roles {} runs no host manager: name one with --hostmgr (or PACELINE_HOSTMGR, or `hosts: {{provider: hostmgr, servers: [...]}}` in the config), or use a zookeeper membership to find its leader",
                        args.roles
                    );
                }
                // Found through ZooKeeper: whoever leads hostmgr.
                config.hosts = HostsConfig::Hostmgr {
                    servers: Vec::new(),
                    token: args.token.map(Secret::new),
                    token_file: args.token_file,
                    ca_cert: args.ca_cert,
                };
            }
        }
        paceline_server::ha::RoleSet::Hosts => {
            if matches!(config.hosts, HostsConfig::Hostmgr { .. }) {
                anyhow::bail!(
                    "--roles hostmgr is the host manager: its `hosts` provider must be agent, sim, mesos or kubernetes"
                );
            }
        }
    }
    if config.membership != paceline_membership::MembershipConfig::Embedded {
        runtime()?.block_on(paceline_server::ha::run(config, roles, &Stdout, until_signal()))?;
        return Ok(ExitCode::SUCCESS);
    }
    let scheme = if config.tls.is_some() { "https" } else { "http" };
    if roles == paceline_server::ha::RoleSet::Hosts {
        runtime()?.block_on(async move {
            let server = paceline_server::HostServer::start_with(config, paceline_server::ApiSocket::Bind, None)
                .await
                .context("starting the host manager")?;
            println!(
                "paceline server: host manager; API on {scheme}://{} · agents dial https://{} · metrics on {}",
                server.api_addr,
                server.agent_addr,
                match server.metrics_addr {
                    Some(m) => format!("http://{m}/metrics (no token) and the API port"),
                    None => "the API port".to_string(),
                }
            );
            until_signal().await;
            server.shutdown().await;
            anyhow::Ok(())
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    let remote_hosts = matches!(config.hosts, HostsConfig::Hostmgr { .. });
    runtime()?.block_on(async move {
        let server = Server::start(config).await.context("starting the server")?;
        if remote_hosts {
            println!(
                "paceline server: API on {scheme}://{} · web UI {scheme}://{}/ui/ · hosts from the host manager",
                server.api_addr, server.api_addr
            );
        } else {
            println!(
                "paceline server: API on {scheme}://{} · web UI {scheme}://{}/ui/ · agents dial https://{}",
                server.api_addr, server.api_addr, server.agent_addr
            );
        }
        until_signal().await;
        server.shutdown().await;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The lines a highly available server prints.
struct Stdout;

impl paceline_server::ha::Announce for Stdout {
    fn standby(&self, member_id: &str, api_addr: SocketAddr) {
        println!(
            "paceline server: standby {member_id}, API on http://{api_addr} (answers UNAVAILABLE naming the leader)"
        );
    }

    fn leading(&self, api_addr: SocketAddr, agent_addr: Option<SocketAddr>) {
        match agent_addr {
            Some(agents) => {
                println!("paceline server: leading; API on http://{api_addr} · agents dial https://{agents}")
            }
            None => println!("paceline server: leading; API on http://{api_addr} · hosts from the host manager"),
        }
    }
}

/// Local agents started by `dev`; stopped when dropped.
///
/// Each agent runs with `--stop-when-stdin-closes` and its stdin a pipe
/// whose only writer is this process (std opens it close-on-exec, so no
/// other child inherits it). However `dev` ends — a clean stop, a panic,
/// SIGKILL, a lost terminal — the kernel closes the pipe, the agent reads
/// end-of-file and stops as on SIGTERM: its tasks keep running and the next
/// agent on the same data dir re-adopts them. (A parent-death signal would
/// need `unsafe` `pre_exec`, and fires when the *thread* that forked exits,
/// which under tokio can be any short-lived worker; see
/// docs/decisions/0020-dev-agents-die-with-dev.md.)
struct Agents(Vec<Child>);

impl Drop for Agents {
    fn drop(&mut self) {
        // Closing the pipes is the stop signal; SIGTERM too, for an agent
        // that does not read its stdin yet (still starting).
        for c in &mut self.0 {
            drop(c.stdin.take());
            let _ = Command::new("kill").arg("-TERM").arg(c.id().to_string()).stderr(Stdio::null()).status();
        }
        for c in &mut self.0 {
            let _ = c.wait();
        }
    }
}

/// What `dev` hands its agents to join with.
struct DevJoin {
    ca_hash: String,
    /// A token for the agents that have no certificate yet (passed in the
    /// environment, not on the command line other users can read).
    token: Option<String>,
}

/// The local agents' names are `dev`'s own: an agent whose data dir holds no
/// certificate of this CA (first start, or a directory was removed) gets one through
/// a short-lived token, after any certificate an earlier one of that name
/// held is revoked.
fn dev_join(pki_dir: &std::path::Path, data_dir: &std::path::Path, n: u64) -> anyhow::Result<DevJoin> {
    let pki = paceline_hostmgr::pki::AgentPki::open(pki_dir).context("opening the agent CA")?;
    let mut fresh = 0u32;
    for i in 1..=n {
        let dir = data_dir.join("agents").join(format!("dev-{i}")).join("data");
        let identity = paceline_agent::identity::dir(&dir);
        // A certificate of another CA (the pki directory was removed) is of no use: join again.
        let ca = std::fs::read_to_string(identity.join("ca.crt")).unwrap_or_default();
        if ca != pki.ca_pem() && identity.exists() {
            std::fs::remove_dir_all(&identity).with_context(|| format!("removing {}", identity.display()))?;
        }
        if !identity.join("agent.crt").exists() {
            pki.revoke_host(&format!("dev-{i}")).context("revoking an old dev agent certificate")?;
            fresh += 1;
        }
    }
    let token = if fresh > 0 {
        let _ = pki.prune_tokens();
        let t = pki
            .create_token(std::time::Duration::from_secs(600), Some(fresh), "paceline dev's local agents")
            .context("making a join token for the local agents")?;
        Some(t.token)
    } else {
        None
    };
    Ok(DevJoin { ca_hash: pki.ca_hash(), token })
}

/// `dev`'s own refusal of an open API off loopback. The server's check
/// (`check_api_exposure`) would suggest `--insecure-no-auth`, which only
/// `paceline server` has; this says what works for `dev`.
fn check_dev_exposure(api_listen: SocketAddr, has_tokens: bool) -> anyhow::Result<()> {
    if has_tokens || api_listen.ip().is_loopback() {
        return Ok(());
    }
    anyhow::bail!(
        "--api-listen {api_listen} is not a loopback address and there is no tokens file: anyone who reaches it \
         would act as an admin. For `paceline dev`, give --tokens-file FILE (`paceline auth token --name me \
         --role admin` prints a token and its entry; see docs/operations.md, \"Authentication\"), or listen on \
         127.0.0.1 (the default, 127.0.0.1:7400)"
    )
}

/// Binds `addr` and lets it go, before anything is created: a port already
/// taken (another `dev`, most often) is one line naming the flag, not an
/// error after the CA, the store and the plugins are made. Another process
/// could still take the port in between; the server's own bind then fails
/// as before.
fn probe_listen(flag: &str, addr: SocketAddr) -> anyhow::Result<()> {
    match std::net::TcpListener::bind(addr) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => anyhow::bail!(
            "{flag} {addr}: the port is already in use (another `paceline dev`?); stop that process or choose \
             another address with {flag} HOST:PORT"
        ),
        Err(e) => anyhow::bail!("{flag} {addr}: cannot listen there: {e}"),
    }
}

/// First port of the range dev agents take task ports from: below Linux's
/// default ephemeral range (32768–60999), whose ports the kernel hands out
/// as the source port of outgoing connections, so a task given one could
/// find it taken.
const DEV_TASK_PORTS_FROM: u64 = 20_000;

/// Task port ranges of `n` dev agents, (first, last) each: 1,000 ports
/// apiece from [`DEV_TASK_PORTS_FROM`], all below `ephemeral_low` (the first
/// port of the kernel's ephemeral range); with many agents each gets fewer
/// ports so that they still fit.
fn dev_task_port_ranges(n: u64, ephemeral_low: u64) -> Vec<(u64, u64)> {
    let room = ephemeral_low.saturating_sub(DEV_TASK_PORTS_FROM).max(n);
    let each = (room / n.max(1)).clamp(1, 1_000);
    (0..n).map(|i| (DEV_TASK_PORTS_FROM + i * each, DEV_TASK_PORTS_FROM + (i + 1) * each - 1)).collect()
}

/// The first port of the kernel's ephemeral range (32768 where unknown).
fn ephemeral_low() -> u64 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// The tasks the job manager has on hosts (launching, running or being
/// stopped), and the jobs they belong to.
fn on_host_tasks(jobs: &paceline_jobmgr::JobManager) -> (usize, std::collections::BTreeMap<String, Vec<u32>>) {
    let mut by_job: std::collections::BTreeMap<String, Vec<u32>> = std::collections::BTreeMap::new();
    let runs = jobs.expected_runs();
    for r in &runs {
        if let Ok((job, instance, _)) = paceline_model::RunId::split(&r.run_id) {
            by_job.entry(job.to_string()).or_default().push(instance);
        }
    }
    (runs.len(), by_job)
}

/// The longest `dev` waits for its tasks to stop on exit, whatever their
/// grace periods: a supervisor (spark-e2e's, systemd's) that waits 30 s
/// before SIGKILL still sees `dev` exit on its own.
const STOP_TASKS_MAX: std::time::Duration = std::time::Duration::from_secs(25);

/// `dev`'s stop: kills every job that has tasks on its agents, as `job kill`
/// does (each task gets its own stop signal, then SIGKILL after its grace
/// period), and waits until they ended: the longest grace period plus 5 s,
/// at most [`STOP_TASKS_MAX`]. Prints what was stopped and what, if
/// anything, is still running when the wait ends.
async fn stop_tasks(jobs: &paceline_jobmgr::JobManager) {
    let (count, by_job) = on_host_tasks(jobs);
    if count == 0 {
        return;
    }
    println!(
        "paceline dev: stopping {count} task(s) of {} job(s) (--keep-tasks-on-exit leaves them running)",
        by_job.len()
    );
    let mut grace_secs = 0u32;
    for (id, instances) in &by_job {
        if let Ok(info) = jobs.get(id).await {
            for &i in instances {
                let g = info.config.task_spec(i).kill_grace_period_secs;
                // 0 is the agent's default grace (10 s).
                grace_secs = grace_secs.max(if g == 0 { 10 } else { g });
            }
        }
        if let Err(e) = jobs.kill(id, None).await {
            println!("  {id}: not stopped: {e}");
        }
    }
    let wait = std::time::Duration::from_secs(u64::from(grace_secs) + 5).min(STOP_TASKS_MAX);
    let deadline = tokio::time::Instant::now() + wait;
    let mut left = on_host_tasks(jobs);
    while left.0 > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        left = on_host_tasks(jobs);
    }
    for (id, instances) in &by_job {
        let still = left.1.get(id).map_or(0, Vec::len);
        println!("  stopped {} task(s) of {id}", instances.len().saturating_sub(still));
    }
    if left.0 > 0 {
        println!(
            "paceline dev: {} task(s) still running after {} s, left to the next `dev` on this data dir: {}",
            left.0,
            wait.as_secs(),
            left.1.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
}

pub fn dev(args: DevArgs, json_logs: bool) -> anyhow::Result<ExitCode> {
    // Refusals first: nothing is created for a start that cannot succeed.
    check_dev_exposure(args.api_listen, args.tokens_file.is_some())?;
    probe_listen("--api-listen", args.api_listen)?;
    if let Some(m) = args.metrics_listen {
        probe_listen("--metrics-listen", m)?;
    }
    let data_dir = std::path::absolute(&args.data_dir).context("resolving --data-dir")?;
    let hosts = match args.sim_hosts {
        Some(n) => HostsConfig::Sim {
            hosts: n,
            resources: paceline_model::Resources::new(8_000, 16_384, 100_000, 0),
            zones: 2,
        },
        None => HostsConfig::Agent,
    };
    let config = ServerConfig {
        data_dir: data_dir.clone(),
        api_listen: args.api_listen,
        agent_listen: args.agent_listen,
        hosts: hosts.clone(),
        heartbeat_timeout_ms: 5_000,
        agent_heartbeat_ms: 1_000,
        tokens_file: args.tokens_file.clone(),
        api_allowed_hosts: args.api_allowed_hosts.clone(),
        metrics_listen: args.metrics_listen,
        metrics_listen_public: args.metrics_listen_public,
        ..ServerConfig::default()
    };
    runtime()?.block_on(async move {
        let pki_dir = config.agent_pki_dir();
        let server = Server::start(config).await.context("starting the server")?;
        let mut agents = Agents(Vec::new());
        if hosts == HostsConfig::Agent {
            let exe = std::env::current_exe().context("finding the paceline binary")?;
            let n = args.agents.max(1) as u64;
            let join = dev_join(&pki_dir, &data_dir, n)?;
            let port_ranges = dev_task_port_ranges(n, ephemeral_low());
            let cores = std::thread::available_parallelism().map(|c| c.get() as u64).unwrap_or(1);
            let memory = paceline_agent::config::detect_memory_mib().unwrap_or(4_096);
            for i in 1..=n {
                let dir = data_dir.join("agents").join(format!("dev-{i}"));
                std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
                let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("agent.log"))?;
                let (first, last) = port_ranges.get((i - 1) as usize).copied().unwrap_or((0, 0));
                let child = Command::new(&exe)
                    .args([
                        "agent",
                        "--manager",
                        &format!("https://{}", server.agent_addr),
                        "--hostname",
                        &format!("dev-{i}"),
                    ])
                    .arg("--data-dir")
                    .arg(dir.join("data"))
                    .args(["--cpu-millis", &(cores * 1000 / n).max(1000).to_string()])
                    .args(["--memory-mib", &(memory / n).max(1024).to_string()])
                    .args(["--port-range", &format!("{first}-{last}")])
                    .args(["--attribute", &format!("zone=dev-{}", (i - 1) % 2)])
                    // Where a gang's members reach this agent's tasks (gang
                    // discovery): the host names dev-N resolve nowhere.
                    .args(["--attribute", "address=127.0.0.1"])
                    // dev runs tasks as the user who started it, programs
                    // from their home included (decision 0047); the agents
                    // say so in their log and as task_user=same-as-agent.
                    .args(["--task-user", "agent"])
                    // Measured use shows within a couple of seconds of a
                    // start, with the dev server's 1 s heartbeats.
                    .args(["--usage-interval-ms", "1000"])
                    // Every local agent would find the same GPUs: the first
                    // one alone takes them, or each device would be granted
                    // once per agent.
                    .args(if i > 1 { &["--gpus", "0"][..] } else { &[][..] })
                    .args(["--log-format", if json_logs { "json" } else { "text" }])
                    .arg("--stop-when-stdin-closes")
                    .args(["--ca-hash", &join.ca_hash])
                    .envs(join.token.as_ref().map(|t| ("PACELINE_JOIN_TOKEN", t.as_str())))
                    .stdin(Stdio::piped())
                    // A process group of its own: Ctrl-C in the terminal
                    // (SIGINT to the foreground group) reaches `dev` alone,
                    // which stops the tasks through the agents before it stops
                    // them; they still die with `dev` through the pipe.
                    .process_group(0)
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .context("starting a local agent")?;
                agents.0.push(child);
            }
        }
        println!("paceline dev: API on http://{}", server.api_addr);
        println!("  web UI: http://{}/ui/", server.api_addr);
        println!("  export PACELINE_SERVER=http://{}", server.api_addr);
        println!("  data dir {} · pool /default", data_dir.display());
        match server.metrics_addr {
            Some(m) => println!("  metrics: http://{m}/metrics (no token) and http://{}/metrics", server.api_addr),
            None => println!("  metrics: http://{}/metrics", server.api_addr),
        }
        match args.sim_hosts {
            Some(n) => println!("  {n} simulated hosts"),
            None => println!("  {} local agents (logs in {}/agents/*/agent.log)", agents.0.len(), data_dir.display()),
        }
        match &args.tokens_file {
            Some(t) => println!("  tokens required (from {})", t.display()),
            None => println!("  open API: any caller acts as admin (--tokens-file to require tokens)"),
        }
        println!("  try: {}", super::example::dev_hint(std::env::current_dir().ok().as_deref()));
        until_signal().await;
        if hosts == HostsConfig::Agent {
            if args.keep_tasks_on_exit {
                let (tasks, jobs) = on_host_tasks(&server.cluster.jobs);
                if tasks > 0 {
                    println!(
                        "paceline dev: left {tasks} task(s) of {} job(s) running (--keep-tasks-on-exit); the next \
                         `paceline dev --data-dir {}` takes them over",
                        jobs.len(),
                        data_dir.display()
                    );
                }
            } else {
                stop_tasks(&server.cluster.jobs).await;
            }
        }
        drop(agents);
        server.shutdown().await;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 43: dev agents took task ports from 31000 on, the third agent
    /// on inside Linux's ephemeral range (32768–60999).
    #[test]
    fn dev_task_ports_stay_below_the_ephemeral_range() {
        for n in [1, 2, 3, 8, 12, 40] {
            let ranges = dev_task_port_ranges(n, 32_768);
            assert_eq!(ranges.len() as u64, n);
            for (i, (first, last)) in ranges.iter().enumerate() {
                assert!(*first >= DEV_TASK_PORTS_FROM && first <= last && *last < 32_768, "{n} agents: {ranges:?}");
                if let Some((next, _)) = ranges.get(i + 1) {
                    assert!(last < next, "ranges do not overlap: {ranges:?}");
                }
            }
        }
        assert_eq!(dev_task_port_ranges(2, 32_768), vec![(20_000, 20_999), (21_000, 21_999)]);
        // A kernel with a lower ephemeral range: the agents share what is left below it.
        assert!(dev_task_port_ranges(4, 24_000).iter().all(|(_, last)| *last < 24_000));
    }

    #[test]
    fn dev_refuses_a_taken_port_naming_the_flag() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = taken.local_addr().expect("addr");
        let e = probe_listen("--api-listen", addr).expect_err("taken").to_string();
        assert!(e.contains("--api-listen") && e.contains("already in use") && e.contains(&addr.to_string()), "{e}");
        drop(taken);
        probe_listen("--api-listen", addr).expect("free again");
    }
}
