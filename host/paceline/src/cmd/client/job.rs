//! `paceline job …`: create, read, list, update, kill, restart and delete
//! jobs, and control their rolling updates.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use paceline_api::convert;
use paceline_model::job::JobConfig;
use paceline_proto::v1 as pb;
use pb::job_service_client::JobServiceClient;
use serde_json::json;

use super::output::{self, Table, emit, fields, or_dash};
use super::{ClientOpts, RpcError, bad_input, block_on, connect, parse_enum, render};

/// `paceline job`.
#[derive(Debug, Args)]
pub struct JobArgs {
    #[command(flatten)]
    opts: ClientOpts,
    #[command(subcommand)]
    cmd: JobCommand,
}

/// Job commands.
#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Create a job from a YAML spec (checked locally first); prints its id.
    /// Without `owner` in the spec, the job is the caller's: the token's
    /// principal, or the OS user on a cluster without tokens.
    Create {
        /// The job spec (YAML; see examples/).
        file: PathBuf,
    },
    /// Create a job from a YAML spec, as `create` does; with `--wait`, follow
    /// it: a batch job to its end, any other kind until every instance runs
    /// (and passes its health check). The exit code is the outcome: 0 the job
    /// succeeded (or is up), 4 it ended otherwise (failed, killed), 5 the
    /// wait timed out (the job goes on).
    Run {
        /// The job spec (YAML; see examples/).
        file: PathBuf,
        /// Follow the job and exit with its outcome.
        #[arg(long)]
        wait: bool,
        /// Give up waiting after this many seconds (0: wait as long as it takes).
        #[arg(long, default_value_t = 0, value_name = "SECS", requires = "wait")]
        timeout: u64,
    },
    /// Set a job's instance count: a rolling update of its current spec with
    /// only the count changed (as the web UI's scale does); instances beyond
    /// the count are stopped, new ones wait while the pool has no room.
    Scale {
        /// Job id.
        id: String,
        /// The new instance count.
        instances: u32,
    },
    /// Show one job: spec, status and update.
    Get {
        /// Job id.
        id: String,
        /// Show the spec of this config version (1 to the job's latest;
        /// `job get ID` shows the latest as `latest config version`).
        #[arg(long = "config-version", value_name = "N")]
        config_version: Option<u64>,
    },
    /// List jobs.
    List {
        /// Only jobs in this state (repeatable): pending, running, succeeded, …
        #[arg(long = "state", value_name = "STATE")]
        states: Vec<String>,
        /// Only jobs of this owner.
        #[arg(long)]
        owner: Option<String>,
        /// Only jobs under this pool path.
        #[arg(long)]
        pool: Option<String>,
        /// Only jobs whose name contains this text.
        #[arg(long)]
        name: Option<String>,
    },
    /// Kill a job, or some of its instances.
    Kill {
        /// Job id.
        id: String,
        /// Only these instances (comma-separated).
        #[arg(long, value_delimiter = ',')]
        instances: Vec<u32>,
    },
    /// Grow a running job by COUNT instances at its current spec (the
    /// `AddInstances` call); they wait while the pool has no room.
    Grow {
        /// Job id.
        id: String,
        /// How many instances to add.
        count: u32,
    },
    /// Stop chosen instances for good (the `RemoveInstances` call): the
    /// job keeps running with the others and its instance count.
    Remove {
        /// Job id.
        id: String,
        /// The instances to remove (comma-separated).
        #[arg(long, value_delimiter = ',', required = true)]
        instances: Vec<u32>,
    },
    /// Renew a job's owner lease (`owner_lease_secs` in its spec; the
    /// `RenewOwnerLease` call): a job whose lease is not renewed in time is
    /// killed. For scripts that own a job: renew every third of the lease.
    RenewLease {
        /// Job id.
        id: String,
    },
    /// Restart a job's instances in rolling batches.
    Restart {
        /// Job id.
        id: String,
        /// Only these instances (comma-separated).
        #[arg(long, value_delimiter = ',')]
        instances: Vec<u32>,
        /// Instances per batch; 0 uses the job's update batch size.
        #[arg(long, default_value_t = 0)]
        batch_size: u32,
    },
    /// Replace a job's spec through a rolling update.
    Update {
        /// Job id.
        id: String,
        /// The new job spec (YAML).
        file: PathBuf,
        /// Only show what would change.
        #[arg(long)]
        dry_run: bool,
        /// Instances per batch for this update.
        #[arg(long)]
        batch_size: Option<u32>,
        /// Failed instances after which this update stops.
        #[arg(long)]
        max_failures: Option<u32>,
        /// Create the update paused (resume with `job resume`).
        #[arg(long)]
        paused: bool,
    },
    /// Delete a terminal job and its history.
    Delete {
        /// Job id.
        id: String,
    },
    /// Pause the job's running update.
    Pause {
        /// Job id.
        id: String,
    },
    /// Resume the job's paused update.
    Resume {
        /// Job id.
        id: String,
    },
    /// Abort the job's update, leaving instances where they are.
    Abort {
        /// Job id.
        id: String,
    },
    /// Show a job's events, most recently seen first: scheduled, deferred
    /// (with the pending reason), preempted, lost, plugin fallbacks, kills,
    /// failures, the job's end; repeats are one row with a count.
    Events {
        /// Job id.
        id: String,
        /// Only this task instance's events.
        #[arg(long, value_name = "N")]
        task: Option<u32>,
        /// Print JSON (the same as `-o json`).
        #[arg(long)]
        json: bool,
    },
}

