//! Tasks: the spec a task runs (command, resources, constraints, …), its
//! states and the explicit transition table between them, the runtime record
//! of one instance (run id, version for compare-and-set), and task events.
//!
//! A task is instance `i` of a job. Each time an instance is (re)started it
//! gets a new *run*: the run number counts up, and the run id
//! (`<job>-<instance>-<run>`) names one attempt in events and on agents.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{Constraint, Labels, Preference, Resources};

pub use crate::health::{HealthCheck, HttpProbe, TcpProbe};

/// Limits that keep a spec small enough to store and ship in one message.
pub mod limits {
    /// Longest command, argument, environment value or image name, in bytes.
    pub const MAX_STRING: usize = 64 * 1024;
    /// Most arguments, environment entries, ports, constraints or labels.
    pub const MAX_ITEMS: usize = 1024;
}

/// A spec field that cannot be used as written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// A required field is empty.
    #[error("`{0}` must not be empty")]
    Empty(&'static str),
    /// A string is longer than [`limits::MAX_STRING`].
    #[error("`{field}` is {len} bytes, more than the limit of {max}")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A list has more than [`limits::MAX_ITEMS`] entries.
    #[error("`{field}` has {len} entries, more than the limit of {max}")]
    TooMany {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A value is out of its range.
    #[error("`{field}`: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// A constraint is malformed.
    #[error(transparent)]
    Constraint(#[from] crate::constraint::ConstraintError),
}

pub(crate) fn check_len(field: &'static str, s: &str) -> Result<(), SpecError> {
    if s.len() > limits::MAX_STRING {
        return Err(SpecError::TooLong { field, len: s.len(), max: limits::MAX_STRING });
    }
    Ok(())
}

pub(crate) fn check_count(field: &'static str, len: usize) -> Result<(), SpecError> {
    if len > limits::MAX_ITEMS {
        return Err(SpecError::TooMany { field, len, max: limits::MAX_ITEMS });
    }
    Ok(())
}

/// What one task runs, with what, and where it may run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TaskSpec {
    /// Program to execute (a path or a name on the agent's `PATH`). Empty
    /// when `image` names a container whose entry point runs instead.
    pub command: String,
    /// Arguments passed to `command`.
    pub args: Vec<String>,
    /// Environment variables set for the task.
    pub env: BTreeMap<String, String>,
    /// Container image, for providers that run containers (Mesos); `None`
    /// runs `command` as a plain process.
    pub image: Option<String>,
    /// Resources reserved for the task; `resources.ports` must equal the
    /// number of `ports` names. `resources.gpu_milli` is whole devices (a
    /// multiple of 1000) or a share of one device (below 1000).
    pub resources: Resources,
    /// GPU models the task accepts (`[V100M16, V100M32]`); empty: any. Only
    /// with a GPU ask; checked per device at placement.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_models: Vec<String>,
    /// Names of the host ports the task needs; the agent assigns numbers
    /// and passes them as `PORT_<NAME>` environment variables.
    pub ports: Vec<String>,
    /// Hard constraints: a host that fails one is never used.
    pub constraints: Vec<Constraint>,
    /// Soft constraints: weighted preferences among eligible hosts.
    pub preferences: Vec<Preference>,
    /// Labels on the task (used by task affinity and anti-affinity).
    pub labels: Labels,
    /// How the agent decides the task is healthy; `None`: running is healthy.
    pub health_check: Option<HealthCheck>,
    /// What happens when a run ends.
    pub restart_policy: RestartPolicy,
    /// Persistent volume of a stateful task, kept on its host across runs.
    pub volume: Option<VolumeSpec>,
    /// Seconds between the polite stop signal and the forced kill.
    pub kill_grace_period_secs: u32,
    /// The polite stop signal (one of [`STOP_SIGNALS`]); empty: SIGTERM.
    /// Not written when empty, so the stored form of other specs is unchanged.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub stop_signal: String,
    /// Secrets of the job's pool the task receives, each as an environment
    /// variable or a file (decision 0032); names only, never values.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<crate::task_secret::SecretRef>,
}

/// The signals a task may ask to be stopped with (`stop_signal`): those a
/// program can catch to shut down its own way. SIGKILL and SIGSTOP are not
/// among them (nothing can catch them), nor are signals that report faults.
pub const STOP_SIGNALS: &[&str] =
    &["SIGTERM", "SIGINT", "SIGQUIT", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGPWR", "SIGWINCH"];

impl TaskSpec {
    /// Checks sizes and internal consistency.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.command.is_empty() && self.image.is_none() {
            return Err(SpecError::Empty("command"));
        }
        check_len("command", &self.command)?;
        if !self.stop_signal.is_empty() && !STOP_SIGNALS.contains(&self.stop_signal.as_str()) {
            return Err(SpecError::Invalid {
                field: "stop_signal",
                reason: format!("`{}` is not one of {}", self.stop_signal, STOP_SIGNALS.join(", ")),
            });
        }
        check_count("args", self.args.len())?;
        for a in &self.args {
            check_len("args", a)?;
        }
        check_count("env", self.env.len())?;
        for (k, v) in &self.env {
            if k.is_empty() {
                return Err(SpecError::Empty("env key"));
            }
            check_len("env", k)?;
            check_len("env", v)?;
        }
        if let Some(image) = &self.image {
            if image.is_empty() {
                return Err(SpecError::Empty("image"));
            }
            check_len("image", image)?;
        }
        check_count("ports", self.ports.len())?;
        if self.resources.ports != self.ports.len() as u64 {
            return Err(SpecError::Invalid {
                field: "resources.ports",
                reason: format!("is {} but {} port names are given", self.resources.ports, self.ports.len()),
            });
        }
        let gpu = self.resources.gpu_milli;
        if gpu > crate::resources::GPU_MILLI && !gpu.is_multiple_of(crate::resources::GPU_MILLI) {
            return Err(SpecError::Invalid {
                field: "resources.gpu_milli",
                reason: format!(
                    "is {gpu}: ask for whole GPUs (a multiple of 1000) or for a share of one GPU (below 1000), \
                     not for both"
                ),
            });
        }
        check_count("gpu_models", self.gpu_models.len())?;
        for m in &self.gpu_models {
            if m.is_empty() {
                return Err(SpecError::Empty("gpu_models"));
            }
            check_len("gpu_models", m)?;
        }
        if !self.gpu_models.is_empty() && gpu == 0 {
            return Err(SpecError::Invalid {
                field: "gpu_models",
                reason: "names GPU models but the task asks for no GPU (resources.gpu_milli or gpus)".into(),
            });
        }
        check_count("constraints", self.constraints.len())?;
        for (i, c) in self.constraints.iter().enumerate() {
            c.validate(i)?;
        }
        check_count("preferences", self.preferences.len())?;
        check_count("labels", self.labels.len())?;
        if let Some(h) = &self.health_check {
            h.validate()?;
            if let Some(port) = h.probe_port()
                && !self.ports.iter().any(|p| p == port)
            {
                return Err(SpecError::Invalid {
                    field: "health_check.port",
                    reason: format!("names port {port:?}, which is not in ports"),
                });
            }
        }
        if let Some(v) = &self.volume {
            if v.name.is_empty() {
                return Err(SpecError::Empty("volume.name"));
            }
            check_len("volume.name", &v.name)?;
        }
        crate::task_secret::check_refs(&self.secrets)?;
        Ok(())
    }
}

