//! The supervisor: runs tasks as processes on this host and reports their
//! states through the durable [`Outbox`]. It knows nothing about the
//! network; the session feeds it `Launch`/`Kill`/`Ack`/`ReadLog` and sends
//! what the outbox holds.
//!
//! Files under the data dir:
//! - `state/<run_id>/record.json`: the run's [`RunRecord`] (pid, start time, spec);
//! - `state/<run_id>/outbox.log`: its status updates and acks;
//! - `state/<run_id>/exit`: the task's exit status, written by the launch wrapper;
//! - `runs/<run_id>/`: the sandbox (cwd, `stdout`, `stderr`);
//! - `launches.log`: one line per process start, never pruned ([`crate::launch_log`]);
//! - `volumes/<task_id>/<name>/`: persistent volumes.
//!
//! `run` holds the life of one run (start, wait, kill, health, finish);
//! `logs` serves its output.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use paceline_model::Resources;
use paceline_model::gpu::{self, GpuDevice, GpuSlot};
use paceline_proto::agent::v1 as pb;
use tokio::sync::{Notify, broadcast, mpsc};
use tokio::task::AbortHandle;

mod logs;
mod run;
mod sampling;

pub use logs::LogData;

use crate::config::{AgentConfig, HostInfo};
use crate::error::{AgentError, LaunchError, io_ctx};
use crate::isolation::Isolation;
use crate::outbox::Outbox;
use crate::ports::Pool;
use crate::process;
use crate::record::{self, Phase, RunRecord};
use paceline_proto::convert::resources_pb as proto_resources;

use crate::spec::RunSpec;
use crate::task_user::{TaskUsers, UidPool};

/// Largest log chunk served by [`Supervisor::read_log`].
pub const MAX_LOG_CHUNK: u64 = 1024 * 1024;

/// How the supervisor runs; see [`SupervisorConfig::from_host`].
#[derive(Clone, Debug)]
pub struct SupervisorConfig {
    /// The agent's data dir.
    pub data_dir: PathBuf,
    /// What runs may hold in total (`ports` is ignored: the range decides).
    pub total: Resources,
    /// First and last host port handed out (inclusive).
    pub port_range: (u16, u16),
    /// Limit enforcement.
    pub isolation: Isolation,
    /// Grace between SIGTERM and SIGKILL when the launch says 0.
    pub default_kill_grace: Duration,
    /// How often a re-adopted process (not our child) is checked for exit.
    pub adopt_poll: Duration,
    /// The GPU devices, in order (empty: devices 0..n of `total`).
    pub gpu_devices: Vec<GpuDevice>,
    /// Each device's memory in MiB, in the same order; 0 or missing:
    /// unknown. A share of a device is limited to its part of it under
    /// NVIDIA MPS (`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`).
    pub gpu_memory_mib: Vec<u64>,
    /// The users tasks run as (decision 0047).
    pub task_users: TaskUsers,
}

impl SupervisorConfig {
    /// The supervisor config of an agent on a detected host.
    pub fn from_host(config: &AgentConfig, host: &HostInfo) -> Self {
        Self {
            data_dir: config.data_dir.clone(),
            total: host.total,
            port_range: (config.port_range_first, config.port_range_last),
            isolation: host.isolation.clone(),
            default_kill_grace: Duration::from_secs(u64::from(config.default_kill_grace_secs)),
            adopt_poll: Duration::from_millis(250),
            gpu_devices: host.gpus.clone(),
            gpu_memory_mib: host.gpu_memory_mib.clone(),
            task_users: host.task_users.clone(),
        }
    }
}

/// What a launch did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchOutcome {
    /// The run was accepted; its updates follow (STARTING first).
    Accepted,
    /// The run id is already live here: nothing was done.
    AlreadyRunning,
}

/// Serialises a run's updates and stops health updates once it ended.
#[derive(Debug, Default)]
struct Gate {
    ended: bool,
    healthy: Option<bool>,
}

#[derive(Debug)]
struct Entry {
    record: RunRecord,
    kill_tx: Option<mpsc::UnboundedSender<Option<u32>>>,
}

