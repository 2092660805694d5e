//! `paceline bench server`: the pipeline as a user gets it. A real
//! `paceline server` (its configuration file's defaults: SQLite in its data
//! directory, or Cassandra with `--store`, the durable plugin registry with the built-in Wasm policies,
//! the API with its auth layer, the loop's period) over simulated hosts
//! (`hosts: {provider: sim}`); clients submit jobs through the gRPC API with
//! a bearer token, spread over a tree of pools, and the bench times until
//! every task is launched. Figures only, never a test.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use futures::StreamExt;
use paceline_model::Resources;
use paceline_model::job::{JobConfig, JobKind};
use paceline_model::pool::{PerKind, PoolSpec};
use paceline_model::task::TaskSpec;
use paceline_proto::v1 as pb;
use pb::job_service_client::JobServiceClient;
use pb::pool_service_client::PoolServiceClient;

use crate::store_records::{self, Tally};

/// Arguments of `bench server`.
#[derive(Debug, Args)]
pub struct ServerBenchArgs {
    /// Jobs submitted.
    #[arg(long, default_value_t = 1_000)]
    jobs: u32,
    /// Instances per job.
    #[arg(long, default_value_t = 100)]
    instances: u32,
    /// Simulated hosts (8 cores, or enough for the work, as `bench pipeline` sizes them).
    #[arg(long, default_value_t = 10_000)]
    hosts: usize,
    /// Teams: leaf pools under two organisations, each reserving its share
    /// of the cluster; jobs go to them in turn.
    #[arg(long, default_value_t = 10)]
    teams: u32,
    /// Clients submitting at once, each its own stream of CreateJob calls.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Keep the load on this long: rounds of the same work (submit, wait until
    /// every task is launched, kill every job, wait until every task is gone)
    /// until this many seconds have passed. 0: one round.
    #[arg(long, default_value_t = 0, value_name = "SECS")]
    duration: u64,
    /// Campaign on this ZooKeeper (`host:port[,…]`) for every role, as a
    /// highly available `paceline server` does, before the load starts, and
    /// report every change of leadership during it (a session that expires
    /// or a connection declared lost because the leader was busy).
    #[arg(long, value_name = "CONNECT")]
    zookeeper: Option<String>,
    /// ZooKeeper digest user (with --zookeeper).
    #[arg(long, env = "PACELINE_ZOOKEEPER_USER", requires = "zookeeper")]
    zookeeper_user: Option<String>,
    /// File holding that user's password (with --zookeeper).
    #[arg(long, env = "PACELINE_ZOOKEEPER_PASSWORD_FILE", requires = "zookeeper")]
    zookeeper_password_file: Option<std::path::PathBuf>,
    /// Session timeout asked of ZooKeeper (default: the server's default).
    #[arg(long, value_name = "MS", requires = "zookeeper")]
    session_timeout_ms: Option<u64>,
    /// The server's store: `sqlite` (the default: a file in its data
    /// directory), `sqlite:PATH`, or `cassandra:HOST:PORT[,HOST:PORT…][/KEYSPACE]`
    /// with the login, TLS, replication and consistency of the
    /// `PACELINE_CASSANDRA_*` variables `deploy/cassandra/cassandra.sh env`
    /// prints. Without a keyspace, one of its own (`paceline_bench_sSECONDS`),
    /// dropped at the end; a keyspace named must not hold this bench's pools.
    #[arg(long, default_value = "sqlite", value_name = "STORE")]
    store: String,
}

/// The store `--store` names: `None` for the server's default (SQLite in
/// its data directory), and whether the keyspace is the bench's own.
fn bench_store(arg: &str) -> anyhow::Result<(Option<paceline_storage::config::StorageConfig>, bool)> {
    use paceline_storage::config::StorageConfig;
    if arg == "sqlite" {
        return Ok((None, false));
    }
    let own_keyspace = arg.starts_with("cassandra:") && !arg.contains('/');
    let url = if own_keyspace {
        let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        format!("{arg}/paceline_bench_s{secs}")
    } else {
        arg.to_string()
    };
    let store = StorageConfig::from_url(&url).map_err(|e| anyhow::anyhow!("--store {e}"))?;
    Ok((Some(store), own_keyspace))
}