/// Runs a job command.
pub fn run(args: JobArgs) -> anyhow::Result<std::process::ExitCode> {
    block_on(exec(args.opts, args.cmd))
}

/// How a followed job (`job run --wait`) came out, as an error whose exit
/// code says which ([`super::exit_code`]).
#[derive(Debug, thiserror::Error)]
pub enum Outcome {
    /// The job ended without succeeding.
    #[error("job {id} ended {state}")]
    Ended {
        /// The job.
        id: String,
        /// Its end state (`failed`, `killed`).
        state: String,
    },
    /// `--timeout` ran out first; the job goes on.
    #[error("job {id} is still {state} after {secs} s (it goes on; `paceline job get {id}`)")]
    TimedOut {
        /// The job.
        id: String,
        /// Its state when the wait ended.
        state: String,
        /// The timeout.
        secs: u64,
    },
}

impl Outcome {
    /// The CLI's exit code for it.
    pub fn exit_code(&self) -> u8 {
        match self {
            Outcome::Ended { .. } => 4,
            Outcome::TimedOut { .. } => 5,
        }
    }
}

/// Reads a job file and checks it as the server will, so mistakes are
/// reported with the file's name and line before anything is sent.
///
/// `owner` may be left out: `job create` then fills it in (see
/// [`default_owner`]) and `job update` keeps the job's.
pub fn load_job(path: &Path) -> anyhow::Result<JobConfig> {
    let bytes = super::read_file(path)?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| bad_input(format!("{}: invalid job spec: not UTF-8 text: {e}", path.display())))?;
    // The server's reader, with its size and nesting limits, so a file it
    // would refuse is refused here first.
    let config = paceline_api::jobfile::parse(text)
        .map_err(|e| bad_input(format!("{}: invalid job spec: {e}", path.display())))?;
    let mut checked = config.clone();
    if checked.owner.is_empty() {
        checked.owner = "-".into();
    }
    checked.validate().map_err(|e| bad_input(format!("{}: invalid job spec: {e}", path.display())))?;
    Ok(config)
}