#[derive(Debug)]
struct State {
    runs: HashMap<String, Entry>,
    used: Resources,
    ports: Pool,
    /// The GPU devices and the milli-GPUs runs hold of each.
    gpus: Vec<GpuSlot>,
    /// The uids runs may get; `None`: tasks run as the agent.
    uids: Option<UidPool>,
}

#[derive(Debug)]
struct Inner {
    cfg: SupervisorConfig,
    outbox: Outbox,
    state: Mutex<State>,
    events: broadcast::Sender<pb::StatusUpdate>,
    outbox_changed: Notify,
    tasks: Mutex<Vec<AbortHandle>>,
    /// What runs use, from the last samples ([`crate::usage`]).
    usage: Mutex<crate::usage::Sampler>,
    /// The monotonic origin of usage samples.
    started: std::time::Instant,
}

/// Supervises the runs of one host. Cheap to clone (a handle).
#[derive(Clone, Debug)]
pub struct Supervisor {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn add(a: &mut Resources, b: &Resources) {
    a.cpu_millis += b.cpu_millis;
    a.memory_mib += b.memory_mib;
    a.disk_mib += b.disk_mib;
    a.gpu_milli += b.gpu_milli;
}

fn sub(a: &mut Resources, b: &Resources) {
    a.cpu_millis = a.cpu_millis.saturating_sub(b.cpu_millis);
    a.memory_mib = a.memory_mib.saturating_sub(b.memory_mib);
    a.disk_mib = a.disk_mib.saturating_sub(b.disk_mib);
    a.gpu_milli = a.gpu_milli.saturating_sub(b.gpu_milli);
}

/// A terminal outcome.
#[derive(Debug)]
struct Outcome {
    state: pb::RunState,
    exit_code: Option<i32>,
    signal: Option<i32>,
    reason: &'static str,
    message: String,
}

/// How a monitor waits for its process.
enum Waiter {
    /// Our child: `wait()` gives its status.
    Child(tokio::process::Child),
    /// Re-adopted after a restart: not our child, so poll `/proc`.
    Adopted { pid: u32, start_time: u64, poll: Duration },
}

impl Waiter {
    /// Waits for exit; the wrapper's exit code, or `Err(signal)`; `None`
    /// when unknown (adopted, or `wait` failed).
    async fn wait(&mut self) -> Option<Result<i32, i32>> {
        match self {
            Waiter::Child(child) => {
                use std::os::unix::process::ExitStatusExt;
                let status = child.wait().await.ok()?;
                match (status.code(), status.signal()) {
                    (Some(code), _) => Some(Ok(code)),
                    (None, Some(sig)) => Some(Err(sig)),
                    _ => None,
                }
            }
            Waiter::Adopted { pid, start_time, poll } => {
                while process::still_running(*pid, *start_time) {
                    tokio::time::sleep(*poll).await;
                }
                None
            }
        }
    }
}

impl Supervisor {
    /// Opens the supervisor on its data dir: replays the outbox, re-adopts
    /// processes that still run, and reports runs whose process vanished
    /// while no agent watched as LOST (or with the status the launch
    /// wrapper recorded). Must be called inside a tokio runtime.
    pub async fn open(cfg: SupervisorConfig) -> Result<Self, AgentError> {
        let state_root = cfg.data_dir.join("state");
        for dir in [&state_root, &cfg.data_dir.join("runs"), &cfg.data_dir.join("volumes")] {
            std::fs::create_dir_all(dir).map_err(io_ctx(format!("creating {}", dir.display())))?;
        }
        restrict_data_dir(&cfg.data_dir, cfg.task_users.per_run())?;
        let outbox = Outbox::open(&state_root)?;
        let gpus = gpu::devices_of(&cfg.total, &cfg.gpu_devices, None)
            .into_iter()
            .map(|device| GpuSlot { device, used_milli: 0 })
            .collect();
        let state = State {
            runs: HashMap::new(),
            used: Resources::default(),
            ports: Pool::ports(cfg.port_range.0, cfg.port_range.1),
            gpus,
            uids: match &cfg.task_users {
                TaskUsers::PerRun { first, last, locks, .. } => Some(UidPool::new(*first, *last, Some(locks.clone()))),
                TaskUsers::Agent { .. } => None,
            },
        };
        let (events, _) = broadcast::channel(4096);
        let sup = Supervisor {
            inner: Arc::new(Inner {
                cfg,
                outbox,
                state: Mutex::new(state),
                events,
                outbox_changed: Notify::new(),
                tasks: Mutex::new(Vec::new()),
                usage: Mutex::new(crate::usage::Sampler::new("/proc")),
                started: std::time::Instant::now(),
            }),
        };
        sup.recover(&state_root).await?;
        Ok(sup)
    }