/// What the runtime does when a run ends.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartPolicy {
    /// Restart after a failure (non-zero exit, failed health check, LOST).
    #[serde(default)]
    pub on_failure: bool,
    /// Restart after a success too (services that should never end).
    #[serde(default)]
    pub on_success: bool,
    /// Most restarts of one instance; `None` for no limit.
    #[serde(default)]
    pub max_restarts: Option<u32>,
    /// Seconds to wait before a restart (grows with consecutive failures).
    #[serde(default)]
    pub backoff_secs: u32,
}

/// A persistent volume that outlives runs (stateful jobs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeSpec {
    /// Name, unique within the job; the agent keeps the directory per instance.
    pub name: String,
    /// Size in MiB, counted against the task's disk.
    pub size_mib: u64,
}

/// The state of one task run. See ARCHITECTURE §3.
///
/// ```text
/// INITIALIZED → PENDING → READY → PLACING → PLACED → LAUNCHING → LAUNCHED
///   → STARTING → RUNNING → {SUCCEEDED, FAILED, LOST, KILLED}
/// PREEMPTING and KILLING from any live state; timeouts send PLACING,
/// LAUNCHING and PREEMPTING back to READY.
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskState {
    /// Created in storage; not yet handed to the resource manager.
    Initialized,
    /// Queued in a resource pool, waiting for admission.
    Pending,
    /// Admitted (its gang fits the pool's entitlement); waiting for placement.
    Ready,
    /// A placement engine holds it in a round.
    Placing,
    /// A host is chosen; not yet sent to the host.
    Placed,
    /// The launch is being sent to the host's provider.
    Launching,
    /// The provider accepted the launch.
    Launched,
    /// The process is starting (sandbox set up, health check not yet passed).
    Starting,
    /// Running (and healthy, if it has a health check).
    Running,
    /// Exited with status 0. Terminal.
    Succeeded,
    /// Exited non-zero, failed its health check or ran past its max run time. Terminal.
    Failed,
    /// Its host or agent disappeared. Terminal.
    Lost,
    /// Killed on request. Terminal.
    Killed,
    /// Being killed to make room for other work; returns to READY when done or timed out.
    Preempting,
    /// Being killed on request.
    Killing,
}