/// Every setting of the store, printed with the figures.
fn describe_store(store: &Option<paceline_storage::config::StorageConfig>) -> String {
    use paceline_storage::config::StorageConfig;
    match store {
        None => "SQLite in its data dir (the default)".to_string(),
        Some(StorageConfig::Sqlite(c)) => format!("SQLite at {}", c.path.display()),
        Some(StorageConfig::Cassandra(c)) => format!(
            "Cassandra: contact points {}, keyspace {}, replication {} (when created), consistency {:?}, login {}, TLS {}, retries {}",
            c.contact_points.join(","),
            c.keyspace,
            c.replication
                .iter()
                .map(|(k, v)| format!("{k}={}", serde_yaml::to_string(v).unwrap_or_default().trim()))
                .collect::<Vec<_>>()
                .join(" "),
            c.consistency,
            c.username.as_deref().unwrap_or("none"),
            if c.tls.is_some() { "on" } else { "off" },
            c.retries,
        ),
    }
}

use crate::hosts::PIPELINE_TASK as TASK;

/// An admin token, as `paceline auth token --role admin` makes one, and the
/// tokens file in `dir` that admits it: what the bench's clients carry.
pub(crate) fn admin_token(dir: &std::path::Path) -> anyhow::Result<(String, std::path::PathBuf)> {
    let mut bytes = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let tokens = dir.join("tokens.yaml");
    std::fs::write(
        &tokens,
        format!(
            "version: 1\nprincipals:\n  - name: bench\n    role: admin\n    token_sha256: {}\n",
            paceline_api::auth::token_hash_hex(&token)
        ),
    )?;
    Ok((token, tokens))
}