/// The owner of a job whose spec names none. With a token the server knows
/// who calls and uses the principal's name (None here); without one (an
/// open cluster) it is the OS user running the CLI.
pub fn default_owner(token: Option<&str>) -> Option<String> {
    if token.is_some_and(|t| !t.trim().is_empty()) {
        return None;
    }
    ["USER", "LOGNAME"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .map(|u| u.trim().to_owned())
        .find(|u| !u.is_empty())
        .or_else(|| nix::unistd::User::from_uid(nix::unistd::getuid()).ok().flatten().map(|u| u.name))
}

async fn exec(opts: ClientOpts, cmd: JobCommand) -> anyhow::Result<()> {
    // Everything local first: a bad file or filter never opens a connection.
    let request = Request::check(cmd)?;
    let api = connect(&opts).await?;
    let mut client = JobServiceClient::new(api.clone());
    let out = opts.output;
    match request {
        Request::Run { config, wait: Some(timeout) } => {
            let batch = config.kind == paceline_model::job::JobKind::Batch;
            let created = create(&mut client, &opts, config).await?;
            follow(&mut client, api, out, &created.id, batch, timeout).await
        }
        Request::Create(config) | Request::Run { config, wait: None } => {
            let created = create(&mut client, &opts, config).await?;
            let pb::CreateJobResponse { id, owner, warnings } = created;
            emit(out, &json!({ "id": id, "owner": owner, "warnings": warnings }), || format!("{id}\n"))
        }
        Request::Scale(id, instances) => {
            let job = client
                .get_job(pb::GetJobRequest { id: id.clone(), config_version: None })
                .await
                .map_err(RpcError)?
                .into_inner()
                .job;
            let mut spec = job
                .and_then(|j| j.spec)
                .ok_or_else(|| anyhow::anyhow!("the server answered with no spec for job {id}"))?;
            let from = spec.instance_count;
            spec.instance_count = instances;
            let r = pb::UpdateJobRequest { id: id.clone(), spec: Some(spec), update: None, dry_run: false };
            let resp = client.update_job(r).await.map_err(RpcError)?.into_inner();
            let value = json!({
                "id": id,
                "from": from,
                "instances": instances,
                "update_id": resp.update_id,
                "added_instances": resp.added_instances,
                "removed_instances": resp.removed_instances,
            });
            emit(out, &value, || {
                let mut s = format!("{id}: {from} → {instances} instances");
                if !resp.update_id.is_empty() {
                    s.push_str(&format!(" (update {})", resp.update_id));
                }
                s.push('\n');
                s
            })
        }
        Request::Get(id, config_version) => {
            let job = client
                .get_job(pb::GetJobRequest { id: id.clone(), config_version })
                .await
                .map_err(RpcError)?
                .into_inner()
                .job;
            let job = job.ok_or_else(|| anyhow::anyhow!("the server answered with no job for {id}"))?;
            emit(out, &render::job(&job), || job_fields(&job))
        }
        Request::List(mut q) => {
            let mut jobs = Vec::new();
            loop {
                let page = client.query_jobs(q.clone()).await.map_err(RpcError)?.into_inner();
                jobs.extend(page.jobs);
                if page.next_page_token.is_empty() {
                    break;
                }
                q.page_token = page.next_page_token;
            }
            let value = serde_json::Value::Array(jobs.iter().map(render::job).collect());
            emit(out, &value, || job_table(&jobs))
        }
        Request::Kill(r) => {
            client.kill_job(r.clone()).await.map_err(RpcError)?;
            done(out, &r.id, "killing")
        }
        Request::Grow(r) => {
            let resp = client.add_instances(r.clone()).await.map_err(RpcError)?.into_inner();
            let value = json!({
                "id": r.id,
                "instances": resp.instances,
                "instance_count": resp.instance_count,
                "update_id": resp.update_id,
            });
            emit(out, &value, || {
                format!(
                    "{}: added instances {} (instance count {})\n",
                    r.id,
                    output::list(&resp.instances),
                    resp.instance_count
                )
            })
        }
        Request::Remove(r) => {
            let resp = client.remove_instances(r.clone()).await.map_err(RpcError)?.into_inner();
            emit(out, &json!({ "id": r.id, "removed": resp.removed }), || {
                format!("{}: removing instances {}\n", r.id, output::list(&resp.removed))
            })
        }
        Request::RenewLease(r) => {
            let resp = client.renew_owner_lease(r.clone()).await.map_err(RpcError)?.into_inner();
            emit(out, &json!({ "id": r.id, "lease_secs": resp.lease_secs }), || {
                format!("{}: owner lease renewed for {} s\n", r.id, resp.lease_secs)
            })
        }
        Request::Restart(r) => {
            client.restart_job(r.clone()).await.map_err(RpcError)?;
            done(out, &r.id, "restarting")
        }
        Request::Update(r) => {
            let resp = client.update_job(r).await.map_err(RpcError)?.into_inner();
            let value = json!({
                "update_id": resp.update_id,
                "changed_instances": resp.changed_instances,
                "added_instances": resp.added_instances,
                "removed_instances": resp.removed_instances,
                "diff": resp.diff,
            });
            emit(out, &value, || {
                let mut s = fields(&[
                    ("update", if resp.update_id.is_empty() { "(dry run)".into() } else { resp.update_id.clone() }),
                    ("changed", output::list(&resp.changed_instances)),
                    ("added", output::list(&resp.added_instances)),
                    ("removed", output::list(&resp.removed_instances)),
                ]);
                for line in &resp.diff {
                    s.push_str(&format!("  {line}\n"));
                }
                s
            })
        }
        Request::Delete(id) => {
            client.delete_job(pb::DeleteJobRequest { id: id.clone() }).await.map_err(RpcError)?;
            done(out, &id, "deleted")
        }
        Request::Events { id, task, json } => {
            let out = if json { super::Output::Json } else { out };
            super::events::show(&mut client, out, id, task).await
        }
        Request::Control(action, id) => {
            let r = pb::UpdateControlRequest { id };
            let resp = match action {
                Control::Pause => client.pause_update(r).await,
                Control::Resume => client.resume_update(r).await,
                Control::Abort => client.abort_update(r).await,
            }
            .map_err(RpcError)?
            .into_inner();
            let u = resp.update.unwrap_or_default();
            emit(out, &render::update(&u), || {
                fields(&[
                    ("update", or_dash(&u.id)),
                    ("state", render::update_state(u.state)),
                    ("message", or_dash(&u.message)),
                ])
            })
        }
    }
}

/// Creates the job (its owner filled in as [`default_owner`] says) and
/// tells a person, on stderr, who owns it and any warning.
async fn create(
    client: &mut JobServiceClient<super::Api>,
    opts: &ClientOpts,
    mut config: JobConfig,
) -> anyhow::Result<pb::CreateJobResponse> {
    if config.owner.is_empty() {
        config.owner = default_owner(opts.resolved_token()?.as_deref()).unwrap_or_default();
    }
    let spec = Some(convert::job_spec_pb(&config));
    let created = client.create_job(pb::CreateJobRequest { spec }).await.map_err(RpcError)?.into_inner();
    // The id alone on stdout (scripts read it); who owns it beside.
    if opts.output == super::Output::Table && !created.owner.is_empty() {
        eprintln!("created {} · owner {} · pool {}", created.id, created.owner, config.pool);
    }
    // Created all the same: a host that fits may join (decision 0026).
    if opts.output == super::Output::Table {
        for w in &created.warnings {
            eprintln!("warning: {w}");
        }
    }
    Ok(created)
}

/// How often `job run --wait` looks at the job.
const FOLLOW_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// `job run --wait`: reads the job until a batch job ends, or every
/// instance of another kind runs and is not unhealthy; each change of state
/// or task counts is a line on stderr. The result is the job's outcome
/// ([`Outcome`]); the job itself is printed as `job get` prints it.
async fn follow(
    client: &mut JobServiceClient<super::Api>,
    api: super::Api,
    out: super::Output,
    id: &str,
    batch: bool,
    timeout_secs: u64,
) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let mut last = String::new();
    loop {
        let job = client
            .get_job(pb::GetJobRequest { id: id.to_string(), config_version: None })
            .await
            .map_err(RpcError)?
            .into_inner()
            .job
            .ok_or_else(|| anyhow::anyhow!("the server answered with no job for {id}"))?;
        let status = job.status.clone().unwrap_or_default();
        let state = pb::JobState::try_from(status.state).unwrap_or(pb::JobState::Unspecified);
        let line = format!("{} · tasks {}", render::job_state(status.state), counts(Some(&status)));
        if line != last {
            eprintln!("{id}: {line}");
            last = line;
        }
        let ended = matches!(state, pb::JobState::Succeeded | pb::JobState::Failed | pb::JobState::Killed);
        let up = !batch && !ended && all_running(api.clone(), id, &job).await?;
        if ended || up {
            emit(out, &render::job(&job), || job_fields(&job))?;
            return match state {
                pb::JobState::Failed | pb::JobState::Killed => {
                    Err(Outcome::Ended { id: id.to_string(), state: render::job_state(status.state) }.into())
                }
                _ => Ok(()),
            };
        }
        if timeout_secs > 0 && started.elapsed().as_secs() >= timeout_secs {
            return Err(Outcome::TimedOut {
                id: id.to_string(),
                state: render::job_state(status.state),
                secs: timeout_secs,
            }
            .into());
        }
        tokio::time::sleep(FOLLOW_EVERY).await;
    }
}