impl TaskState {
    /// Every state, in lifecycle order.
    pub const ALL: [TaskState; 15] = [
        TaskState::Initialized,
        TaskState::Pending,
        TaskState::Ready,
        TaskState::Placing,
        TaskState::Placed,
        TaskState::Launching,
        TaskState::Launched,
        TaskState::Starting,
        TaskState::Running,
        TaskState::Succeeded,
        TaskState::Failed,
        TaskState::Lost,
        TaskState::Killed,
        TaskState::Preempting,
        TaskState::Killing,
    ];

    /// The name used in storage and in the API (`RUNNING`).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Initialized => "INITIALIZED",
            TaskState::Pending => "PENDING",
            TaskState::Ready => "READY",
            TaskState::Placing => "PLACING",
            TaskState::Placed => "PLACED",
            TaskState::Launching => "LAUNCHING",
            TaskState::Launched => "LAUNCHED",
            TaskState::Starting => "STARTING",
            TaskState::Running => "RUNNING",
            TaskState::Succeeded => "SUCCEEDED",
            TaskState::Failed => "FAILED",
            TaskState::Lost => "LOST",
            TaskState::Killed => "KILLED",
            TaskState::Preempting => "PREEMPTING",
            TaskState::Killing => "KILLING",
        }
    }

    /// Where the state falls in one run's life, for ordering events of the
    /// same millisecond: a run only moves forward through these, so of two
    /// events recorded in one instant the one with the higher rank came
    /// last. Being stopped (PREEMPTING, KILLING) comes after running and
    /// before the end; every end ranks last.
    pub fn timeline_rank(self) -> u8 {
        match self {
            TaskState::Initialized => 0,
            TaskState::Pending => 1,
            TaskState::Ready => 2,
            TaskState::Placing => 3,
            TaskState::Placed => 4,
            TaskState::Launching => 5,
            TaskState::Launched => 6,
            TaskState::Starting => 7,
            TaskState::Running => 8,
            TaskState::Preempting | TaskState::Killing => 9,
            TaskState::Succeeded | TaskState::Failed | TaskState::Lost | TaskState::Killed => 10,
        }
    }

    /// Parses [`TaskState::as_str`]'s names.
    pub fn parse(s: &str) -> Option<TaskState> {
        TaskState::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// A run in a terminal state never changes again; a restart is a new run.
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskState::Succeeded | TaskState::Failed | TaskState::Lost | TaskState::Killed)
    }

    /// States that hold (or are about to hold) resources on a host.
    pub fn is_on_host(self) -> bool {
        matches!(
            self,
            TaskState::Launching
                | TaskState::Launched
                | TaskState::Starting
                | TaskState::Running
                | TaskState::Preempting
                | TaskState::Killing
        )
    }

    /// Whether `self → to` is in the transition table. Staying in the same
    /// state is allowed (an idempotent re-write), except out of a terminal state
    /// where nothing is.
    pub fn can_transition(self, to: TaskState) -> bool {
        use TaskState::*;
        if self.is_terminal() {
            return false;
        }
        if self == to {
            return true;
        }
        // Killing and losing can happen from any live state.
        if matches!(to, Killing | Killed | Lost) {
            return true;
        }
        matches!(
            (self, to),
            (Initialized, Pending)
                | (Pending, Ready)
                | (Ready, Placing)
                | (Ready, Pending)
                | (Placing, Placed)
                | (Placing, Ready)
                | (Placed, Launching)
                | (Placed, Ready)
                | (Launching, Launched)
                | (Launching, Ready)
                | (Launching, Failed)
                | (Launched, Starting)
                | (Launched, Running)
                | (Launched, Failed)
                | (Starting, Running)
                | (Starting, Failed)
                | (Starting, Succeeded)
                | (Running, Succeeded)
                | (Running, Failed)
                | (Launched | Starting | Running, Preempting)
                | (Preempting, Ready)
                | (Preempting, Failed)
                | (Killing, Failed)
                | (Killing, Succeeded)
        )
    }

    /// The timeout rule of a transient state: after the duration without a
    /// change, the runtime moves the task to the returned state. The one
    /// table of these defaults: the resource manager's `Timeouts::default`
    /// reads it (a launch may wait on an image or a slow host for minutes; a
    /// preemption waits for its victims' stop grace periods).
    pub fn timeout(self) -> Option<(Duration, TaskState)> {
        match self {
            TaskState::Placing => Some((Duration::from_secs(60), TaskState::Ready)),
            TaskState::Launching => Some((Duration::from_secs(300), TaskState::Ready)),
            TaskState::Preempting => Some((Duration::from_secs(120), TaskState::Ready)),
            _ => None,
        }
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the runtime wants an instance to become; the goal-state engine
/// drives `state` toward it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskGoal {
    /// Keep a run going (services) or run it to completion (batch).
    #[default]
    Run,
    /// Run once to success (batch); do not restart after it.
    Succeed,
    /// Kill the run and leave the instance stopped.
    Kill,
    /// Kill the run and remove the instance (job shrunk or deleted).
    Delete,
}