/// Runs `bench server`.
pub fn run(args: ServerBenchArgs) -> anyhow::Result<ExitCode> {
    if cfg!(debug_assertions) {
        println!("(DEBUG build - figures not meaningful; use --release)");
    }
    let total = u64::from(args.jobs) * u64::from(args.instances);
    let host = crate::hosts::size_hosts(total, args.hosts, None)?;
    let cores = host.cpu_millis / 1_000;
    let teams = args.teams.max(1);
    let dir = tempfile::tempdir()?;
    let (token, tokens) = admin_token(dir.path())?;
    // One principal submits the whole load: its quotas (issue 44) are
    // raised to the load when the defaults would refuse it, so the checks
    // still run on every create, as they do in a server.
    let defaults = paceline_api::quota::QuotaLimits::default();
    let quota_jobs = defaults.max_live_jobs_per_principal.max(u64::from(args.jobs));
    let quota_tasks = defaults.max_live_tasks_per_principal.max(total);
    let yaml = format!(
        "data_dir: {}\napi_listen: 127.0.0.1:0\nagent_listen: 127.0.0.1:0\ntokens_file: {}\nhosts: {{provider: sim, hosts: {}, resources: {{cpu_millis: {}, memory_mib: {}, disk_mib: {}, gpus: 0}}, zones: 2}}\nquotas: {{max_live_jobs_per_principal: {quota_jobs}, max_live_tasks_per_principal: {quota_tasks}}}\n",
        dir.path().join("data").display(),
        tokens.display(),
        args.hosts,
        host.cpu_millis,
        host.memory_mib,
        host.disk_mib,
    );
    let mut config: paceline_server::ServerConfig = serde_yaml::from_str(&yaml).context("the bench's server config")?;
    let (store, own_keyspace) = bench_store(&args.store)?;
    let store_desc = describe_store(&store);
    config.storage = store.clone();
    let engine = paceline_placement::EngineConfig::default();
    println!(
        "a real paceline server: its defaults (durable plugin registry, built-in Wasm policies, engine batch {} / {} hosts per lease, a step every {} ms, API auth on: every call carries an admin token)",
        engine.batch_size, engine.max_hosts_per_lease, config.loop_interval_ms
    );
    println!("store: {store_desc}");
    println!(
        "its config beyond the defaults: hosts: {{provider: sim, hosts: {}, {} cores / {} GiB each, zones: 2}}; API on 127.0.0.1; pools: 2 organisations, {teams} teams each reserving 1/{teams} of the cluster",
        args.hosts,
        cores,
        host.memory_mib / 1_024
    );
    if quota_jobs != defaults.max_live_jobs_per_principal || quota_tasks != defaults.max_live_tasks_per_principal {
        println!(
            "quotas raised to the load (one principal submits it all): {quota_jobs} live jobs, {quota_tasks} live tasks per principal (defaults {}, {})",
            defaults.max_live_jobs_per_principal, defaults.max_live_tasks_per_principal
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let data = dir.path().join("data");
    let result = runtime.block_on(bench(args, config, token, host, total, &data));
    if own_keyspace && let Some(paceline_storage::config::StorageConfig::Cassandra(c)) = &store {
        // The bench's own keyspace: dropped whatever the outcome.
        if let Err(e) = runtime.block_on(store_records::drop_keyspace(c)) {
            println!("(keyspace {} not dropped: {e})", c.keyspace);
        }
    }
    result?;
    Ok(ExitCode::SUCCESS)
}

async fn bench(
    args: ServerBenchArgs,
    config: paceline_server::ServerConfig,
    token: String,
    host: Resources,
    total: u64,
    data: &std::path::Path,
) -> anyhow::Result<()> {
    let cassandra = match &config.storage {
        Some(paceline_storage::config::StorageConfig::Cassandra(c)) => Some((**c).clone()),
        _ => None,
    };
    let server = paceline_server::Server::start(config).await.context("starting the server")?;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.api_addr))?.connect().await?;
    let bearer = paceline_proto::bearer::Bearer::new(Some(&token))?;
    let api = tonic::service::interceptor::InterceptedService::new(channel, bearer);

    // The pool tree: /org-a and /org-b, the teams alternating under them,
    // each team reserving its share of the cluster (what entitlement divides).
    let teams = args.teams.max(1);
    let capacity = |per_host: u64| per_host.saturating_mul(args.hosts as u64);
    let share = |per_host: u64| capacity(per_host) / u64::from(teams);
    let mut pools = PoolServiceClient::new(api.clone());
    let mut leaves = Vec::new();
    for org in ["/org-a", "/org-b"] {
        let half = |per_host: u64| capacity(per_host) / 2;
        let spec = PoolSpec {
            reservation: PerKind {
                cpu: half(host.cpu_millis),
                memory: half(host.memory_mib),
                disk: half(host.disk_mib),
                gpu: 0,
            },
            ..PoolSpec::default()
        };
        pools
            .create_pool(pb::CreatePoolRequest {
                path: org.into(),
                spec: Some(paceline_api::pools::pool_spec_pb(&spec)),
            })
            .await
            .with_context(|| format!("creating {org}"))?;
    }
    for t in 0..teams {
        let path = format!("/org-{}/team-{t}", if t % 2 == 0 { 'a' } else { 'b' });
        let spec = PoolSpec {
            reservation: PerKind {
                cpu: share(host.cpu_millis),
                memory: share(host.memory_mib),
                disk: share(host.disk_mib),
                gpu: 0,
            },
            ..PoolSpec::default()
        };
        pools
            .create_pool(pb::CreatePoolRequest {
                path: path.clone(),
                spec: Some(paceline_api::pools::pool_spec_pb(&spec)),
            })
            .await
            .with_context(|| format!("creating {path}"))?;
        leaves.push(path);
    }

    // One client's calls in a row on an idle server: what a CLI command or
    // a script waits per call (the load below hides it behind 32 clients).
    // Answers of different sizes and a refusal leave the server in
    // different writes (a larger answer's trailers in a write of their own).
    let calls = [
        ("GetPool of a team (a small answer)", Some(leaves[0].clone())),
        ("ListPools (the whole tree)", None),
        ("GetPool of no pool (refused NOT_FOUND)", Some("/no-such-pool".to_string())),
    ];
    for (what, path) in calls {
        let trips = round_trips(&pools, path.as_deref(), 500).await?;
        let pct = |p: f64| trips.get(((trips.len() as f64 - 1.0) * p) as usize).copied().unwrap_or_default();
        println!(
            "API round trip, one client, {} calls in a row on the idle server, {what}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            trips.len(),
            pct(0.50).as_secs_f64() * 1e3,
            pct(0.99).as_secs_f64() * 1e3,
            trips.last().copied().unwrap_or_default().as_secs_f64() * 1e3
        );
    }

    let leaves = Arc::new(leaves);
    let leadership = match &args.zookeeper {
        Some(connect) => Some(LeadershipWatch::start(connect, &args).await?),
        None => None,
    };
    let began = Instant::now();
    let mut rates = Vec::new();
    // Records/s of round 1's create and of its kill, for the store's share below.
    let mut first_rates: Vec<(&str, f64)> = Vec::new();
    for round in 0.. {
        let written = Tally::now(&server);
        let (submitted, launched_after, ids) = submit_round(&api, &server, &leaves, &args, round, total).await?;
        let created = Tally::now(&server).since(&written);
        let rate = total as f64 / launched_after.as_secs_f64();
        println!(
            "server: {total} tasks ({} jobs x {}) through the API onto {} simulated hosts: submitted in {:.0} ms, all launched after {:.0} ms = {:.0} tasks/s{}",
            args.jobs,
            args.instances,
            args.hosts,
            submitted.as_secs_f64() * 1e3,
            launched_after.as_secs_f64() * 1e3,
            rate,
            if args.duration > 0 { format!(" (round {})", round + 1) } else { String::new() }
        );
        println!("  store, while they launched: {}", created.describe(total, launched_after));
        if round == 0 {
            first_rates.push(("create", store_records::rate(created.total(), launched_after)));
        }
        rates.push(rate);
        if began.elapsed() >= Duration::from_secs(args.duration) {
            break;
        }
        let written = Tally::now(&server);
        let (answered, killed) = kill_round(&api, &server, &args, ids).await?;
        let kill_records = Tally::now(&server).since(&written);
        println!(
            "  killed every job of round {} in {:.0} ms (every kill call answered after {:.0} ms)",
            round + 1,
            killed.as_secs_f64() * 1e3,
            answered.as_secs_f64() * 1e3
        );
        println!("  store, while they were killed: {}", kill_records.describe(total, killed));
        if round == 0 {
            first_rates.push(("kill", store_records::rate(kill_records.total(), killed)));
        }
    }
    if rates.len() > 1 {
        let min = rates.iter().copied().fold(f64::INFINITY, f64::min);
        let max = rates.iter().copied().fold(0.0, f64::max);
        println!("{} rounds in {:.0} s: {min:.0}–{max:.0} tasks/s", rates.len(), began.elapsed().as_secs_f64());
    }
    let store_size = match args.store.split_once(':') {
        Some(("cassandra", _)) => "in Cassandra, not measured".to_string(),
        Some(("sqlite", path)) => {
            format!("{:.1} MiB", std::fs::metadata(path).map_or(0, |m| m.len()) as f64 / (1 << 20) as f64)
        }
        _ => format!("{:.1} MiB", dir_size(data) as f64 / (1 << 20) as f64),
    };
    println!(
        "peak RSS (this process: server, simulated hosts and clients) {} MiB; store {store_size}",
        peak_rss_mib().unwrap_or(0),
    );
    store_share(&args.store, cassandra.as_ref(), data, &first_rates).await;
    if let Some(watch) = leadership {
        let changes = watch.finish(began.elapsed()).await;
        if changes > 0 {
            server.shutdown().await;
            bail!("leadership changed {changes} times under load");
        }
    }
    server.shutdown().await;
    Ok(())
}