/// Whether every instance of a long-running job runs its latest config
/// and none is unhealthy (with a health check, once it passed).
async fn all_running(api: super::Api, id: &str, job: &pb::Job) -> anyhow::Result<bool> {
    let want = job.spec.as_ref().map_or(0, |s| s.instance_count) as usize;
    let status = job.status.clone().unwrap_or_default();
    let running = status.task_counts.get("RUNNING").copied().unwrap_or(0) as usize;
    if want == 0 || running < want || job.update.as_ref().is_some_and(|u| !update_done(u.state)) {
        return Ok(false);
    }
    let mut tasks = pb::task_service_client::TaskServiceClient::new(api);
    let listed = super::task::list_all(&mut tasks, id, &[]).await?;
    // A task with a health check is up once it passed; RUNNING alone means
    // its process started.
    let checked = job.spec.as_ref().and_then(|s| s.default_task.as_ref()).is_some_and(|t| t.health_check.is_some());
    let up = listed
        .iter()
        .filter(|t| t.state == pb::TaskState::Running as i32)
        .filter(|t| if checked { t.healthy == Some(true) } else { t.healthy != Some(false) })
        .count();
    Ok(up >= want)
}

/// Whether an update is no longer moving instances.
fn update_done(state: i32) -> bool {
    !matches!(
        pb::UpdateState::try_from(state),
        Ok(pb::UpdateState::Initialized | pb::UpdateState::RollingForward | pb::UpdateState::RollingBackward)
    )
}