/// Names one task: instance `instance` of job `job_id`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TaskId {
    /// The job.
    pub job_id: String,
    /// Instance number, `0..instance_count`.
    pub instance: u32,
}

impl TaskId {
    /// The id of instance `instance` of `job_id`.
    pub fn new(job_id: impl Into<String>, instance: u32) -> Self {
        TaskId { job_id: job_id.into(), instance }
    }

    /// The run id of run `run` of this task, `<job>-<instance>-<run>`, as
    /// text ([`RunId`](crate::run_id::RunId) formats it).
    pub fn run_id(&self, run: u64) -> String {
        crate::run_id::RunId::of_task(self, run).to_string()
    }

    /// Splits a task id `<job>-<instance>` into its job and instance
    /// (from the right: job ids may contain `-`); `None` if it is not one.
    pub fn split(task_id: &str) -> Option<(&str, u32)> {
        let (job, instance) = task_id.rsplit_once('-')?;
        let canonical = !instance.is_empty()
            && instance.bytes().all(|b| b.is_ascii_digit())
            && (instance == "0" || !instance.starts_with('0'));
        let instance = if canonical { instance.parse().ok()? } else { return None };
        (!job.is_empty()).then_some((job, instance))
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.job_id, self.instance)
    }
}

/// The mutable record of one instance: its current run, where it runs,
/// what the runtime wants of it. Written with compare-and-set on `version`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskRuntime {
    /// Current state of the current run.
    pub state: TaskState,
    /// What the runtime drives the instance toward.
    pub goal: TaskGoal,
    /// Run number, starting at 1; a restart increments it. With the task id
    /// it forms the run id ([`TaskId::run_id`]).
    pub run: u64,
    /// Number of the previous run, 0 if none (for history walks).
    pub prev_run: u64,
    /// Job config version this run was started from.
    pub config_version: u64,
    /// Job config version the instance should run; differs from
    /// `config_version` while an update is rolling out.
    pub desired_config_version: u64,
    /// Host the run is placed on, once placed.
    pub host: Option<String>,
    /// Provider's id of the agent on that host (e.g. a Mesos agent id).
    pub agent_id: Option<String>,
    /// Assigned host ports by name.
    pub ports: BTreeMap<String, u16>,
    /// Short machine-readable reason of the last transition (`EXITED`, `HEALTH_FAILED`, …).
    pub reason: String,
    /// Human-readable detail of the last transition.
    pub message: String,
    /// Consecutive failed runs (reset by a success), for restart backoff.
    pub failure_count: u32,
    /// When the current run started running, milliseconds since the epoch.
    pub started_at_ms: Option<u64>,
    /// When the current run ended, milliseconds since the epoch.
    pub completed_at_ms: Option<u64>,
    /// Last change, milliseconds since the epoch.
    pub updated_at_ms: u64,
    /// The current run's health as its host last reported it; `None`: no
    /// health check, or no result yet. Absent in records written before it
    /// existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy: Option<bool>,
    /// The GPU devices of `host` the current run holds (placement's grant);
    /// empty when it asks for none. Absent in records written before GPU
    /// shares.
    #[serde(default, skip_serializing_if = "crate::gpu::GpuGrant::is_empty")]
    pub gpu: crate::gpu::GpuGrant,
    /// Storage version for compare-and-set: 1 when created, +1 per write.
    /// Owned by the store: callers pass the version they read.
    pub version: u64,
}