/// The store's own limit in the same run, and round 1's records/s as a
/// share of it (issue 47 counts every record a task costs against the
/// store's task compare-and-sets per second): on SQLite a fresh file beside
/// the server's, on Cassandra a keyspace of its own on the server's cluster.
async fn store_share(
    store: &str,
    cassandra: Option<&paceline_storage::CassandraConfig>,
    data: &std::path::Path,
    first_rates: &[(&str, f64)],
) {
    let measured = match cassandra {
        Some(c) => store_records::cassandra_limit(c).await.map(|(limit, keyspace)| {
            let how = format!(
                "`bench storage` on the server's Cassandra, keyspace {keyspace} (dropped after), its settings otherwise, \
                 task runtime compare-and-sets in batches of 1,000"
            );
            (limit, how)
        }),
        None => {
            // Beside the server's own file: the same disk.
            let dir = match store.strip_prefix("sqlite:") {
                Some(path) => {
                    std::path::Path::new(path).parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(data)
                }
                None => data.parent().unwrap_or(data),
            };
            store_records::sqlite_limit(dir).await.map(|limit| {
                let how = "`bench storage`: a fresh SQLite file in the same directory, task runtime compare-and-sets \
                           in batches of 1,000";
                (limit, how.to_string())
            })
        }
    };
    match measured {
        Ok((limit, how)) => {
            let shares: Vec<String> = first_rates
                .iter()
                .map(|(phase, r)| {
                    format!("round 1's {phase} wrote {r:.0} records/s = {:.0} % of it", 100.0 * r / limit)
                })
                .collect();
            println!("the store alone, measured now ({how}): {limit:.0}/s; {}", shares.join("; "));
        }
        Err(e) => println!("the store alone: not measured ({e:#})"),
    }
}