    async fn recover(&self, state_root: &Path) -> Result<(), AgentError> {
        let entries = std::fs::read_dir(state_root).map_err(io_ctx(format!("listing {}", state_root.display())))?;
        let mut records = Vec::new();
        for entry in entries.flatten() {
            match RunRecord::load(&entry.path()) {
                Ok(Some(rec)) => records.push(rec),
                Ok(None) => {}
                // One unreadable record must not keep the agent from serving the others.
                Err(e) => tracing::error!(error = %e, "skipping an unreadable run record"),
            }
        }
        for mut rec in records {
            let run_id = rec.spec.run_id.clone();
            let last_terminal = self.inner.outbox.last_state(&run_id).is_some_and(is_terminal);
            if rec.phase == Phase::Ended || last_terminal {
                if rec.phase != Phase::Ended {
                    rec.phase = Phase::Ended;
                    rec.ended_at_ms = Some(now_ms());
                    rec.save(&self.state_dir(&run_id))?;
                }
                self.insert_entry(rec, None, true);
                continue;
            }
            let alive = match (rec.pid, rec.start_time) {
                (Some(pid), Some(start)) if process::still_running(pid, start) => Some((pid, start)),
                _ => None,
            };
            {
                let mut st = lock(&self.inner.state);
                st.ports.hold(rec.ports.values().map(|p| u32::from(*p)));
                // A named user's uid (`user:`) is not one of the range's.
                if let (Some(uid), Some(uids), None) = (rec.task_uid, st.uids.as_mut(), &rec.spec.user) {
                    uids.hold(uid);
                }
                gpu::apply(&mut st.gpus, &rec.gpu_grant(), false);
                add(&mut st.used, &rec.spec.resources);
            }
            let (kill_tx, kill_rx) = mpsc::unbounded_channel();
            let gate = self.insert_entry(rec.clone(), Some(kill_tx), false);
            match alive {
                Some((pid, start_time)) => {
                    tracing::info!(run_id, pid, "re-adopting a run that survived the agent restart");
                    let waiter = Waiter::Adopted { pid, start_time, poll: self.inner.cfg.adopt_poll };
                    let sup = self.clone();
                    self.spawn_task(async move { sup.supervise(run_id, waiter, kill_rx, gate).await });
                }
                None => {
                    let outcome = match (rec.pid, record::read_exit_file(&self.state_dir(&run_id))) {
                        (Some(_), Some(code)) => {
                            let mut o = self.outcome_from(&rec, Some(Ok(code)));
                            o.message = format!("{} (while the agent was down)", o.message);
                            o
                        }
                        _ => Outcome {
                            state: pb::RunState::Lost,
                            exit_code: None,
                            signal: None,
                            reason: "AGENT_RESTARTED",
                            message: "the agent restarted and the run's process was gone without a recorded status"
                                .to_owned(),
                        },
                    };
                    self.finish(&run_id, &gate, outcome).await;
                }
            }
        }
        Ok(())
    }

    fn insert_entry(
        &self,
        record: RunRecord,
        kill_tx: Option<mpsc::UnboundedSender<Option<u32>>>,
        ended: bool,
    ) -> Arc<tokio::sync::Mutex<Gate>> {
        let gate = Arc::new(tokio::sync::Mutex::new(Gate { ended, healthy: None }));
        let run_id = record.spec.run_id.clone();
        lock(&self.inner.state).runs.insert(run_id, Entry { record, kill_tx });
        gate
    }