impl TaskRuntime {
    /// The runtime of a new instance: first run, INITIALIZED, version 0
    /// until the store writes it.
    pub fn initial(config_version: u64, now_ms: u64) -> Self {
        TaskRuntime {
            state: TaskState::Initialized,
            goal: TaskGoal::Run,
            run: 1,
            prev_run: 0,
            config_version,
            desired_config_version: config_version,
            host: None,
            agent_id: None,
            ports: BTreeMap::new(),
            reason: String::new(),
            message: String::new(),
            failure_count: 0,
            started_at_ms: None,
            completed_at_ms: None,
            updated_at_ms: now_ms,
            healthy: None,
            gpu: crate::gpu::GpuGrant::default(),
            version: 0,
        }
    }

    /// Starts a new run: run number +1, state INITIALIZED, host cleared.
    pub fn next_run(&self, now_ms: u64) -> Self {
        TaskRuntime {
            state: TaskState::Initialized,
            run: self.run + 1,
            prev_run: self.run,
            config_version: self.desired_config_version,
            host: None,
            agent_id: None,
            ports: BTreeMap::new(),
            reason: String::new(),
            message: String::new(),
            started_at_ms: None,
            completed_at_ms: None,
            updated_at_ms: now_ms,
            healthy: None,
            ..self.clone()
        }
    }

    /// Checks sizes of the free-form fields.
    pub fn validate(&self) -> Result<(), SpecError> {
        check_len("reason", &self.reason)?;
        check_len("message", &self.message)?;
        if let Some(h) = &self.host {
            check_len("host", h)?;
        }
        check_count("ports", self.ports.len())?;
        if self.run == 0 {
            return Err(SpecError::Invalid { field: "run", reason: "run numbers start at 1".into() });
        }
        Ok(())
    }
}