type Api = tonic::service::interceptor::InterceptedService<tonic::transport::Channel, paceline_proto::bearer::Bearer>;

/// `calls` calls in a row, each timed: GetPool of `path`, or ListPools
/// without one; their times, sorted. NOT_FOUND counts as an answer (a path
/// that names no pool); any other refusal ends the bench.
async fn round_trips(
    pools: &PoolServiceClient<Api>,
    path: Option<&str>,
    calls: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut pools = pools.clone();
    let mut trips = Vec::with_capacity(calls);
    for _ in 0..calls {
        let sent = Instant::now();
        let answer = match path {
            Some(path) => pools.get_pool(pb::GetPoolRequest { path: path.into() }).await.map(drop),
            None => pools.list_pools(pb::ListPoolsRequest {}).await.map(drop),
        };
        match answer {
            Ok(()) => {}
            Err(status) if status.code() == tonic::Code::NotFound => {}
            Err(status) => bail!("{}: {status}", path.unwrap_or("ListPools")),
        }
        trips.push(sent.elapsed());
    }
    trips.sort_unstable();
    Ok(trips)
}

/// One round: every job submitted by the clients; returns (all submitted, all launched)
/// since the round began, and the jobs' ids.
async fn submit_round(
    api: &Api,
    server: &paceline_server::Server,
    leaves: &Arc<Vec<String>>,
    args: &ServerBenchArgs,
    round: u32,
    total: u64,
) -> anyhow::Result<(Duration, Duration, Vec<String>)> {
    let instances = args.instances;
    let wall = Instant::now();
    let before = server.cluster.hosts.run_count().context("the server's host manager counts no runs")? as u64;
    let clients = {
        let (api, leaves, jobs, clients) = (api.clone(), leaves.clone(), args.jobs, args.clients.max(1));
        tokio::spawn(async move {
            futures::stream::iter(0..jobs)
                .map(|j| {
                    let mut client = JobServiceClient::new(api.clone());
                    let pool = leaves[j as usize % leaves.len()].clone();
                    async move {
                        let spec = JobConfig {
                            name: format!("bench-{round}-{j}"),
                            pool,
                            kind: JobKind::Batch,
                            instance_count: instances,
                            default_task: TaskSpec { command: "work".into(), resources: TASK, ..TaskSpec::default() },
                            ..JobConfig::default()
                        };
                        let request = pb::CreateJobRequest { spec: Some(paceline_api::convert::job_spec_pb(&spec)) };
                        client
                            .create_job(request)
                            .await
                            .map(|r| r.into_inner().id)
                            .map_err(|e| anyhow::anyhow!("job {j}: {e}"))
                    }
                })
                .buffer_unordered(clients)
                .collect::<Vec<_>>()
                .await
        })
    };
    let mut submitted = None;
    loop {
        let launched = (server.cluster.hosts.run_count().unwrap_or(0) as u64).saturating_sub(before);
        if launched >= total {
            break;
        }
        if submitted.is_none() && clients.is_finished() {
            submitted = Some(wall.elapsed());
        }
        if wall.elapsed() > Duration::from_secs(600) {
            bail!("gave up after 600 s with {launched} of {total} launched");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let launched_after = wall.elapsed();
    let ids = clients.await?.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    Ok((submitted.unwrap_or(launched_after), launched_after, ids))
}

/// Kills `ids` through the API and waits until the hosts run nothing.
/// Returns when the last kill call was answered and when the hosts were empty.
async fn kill_round(
    api: &Api,
    server: &paceline_server::Server,
    args: &ServerBenchArgs,
    ids: Vec<String>,
) -> anyhow::Result<(Duration, Duration)> {
    let wall = Instant::now();
    let results =
        futures::stream::iter(ids)
            .map(|id| {
                let mut client = JobServiceClient::new(api.clone());
                async move {
                    client.kill_job(pb::KillJobRequest { id: id.clone(), instances: Vec::new() }).await.map(|_| ())
                }
            })
            .buffer_unordered(args.clients.max(1))
            .collect::<Vec<_>>()
            .await;
    for r in results {
        r.context("killing a job")?;
    }
    let answered = wall.elapsed();
    while server.cluster.hosts.run_count().unwrap_or(0) > 0 {
        if wall.elapsed() > Duration::from_secs(600) {
            bail!("the round's tasks still run 600 s after their jobs were killed");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok((answered, wall.elapsed()))
}

/// The bench's place in a ZooKeeper election, as a highly available server's: the
/// primary role first, the others once it leads, each a membership (a session) of its
/// own; counts every moment a role stops being led.
struct LeadershipWatch {
    memberships: Vec<Arc<dyn paceline_membership::Membership>>,
    changes: Arc<std::sync::atomic::AtomicU64>,
    watchers: Vec<tokio::task::JoinHandle<()>>,
    timeout: Duration,
}

impl LeadershipWatch {
    async fn start(connect: &str, args: &ServerBenchArgs) -> anyhow::Result<LeadershipWatch> {
        use paceline_membership::{Leadership, MemberInfo, MembershipConfig, Role, ZooKeeperAuthConfig};
        let timeout = Duration::from_millis(
            args.session_timeout_ms
                .unwrap_or(paceline_membership::zookeeper::DEFAULT_SESSION_TIMEOUT.as_millis() as u64),
        );
        let auth = match (&args.zookeeper_user, &args.zookeeper_password_file) {
            (Some(user), Some(file)) => Some(ZooKeeperAuthConfig {
                scheme: Default::default(),
                user: user.clone(),
                password_file: Some(file.clone()),
                password_env: None,
            }),
            (None, None) => None,
            _ => bail!("--zookeeper-user and --zookeeper-password-file go together"),
        };
        let config = MembershipConfig::ZooKeeper {
            connect: connect.to_owned(),
            cluster: format!("bench-{}", std::process::id()),
            session_timeout_ms: timeout.as_millis() as u64,
            auth,
        };
        let member = MemberInfo {
            id: "bench".into(),
            api_addr: "127.0.0.1:0".into(),
            agent_addr: String::new(),
            roles: Role::ALL.to_vec(),
        };
        let changes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut memberships = Vec::new();
        let mut watchers = Vec::new();
        for roles in [vec![Role::Jobmgr], vec![Role::Resmgr, Role::Hostmgr, Role::Placement]] {
            let membership = paceline_membership::from_config(&config, member.clone(), roles.clone())?;
            for role in roles {
                let mut rx = membership.watch(role);
                tokio::time::timeout(Duration::from_secs(30), rx.wait_for(Leadership::is_leader))
                    .await
                    .with_context(|| format!("not leading {role} on ZooKeeper {connect} within 30 s"))??;
                let changes = changes.clone();
                watchers.push(tokio::spawn(async move {
                    loop {
                        if rx.wait_for(|l| !l.is_leader()).await.is_err() {
                            return;
                        }
                        changes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        eprintln!("LEADERSHIP CHANGE: stopped leading {role} under load");
                        if rx.wait_for(Leadership::is_leader).await.is_err() {
                            return;
                        }
                    }
                }));
            }
            memberships.push(membership);
        }
        println!(
            "leading every role on ZooKeeper {connect} (session timeout asked {} ms, two sessions as a server holds); watching for changes under load",
            timeout.as_millis()
        );
        Ok(LeadershipWatch { memberships, changes, watchers, timeout })
    }

    /// Stops watching, leaves the election; the number of changes seen.
    async fn finish(self, load: Duration) -> u64 {
        for w in &self.watchers {
            w.abort();
        }
        let changes = self.changes.load(std::sync::atomic::Ordering::SeqCst);
        println!(
            "leadership under {:.0} s of load (session timeout {} ms): {changes} changes",
            load.as_secs_f64(),
            self.timeout.as_millis()
        );
        for m in self.memberships {
            m.shutdown().await;
        }
        changes
    }
}

/// Bytes under `dir`, recursively (0 where unreadable).
fn dir_size(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .map(|e| match e.metadata() {
                Ok(m) if m.is_dir() => dir_size(&e.path()),
                Ok(m) => m.len(),
                Err(_) => 0,
            })
            .sum()
    })
}

/// Peak resident memory of this process so far (VmHWM), MiB.
fn peak_rss_mib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1_024)
}