    fn spawn_task(&self, fut: impl std::future::Future<Output = ()> + Send + 'static) {
        let handle = tokio::spawn(fut).abort_handle();
        let mut tasks = lock(&self.inner.tasks);
        tasks.retain(|t| !t.is_finished());
        tasks.push(handle);
    }

    fn state_dir(&self, run_id: &str) -> PathBuf {
        self.inner.cfg.data_dir.join("state").join(run_id)
    }

    /// The sandbox directory of a run.
    pub fn sandbox_dir(&self, run_id: &str) -> PathBuf {
        self.inner.cfg.data_dir.join("runs").join(run_id)
    }

    /// The enforcement in use.
    pub fn isolation(&self) -> &Isolation {
        &self.inner.cfg.isolation
    }

    /// The durable outbox (what the session sends).
    pub fn outbox(&self) -> &Outbox {
        &self.inner.outbox
    }

    /// Resolves when an update was added to the outbox since the last call
    /// (a single consumer: the session).
    pub async fn outbox_changed(&self) {
        self.inner.outbox_changed.notified().await;
    }

    /// Every update from now on, as it is made durable (for observers and
    /// tests; a slow receiver may lag and miss some, the outbox does not).
    pub fn subscribe(&self) -> broadcast::Receiver<pb::StatusUpdate> {
        self.inner.events.subscribe()
    }

    /// Acknowledges the run's updates up to `seq` (durably).
    pub fn ack(&self, run_id: &str, seq: u64) -> Result<usize, AgentError> {
        self.inner.outbox.ack(run_id, seq)
    }

    /// The runs that are not over.
    pub fn running(&self) -> Vec<pb::RunningRun> {
        self.runs_listed(false)
    }

    /// Runs to report in `Register`: those not over, and those over whose
    /// final status the manager has not acknowledged yet, so that the manager
    /// does not call such a run missing (LOST) before its resent status
    /// arrives on the new stream.
    pub fn registration_runs(&self) -> Vec<pb::RunningRun> {
        self.runs_listed(true)
    }

    /// Runs not over, plus ended runs with unacknowledged status when `with_unacked_ended`.
    fn runs_listed(&self, with_unacked_ended: bool) -> Vec<pb::RunningRun> {
        let st = lock(&self.inner.state);
        let mut out: Vec<pb::RunningRun> = st
            .runs
            .values()
            .filter(|e| {
                let id = &e.record.spec.run_id;
                if e.record.phase != Phase::Ended {
                    return true;
                }
                with_unacked_ended && self.inner.outbox.last_seq(id) > self.inner.outbox.acked(id)
            })
            .map(|e| pb::RunningRun {
                run_id: e.record.spec.run_id.clone(),
                task_id: e.record.spec.task_id.clone(),
                resources: Some(proto_resources(&e.record.spec.resources)),
                gpu: paceline_proto::convert::gpu_grant_pb(&e.record.gpu_grant()),
            })
            .collect();
        out.sort_by(|a, b| a.run_id.cmp(&b.run_id));
        out
    }

    /// Resources held by runs that are not over.
    pub fn used(&self) -> Resources {
        lock(&self.inner.state).used
    }

    /// Starts a run from a protocol `Launch`. A live duplicate is a no-op;
    /// anything the host cannot honour is an error naming the field.
    pub async fn launch(&self, launch: &pb::Launch) -> Result<LaunchOutcome, LaunchError> {
        self.launch_spec(RunSpec::from_launch(launch)?)
    }