fn done(out: super::Output, id: &str, what: &str) -> anyhow::Result<()> {
    emit(out, &json!({ "id": id, "result": what }), || format!("{id}: {what}\n"))
}

#[derive(Clone, Copy, Debug)]
enum Control {
    Pause,
    Resume,
    Abort,
}

/// A command checked and turned into what will be sent.
#[derive(Debug)]
enum Request {
    Create(JobConfig),
    /// `job run`: the spec, and `Some(timeout)` with `--wait`.
    Run {
        config: JobConfig,
        wait: Option<u64>,
    },
    Scale(String, u32),
    Get(String, Option<u64>),
    List(pb::QueryJobsRequest),
    Kill(pb::KillJobRequest),
    Grow(pb::AddInstancesRequest),
    Remove(pb::RemoveInstancesRequest),
    RenewLease(pb::RenewOwnerLeaseRequest),
    Restart(pb::RestartJobRequest),
    Update(pb::UpdateJobRequest),
    Delete(String),
    Control(Control, String),
    Events {
        id: String,
        task: Option<u32>,
        json: bool,
    },
}

impl Request {
    fn check(cmd: JobCommand) -> anyhow::Result<Request> {
        Ok(match cmd {
            JobCommand::Create { file } => Request::Create(load_job(&file)?),
            JobCommand::Run { file, wait, timeout } => {
                Request::Run { config: load_job(&file)?, wait: wait.then_some(timeout) }
            }
            JobCommand::Scale { id, instances } => Request::Scale(id, instances),
            JobCommand::Get { id, config_version } => Request::Get(id, config_version),
            JobCommand::List { states, owner, pool, name } => Request::List(pb::QueryJobsRequest {
                states: states
                    .iter()
                    .map(|s| parse_enum("job state", "JOB_STATE_", s, pb::JobState::from_str_name).map(|e| e as i32))
                    .collect::<anyhow::Result<_>>()?,
                owner: owner.unwrap_or_default(),
                pool: pool.unwrap_or_default(),
                name_contains: name.unwrap_or_default(),
                limit: 1000,
                page_token: String::new(),
            }),
            JobCommand::Kill { id, instances } => Request::Kill(pb::KillJobRequest { id, instances }),
            JobCommand::Grow { id, count } => {
                if count == 0 {
                    return Err(bad_input("COUNT must be at least 1"));
                }
                Request::Grow(pb::AddInstancesRequest { id, count })
            }
            JobCommand::Remove { id, instances } => Request::Remove(pb::RemoveInstancesRequest { id, instances }),
            JobCommand::RenewLease { id } => Request::RenewLease(pb::RenewOwnerLeaseRequest { id }),
            JobCommand::Restart { id, instances, batch_size } => {
                Request::Restart(pb::RestartJobRequest { id, instances, batch_size })
            }
            JobCommand::Update { id, file, dry_run, batch_size, max_failures, paused } => {
                let config = load_job(&file)?;
                // The flags override the file's update section for this update only.
                let update = (batch_size.is_some() || max_failures.is_some() || paused).then(|| {
                    let mut u = config.update.clone();
                    u.batch_size = batch_size.unwrap_or(u.batch_size);
                    u.max_failed_instances = max_failures.unwrap_or(u.max_failed_instances);
                    u.start_paused |= paused;
                    convert::update_spec_pb(&u)
                });
                Request::Update(pb::UpdateJobRequest { id, spec: Some(convert::job_spec_pb(&config)), update, dry_run })
            }
            JobCommand::Delete { id } => Request::Delete(id),
            JobCommand::Pause { id } => Request::Control(Control::Pause, id),
            JobCommand::Resume { id } => Request::Control(Control::Resume, id),
            JobCommand::Abort { id } => Request::Control(Control::Abort, id),
            JobCommand::Events { id, task, json } => Request::Events { id, task, json },
        })
    }
}