/// One state change of a task run, kept as bounded history per task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskEvent {
    /// Run number the event belongs to.
    pub run: u64,
    /// State before the change; `None` for the first event of a run.
    pub from: Option<TaskState>,
    /// State after the change.
    pub to: TaskState,
    /// When, milliseconds since the epoch.
    pub at_ms: u64,
    /// Host at the time, if any.
    pub host: Option<String>,
    /// Short machine-readable reason.
    pub reason: String,
    /// Human-readable detail.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_split_from_the_right_and_malformed_ones_are_none() {
        assert_eq!(TaskId::split("my-job-3"), Some(("my-job", 3)));
        assert_eq!(TaskId::split(&TaskId::new("a-b", 0).to_string()), Some(("a-b", 0)));
        for bad in ["", "job", "job-", "-3", "job-x", "job-+3", "job-03", "job-4294967296"] {
            assert_eq!(TaskId::split(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn transition_table() {
        use TaskState::*;
        let cases = [
            (Initialized, Pending, true),
            (Pending, Ready, true),
            (Ready, Placing, true),
            (Placing, Ready, true),
            (Placing, Running, false),
            (Running, Succeeded, true),
            (Succeeded, Running, false),
            (Killed, Killed, false),
            (Running, Preempting, true),
            (Preempting, Ready, true),
            (Pending, Killing, true),
            (Ready, Lost, true),
        ];
        for (from, to, ok) in cases {
            assert_eq!(from.can_transition(to), ok, "{from} → {to}");
        }
        assert_eq!(Placing.timeout().map(|t| t.1), Some(Ready));
        // What the resource manager has always used: a launch may take
        // minutes, a preemption waits for its victims' grace periods.
        assert_eq!(Launching.timeout().map(|t| t.0.as_secs()), Some(300));
        assert_eq!(Preempting.timeout().map(|t| t.0.as_secs()), Some(120));
        assert_eq!(Running.timeout(), None);
        for s in TaskState::ALL {
            assert_eq!(TaskState::parse(s.as_str()), Some(s));
        }
    }

    #[test]
    fn spec_validation() {
        let mut s = TaskSpec { command: "sleep".into(), ..Default::default() };
        assert!(s.validate().is_ok());
        s.ports = vec!["http".into()];
        assert!(s.validate().is_err());
        s.resources.ports = 1;
        assert!(s.validate().is_ok());
        s.args = vec!["x".repeat(limits::MAX_STRING + 1)];
        assert!(matches!(s.validate(), Err(SpecError::TooLong { .. })));
    }

    #[test]
    fn gpu_asks_are_whole_devices_or_a_share_and_models_need_an_ask() {
        let spec = |milli: u64, models: &[&str]| TaskSpec {
            command: "x".into(),
            resources: Resources { gpu_milli: milli, ..Resources::ZERO },
            gpu_models: models.iter().map(|m| m.to_string()).collect(),
            ..Default::default()
        };
        for ok in [0, 1, 500, 999, 1000, 3000] {
            assert!(spec(ok, &[]).validate().is_ok(), "{ok}");
        }
        for bad in [1500, 2001] {
            let e = spec(bad, &[]).validate().expect_err("whole and a share");
            assert!(
                matches!(&e, SpecError::Invalid { field: "resources.gpu_milli", .. })
                    && e.to_string().contains("not for both"),
                "{e}"
            );
        }
        assert!(spec(500, &["T4"]).validate().is_ok());
        assert!(matches!(spec(0, &["T4"]).validate(), Err(SpecError::Invalid { field: "gpu_models", .. })));
        assert!(matches!(spec(500, &[""]).validate(), Err(SpecError::Empty("gpu_models"))));
        let long = "m".repeat(limits::MAX_STRING + 1);
        assert!(matches!(spec(500, &[long.as_str()]).validate(), Err(SpecError::TooLong { field: "gpu_models", .. })));
    }

    #[test]
    fn runs() {
        let r = TaskRuntime::initial(3, 10);
        let n = r.next_run(20);
        assert_eq!((n.run, n.prev_run, n.config_version), (2, 1, 3));
        assert_eq!(TaskId::new("j", 4).run_id(n.run), "j-4-2");
    }
}