    /// Starts a run from a validated spec (see [`RunSpec::validated`]).
    pub fn launch_spec(&self, spec: RunSpec) -> Result<LaunchOutcome, LaunchError> {
        let spec = spec.validated()?;
        let run_id = spec.run_id.clone();
        // The user the job asked for (its pool allowed it), looked up
        // before the state lock: a user database may be slow.
        let named = match &spec.user {
            Some(user) => Some(
                crate::task_user::named_uid(user, &self.inner.cfg.task_users)
                    .map_err(|why| LaunchError::new("user", why))?,
            ),
            None => None,
        };
        // Its primary group and supplementary groups, as a login gets them.
        let named_groups = match named {
            Some(uid) => Some(crate::task_user::Ids::of_user(uid).map_err(|why| LaunchError::new("user", why))?),
            None => None,
        };
        let record = {
            let mut st = lock(&self.inner.state);
            if let Some(existing) = st.runs.get(&run_id) {
                if existing.record.phase == Phase::Ended {
                    return Err(LaunchError::new(
                        "run_id",
                        format!(
                            "run `{run_id}` already ran on this host and ended {}; launch a new run id",
                            existing.record.ended_as.as_deref().unwrap_or("")
                        ),
                    ));
                }
                return Ok(LaunchOutcome::AlreadyRunning);
            }
            let total = self.inner.cfg.total;
            let used = st.used;
            let r = &spec.resources;
            for (field, want, have, used) in [
                ("resources.cpu_millis", r.cpu_millis, total.cpu_millis, used.cpu_millis),
                ("resources.memory_mib", r.memory_mib, total.memory_mib, used.memory_mib),
                ("resources.disk_mib", r.disk_mib, total.disk_mib, used.disk_mib),
                ("resources.gpu_milli", r.gpu_milli, total.gpu_milli, used.gpu_milli),
            ] {
                let free = have.saturating_sub(used);
                if want > free {
                    return Err(LaunchError::new(
                        field,
                        format!("asks for {want} but {free} of the host's {have} are free"),
                    ));
                }
            }
            // The user the job asked for (resolved above), or a uid of its
            // own, so that no other run can read its environment or files
            // (decision 0047).
            let busy = match &self.inner.cfg.task_users {
                _ if named.is_some() => Default::default(),
                TaskUsers::PerRun { first, last, .. } => crate::task_user::busy_uids(*first, *last),
                TaskUsers::Agent { .. } => Default::default(),
            };
            let task_uid = match st.uids.as_mut() {
                _ if named.is_some() => named,
                Some(uids) => match uids.take(&busy) {
                    Some(uid) => Some(uid),
                    None => {
                        return Err(LaunchError::new(
                            "task_user",
                            format!(
                                "all {} uids of the agent's task uid range are held by live runs or other processes",
                                uids.size()
                            ),
                        ));
                    }
                },
                None => None,
            };
            let free_ports = st.ports.free();
            let (first, last) = self.inner.cfg.port_range;
            // A gang member's ports were chosen by the manager and told to
            // its peers: exactly those, or the launch is refused.
            let exact: Option<Vec<u32>> = spec
                .gang
                .as_ref()
                .filter(|g| !g.ports.is_empty())
                .map(|g| spec.port_names.iter().filter_map(|n| g.ports.get(n)).map(|p| u32::from(*p)).collect());
            let taken = match &exact {
                Some(numbers) => st.ports.take_exact(numbers).map(|()| numbers.clone()).map_err(Some),
                None => st.ports.take(spec.port_names.len()).ok_or(None),
            };
            let Ok(ports) = taken else {
                if let (Some(uid), Some(uids)) = (task_uid, st.uids.as_mut()) {
                    uids.release(uid);
                }
                if let Err(Some(port)) = taken {
                    return Err(LaunchError::new(
                        "gang.ports",
                        format!(
                            "port {port} is held by another run, bound by another process or not in the range {first}-{last}"
                        ),
                    ));
                }
                return Err(LaunchError::new(
                    "port_names",
                    format!(
                        "asks for {} ports but only {free_ports} of the range {first}-{last} are free",
                        spec.port_names.len()
                    ),
                ));
            };
            // The manager's grant, checked against what the devices have
            // left; without one (an older manager), the agent's own pick.
            let grant = if spec.gpu.is_empty() {
                gpu::pick(&st.gpus, &spec.resources, &[]).ok_or_else(|| "no free GPU device takes it".to_owned())
            } else {
                gpu::check_grant(&st.gpus, &spec.resources, &[], &spec.gpu)
                    .map(|()| spec.gpu.clone())
                    .map_err(|e| e.to_string())
            };
            let grant = match grant {
                Ok(g) => g,
                Err(why) => {
                    st.ports.release(ports);
                    if let (Some(uid), Some(uids)) = (task_uid, st.uids.as_mut()) {
                        uids.release(uid);
                    }
                    return Err(LaunchError::new("gpu", why));
                }
            };
            gpu::apply(&mut st.gpus, &grant, false);
            let gpus = grant.devices.clone();
            let gpu_milli_each = grant.milli_each;
            add(&mut st.used, &spec.resources);
            let ports: BTreeMap<String, u16> =
                spec.port_names.iter().cloned().zip(ports.into_iter().map(|p| p as u16)).collect();
            RunRecord {
                sandbox: self.sandbox_dir(&run_id),
                spec,
                phase: Phase::Starting,
                ports,
                gpus,
                gpu_milli_each,
                pid: None,
                start_time: None,
                cgroup: None,
                kill_requested: false,
                ended_as: None,
                ended_at_ms: None,
                task_uid,
                task_groups: named_groups.map(|ids| (ids.gid, ids.groups)),
            }
        };
        let (kill_tx, kill_rx) = mpsc::unbounded_channel();
        let gate = self.insert_entry(record, Some(kill_tx), false);
        let sup = self.clone();
        self.spawn_task(async move { sup.start_and_supervise(run_id, kill_rx, gate).await });
        Ok(LaunchOutcome::Accepted)
    }