fn counts(s: Option<&pb::JobStatus>) -> String {
    output::pairs(s.map(|s| s.task_counts.iter().collect::<std::collections::BTreeMap<_, _>>()).unwrap_or_default())
}

fn job_table(jobs: &[pb::Job]) -> String {
    let mut t = Table::new(&["ID", "NAME", "OWNER", "POOL", "KIND", "INSTANCES", "STATE", "TASKS", "CREATED"]);
    for j in jobs {
        // QueryJobs may omit the spec; its columns are then blank.
        let spec = j.spec.as_ref();
        let status = j.status.as_ref();
        t.row(vec![
            j.id.clone(),
            or_dash(spec.map(|s| s.name.as_str()).unwrap_or_default()),
            or_dash(spec.map(|s| s.owner.as_str()).unwrap_or_default()),
            or_dash(spec.map(|s| s.pool.as_str()).unwrap_or_default()),
            spec.map(|s| kind(s.kind)).unwrap_or_else(|| "-".into()),
            spec.map(|s| s.instance_count.to_string()).unwrap_or_else(|| "-".into()),
            status.map(|s| render::job_state(s.state)).unwrap_or_else(|| "-".into()),
            counts(status),
            output::time(status.map(|s| s.created_at_ms).unwrap_or_default()),
        ]);
    }
    t.render()
}

fn kind(k: i32) -> String {
    render::enum_name(pb::JobKind::try_from(k).ok().map(|e| e.as_str_name()), "JOB_KIND_", k).to_ascii_lowercase()
}