    /// Stops a run: SIGTERM to its process group, SIGKILL after the grace
    /// (`grace_secs`, else the launch's, else the agent default). Killing a
    /// run that already ended is a no-op.
    pub fn kill(&self, run_id: &str, grace_secs: Option<u32>) -> Result<(), AgentError> {
        let st = lock(&self.inner.state);
        let entry = st.runs.get(run_id).ok_or_else(|| AgentError::UnknownRun(run_id.to_owned()))?;
        if let Some(tx) = &entry.kill_tx {
            // A closed channel means the monitor is finishing the run anyway.
            let _ = tx.send(grace_secs);
        }
        Ok(())
    }

    /// Stops every live run and waits (up to grace + 5 s) until they ended.
    pub async fn kill_all(&self, grace_secs: u32) {
        let ids: Vec<String> = self.running().into_iter().map(|r| r.run_id).collect();
        for id in &ids {
            let _ = self.kill(id, Some(grace_secs));
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(u64::from(grace_secs) + 5);
        while !self.running().is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops supervising without touching the processes (they keep running
    /// and a supervisor opened later on the same data dir re-adopts them).
    /// This is what an agent crash looks like; tests use it to simulate one.
    pub fn detach(&self) {
        for task in lock(&self.inner.tasks).drain(..) {
            task.abort();
        }
    }

    /// Forgets runs that ended more than `older_than` ago and whose updates
    /// were all acknowledged: removes their record, status log and sandbox
    /// (volumes stay). Afterwards their run ids are unknown here, so a
    /// late duplicate launch of one would be accepted. Returns how many.
    pub fn gc(&self, older_than: Duration) -> usize {
        let cutoff = now_ms().saturating_sub(older_than.as_millis() as u64);
        let victims: Vec<String> = {
            let st = lock(&self.inner.state);
            st.runs
                .values()
                .filter(|e| e.record.phase == Phase::Ended)
                .filter(|e| e.record.ended_at_ms.is_some_and(|t| t <= cutoff))
                .map(|e| e.record.spec.run_id.clone())
                .filter(|id| self.inner.outbox.last_seq(id) <= self.inner.outbox.acked(id))
                .collect()
        };
        for run_id in &victims {
            lock(&self.inner.state).runs.remove(run_id);
            self.inner.outbox.forget(run_id);
            for dir in [self.state_dir(run_id), self.sandbox_dir(run_id)] {
                if let Err(e) = std::fs::remove_dir_all(&dir)
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::warn!(run_id, dir = %dir.display(), error = %e, "removing an old run");
                }
            }
        }
        if !victims.is_empty() {
            tracing::info!(runs = victims.len(), "forgot old ended runs");
        }
        victims.len()
    }

    fn record(&self, run_id: &str) -> Option<RunRecord> {
        lock(&self.inner.state).runs.get(run_id).map(|e| e.record.clone())
    }

    fn update_record(&self, run_id: &str, f: impl FnOnce(&mut RunRecord)) -> Option<RunRecord> {
        let mut st = lock(&self.inner.state);
        let entry = st.runs.get_mut(run_id)?;
        f(&mut entry.record);
        Some(entry.record.clone())
    }

    /// Makes one update durable and announces it. Called with the run's gate held.
    fn emit(
        &self,
        rec: &RunRecord,
        gate: &Gate,
        state: pb::RunState,
        outcome: Option<&Outcome>,
        reason: &str,
        message: &str,
    ) {
        let update = pb::StatusUpdate {
            run_id: rec.spec.run_id.clone(),
            task_id: rec.spec.task_id.clone(),
            seq: 0,
            state: state as i32,
            healthy: gate.healthy,
            exit_code: outcome.and_then(|o| o.exit_code),
            signal: outcome.and_then(|o| o.signal),
            reason: reason.to_owned(),
            message: message.to_owned(),
            at_ms: now_ms(),
            ports: rec.ports.iter().map(|(k, v)| (k.clone(), u32::from(*v))).collect(),
            sandbox: rec.sandbox.display().to_string(),
        };
        match self.inner.outbox.append(update) {
            Ok(update) => {
                tracing::debug!(run_id = update.run_id, seq = update.seq, state = ?state, reason, "status update");
                let _ = self.inner.events.send(update);
                self.inner.outbox_changed.notify_one();
            }
            // Not durable means not sent: the manager will reconcile the run.
            Err(e) => {
                tracing::error!(run_id = rec.spec.run_id, error = %e, "could not persist a status update")
            }
        }
    }

    async fn emit_progress(&self, run_id: &str, gate: &tokio::sync::Mutex<Gate>, state: pb::RunState, reason: &str) {
        let g = gate.lock().await;
        if g.ended {
            return;
        }
        if let Some(rec) = self.record(run_id) {
            self.emit(&rec, &g, state, None, reason, "");
        }
    }
}

/// The data dir is the agent's: nobody else may list or read it. Where runs
/// get uids of their own, tasks must still pass through the data dir and
/// `runs/` and `volumes/` to reach their own directories by path (0711:
/// through, not list); `state/` and the identity stay 0700. A data dir the
/// agent does not own, or a shared one (sticky, like /tmp), is left as it is
/// with a warning.
fn restrict_data_dir(data_dir: &Path, per_run: bool) -> Result<(), AgentError> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let set = |dir: &Path, mode: u32| {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
            .map_err(io_ctx(format!("restricting {}", dir.display())))
    };
    let through = if per_run { 0o711 } else { 0o700 };
    let meta = data_dir.metadata().map_err(io_ctx(format!("reading {}", data_dir.display())))?;
    if meta.uid() != nix::unistd::geteuid().as_raw() || meta.permissions().mode() & 0o1000 != 0 {
        tracing::warn!(
            data_dir = %data_dir.display(),
            "the data dir is not the agent's own (another owner, or shared and sticky): its mode is left alone; give the agent a directory of its own"
        );
    } else {
        set(data_dir, through)?;
    }
    set(&data_dir.join("state"), 0o700)?;
    set(&data_dir.join("runs"), through)?;
    set(&data_dir.join("volumes"), through)?;
    let identity = crate::identity::dir(data_dir);
    if identity.exists() {
        set(&identity, 0o700)?;
    }
    Ok(())
}

fn is_terminal(state: pb::RunState) -> bool {
    matches!(state, pb::RunState::Succeeded | pb::RunState::Failed | pb::RunState::Killed | pb::RunState::Lost)
}

fn launch_failed(message: String) -> Outcome {
    Outcome { state: pb::RunState::Failed, exit_code: None, signal: None, reason: "LAUNCH_FAILED", message }
}