fn job_fields(j: &pb::Job) -> String {
    let mut f = vec![("id", j.id.clone())];
    if let Some(s) = &j.spec {
        f.extend([
            ("name", s.name.clone()),
            ("owner", s.owner.clone()),
            ("pool", s.pool.clone()),
            ("kind", kind(s.kind)),
            ("instances", s.instance_count.to_string()),
        ]);
        if let Some(t) = &s.default_task {
            let cmd = std::iter::once(t.command.as_str()).chain(t.args.iter().map(String::as_str)).collect::<Vec<_>>();
            f.push(("command", cmd.join(" ")));
        }
    }
    if let Some(s) = &j.status {
        f.extend([
            ("state", render::job_state(s.state)),
            (
                "config version",
                format!(
                    "{} (desired {}, latest {})",
                    s.config_version, s.desired_config_version, s.latest_config_version
                ),
            ),
            ("tasks", counts(Some(s))),
            ("created", output::time(s.created_at_ms)),
            ("updated", output::time(s.updated_at_ms)),
            ("completed", output::time(s.completed_at_ms)),
            ("message", or_dash(&s.message)),
        ]);
        // Why instances wait, and what can never fit (decision 0026).
        if !s.pending_summary.is_empty() {
            f.push(("pending", s.pending_summary.clone()));
        }
        f.extend(s.warnings.iter().map(|w| ("warning", w.clone())));
    }
    if let Some(u) = &j.update {
        f.extend([
            (
                "update",
                format!(
                    "{} {} (v{} → v{})",
                    u.id,
                    render::update_state(u.state),
                    u.from_config_version,
                    u.to_config_version
                ),
            ),
            ("  done", output::list(&u.done)),
            ("  in progress", output::list(&u.in_progress)),
            ("  failed", output::list(&u.failed)),
        ]);
    }
    fields(&f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use paceline_model::job::JobKind;

    fn examples() -> Vec<PathBuf> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .expect("examples/ exists")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
            .collect();
        files.sort();
        files
    }

    /// Every file in examples/ parses as its model type, validates, and
    /// survives the trip to the wire and back (what `job create` sends).
    #[test]
    fn every_example_parses_and_validates() {
        let files = examples();
        assert!(files.len() >= 5, "{files:?}");
        for file in files {
            let text = std::fs::read_to_string(&file).expect("read");
            if text.lines().any(|l| l.starts_with("pools:")) {
                let pools: paceline_model::pool::PoolFile =
                    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                for p in &pools.pools {
                    super::super::pool::load_pool(&p.path, &file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                }
                continue;
            }
            let mut config = load_job(&file).unwrap_or_else(|e| panic!("{e}"));
            assert!(config.owner.is_empty(), "{}: examples leave the owner to the caller", file.display());
            config.owner = "someone".into();
            let wire = convert::job_spec_pb(&config);
            assert_eq!(convert::job_config("spec", &wire).as_ref(), Ok(&config), "{}", file.display());
        }
    }

    #[test]
    fn examples_say_what_their_names_promise() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let load = |f: &str| load_job(&dir.join(f)).unwrap_or_else(|e| panic!("{e}"));
        let hello = load("hello.yaml");
        assert_eq!((hello.kind, hello.instance_count), (JobKind::Batch, 3));
        assert!(hello.default_task.args.join(" ").contains("$PACELINE_TASK_ID"));
        let web = load("web.yaml");
        assert_eq!((web.kind, web.instance_count), (JobKind::Stateless, 4));
        let probe = web.default_task.health_check.as_ref().and_then(|h| h.http.as_ref()).map(|h| h.port.as_str());
        assert_eq!(probe, Some("http"));
        let gang = load("gang.yaml");
        assert_eq!(gang.kind, JobKind::Batch);
        assert_eq!(gang.sla.min_running_instances, Some(gang.instance_count));
        assert!(gang.default_task.args.join(" ").contains("$PACELINE_GANG_RANK"));
        let jax = load("gang-jax.yaml");
        assert_eq!(jax.sla.min_running_instances, Some(jax.instance_count));
        assert_eq!(jax.gang.discovery, paceline_model::gang::GangDiscovery::Jax);
        assert_eq!(jax.default_task.ports, vec!["coord".to_string()]);
        assert!(jax.default_task.args.join(" ").contains("JAX_COORDINATOR_ADDRESS"));
        let stateful = load("stateful.yaml");
        assert_eq!(stateful.kind, JobKind::Stateful);
        assert!(stateful.default_task.volume.is_some());
        assert!(stateful.default_task.args.join(" ").contains("$PACELINE_VOLUME"));
    }

    #[test]
    fn the_owner_defaults_to_the_os_user_without_a_token_and_to_the_server_with_one() {
        let user = default_owner(None).expect("the OS user is known");
        assert!(!user.is_empty());
        if let Ok(env_user) = std::env::var("USER") {
            assert_eq!(user, env_user.trim());
        }
        assert_eq!(default_owner(Some("tok")), None, "the server names the token's principal");
        assert_eq!(default_owner(Some("  ")).as_deref(), Some(user.as_str()), "a blank token is no token");
    }

    #[test]
    fn update_flags_override_the_files_update_section() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let cmd = JobCommand::Update {
            id: "j".into(),
            file: dir.join("web.yaml"),
            dry_run: true,
            batch_size: Some(3),
            max_failures: None,
            paused: true,
        };
        let Ok(Request::Update(r)) = Request::check(cmd) else { panic!("checks") };
        let u = r.update.expect("override set");
        assert_eq!((u.batch_size, u.max_failed_instances, u.start_paused, r.dry_run), (3, 1, true, true));
    }
}
