//! Jobs: the versioned config a user submits (kind, SLA, task spec, update
//! spec), the job's runtime record (state, counts, version for
//! compare-and-set), and update workflows with per-instance progress.
//!
//! A job's config is immutable once written: an edit writes a new config
//! version, and an update workflow moves instances from one version to the
//! next. The runtime is the only mutable part and is written with
//! compare-and-set on its `version`.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::Labels;
use crate::task::{SpecError, TaskSpec, TaskState, check_count, check_len};

/// Most instances one job may have.
pub const MAX_INSTANCES: u32 = 1_000_000;

/// Longest owner lease (a day): a longer one would not catch a dead owner
/// in any useful time.
pub const MAX_OWNER_LEASE_SECS: u32 = 86_400;

/// The kind of a job decides its lifecycle plugin and defaults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// Runs to completion; instances that succeed are not restarted.
    #[default]
    Batch,
    /// A service without local state: restarted anywhere, rolling updates.
    Stateless,
    /// A service with persistent volumes: sticky hosts, ordered updates.
    Stateful,
    /// One instance on each eligible host.
    Daemon,
}

impl JobKind {
    /// The name used in storage, plugin slots and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Batch => "batch",
            JobKind::Stateless => "stateless",
            JobKind::Stateful => "stateful",
            JobKind::Daemon => "daemon",
        }
    }
}

/// Service-level terms of a job: how it competes for resources.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Sla {
    /// Higher runs first within a pool and is preempted last.
    pub priority: u32,
    /// May be killed to make room for other work.
    pub preemptible: bool,
    /// May run on slack (reserved but unused) capacity; implies preemptible.
    pub revocable: bool,
    /// Most instances running at once; `None`: all.
    pub max_running_instances: Option<u32>,
    /// Gang size: instances are admitted and placed in groups of this many
    /// (all or none); `None` or 1: one at a time.
    pub min_running_instances: Option<u32>,
    /// A run longer than this many seconds is killed and marked FAILED.
    pub max_run_time_secs: Option<u64>,
    /// Most instances an update or maintenance may take down at once.
    pub max_unavailable_instances: Option<u32>,
    /// A preempted run ends its task (KILLED, reason `PREEMPTED`) instead
    /// of being queued to run again: for work whose owner replaces it
    /// (the pods of the pod scheduler, whose eviction deletes the pod), or
    /// that is not worth a second run. Peloton's `killOnPreempt`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub kill_on_preempt: bool,
}

/// How an update rolls a new config out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpdateSpec {
    /// Instances updated at once; 0 updates all at once.
    pub batch_size: u32,
    /// Failed instances after which the update stops (and rolls back if asked).
    pub max_failed_instances: u32,
    /// Roll back to the previous config when the update fails.
    pub rollback_on_failure: bool,
    /// Create the update paused; it starts when resumed.
    pub start_paused: bool,
}

impl Default for UpdateSpec {
    fn default() -> Self {
        UpdateSpec { batch_size: 1, max_failed_instances: 0, rollback_on_failure: true, start_paused: false }
    }
}

/// One version of a job's config: everything the user said about the job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JobConfig {
    /// Human-readable name, unique per owner by convention (not enforced).
    pub name: String,
    /// Owning user or team; authorization and listing key.
    pub owner: String,
    /// Leaf resource pool path the job's tasks are admitted in, e.g. `/infra/batch`.
    pub pool: String,
    /// Batch, stateless, stateful or daemon.
    pub kind: JobKind,
    /// Number of instances, `0..instance_count`.
    pub instance_count: u32,
    /// Service-level terms.
    pub sla: Sla,
    /// The spec every instance runs unless overridden.
    pub default_task: TaskSpec,
    /// Per-instance specs replacing `default_task` for those instances.
    pub instance_overrides: BTreeMap<u32, TaskSpec>,
    /// Labels on the job (queries by label; copied to task views).
    pub labels: Labels,
    /// How updates of this job roll out.
    pub update: UpdateSpec,
    /// Plugin slot overrides: slot (`placement/batch`) → plugin name this job wants.
    pub plugin_overrides: BTreeMap<String, String>,
    /// Free-form description.
    pub description: String,
    /// The job's tasks are controllers (e.g. a Spark driver that runs its
    /// executors as another job): in its pool they count against the pool's
    /// `controller_limit_percent` as well. Not written when false, so the
    /// stored form of every other job is unchanged.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub controller: bool,
    /// The job is kept alive by its owner (decision 0041): unless someone
    /// renews its owner lease (`RenewOwnerLease`) at least every this many
    /// seconds, the job is killed. For a job driven by a program outside the
    /// cluster, such as a Spark driver in client mode, so that its work stops
    /// when that program dies without cleaning up. `None`: no lease. Not
    /// written when unset, so the stored form of every other job is unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner_lease_secs: Option<u32>,
    /// What each member of a gang learns about the others
    /// ([`crate::gang`]); only for jobs with gangs
    /// (`sla.min_running_instances` above 1). Not written when default, so
    /// the stored form of every other job is unchanged.
    #[serde(skip_serializing_if = "crate::gang::GangSpec::is_default")]
    pub gang: crate::gang::GangSpec,
    /// The host user the job's tasks run as: a user name of the hosts or a
    /// uid ([`crate::task_user`]), only one the pool's `task_users` allows.
    /// `None` (the default): each run gets a uid of its own (decision
    /// 0047). Not written when unset, so the stored form of every other job
    /// is unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

impl JobConfig {
    /// The spec instance `instance` runs.
    pub fn task_spec(&self, instance: u32) -> &TaskSpec {
        self.instance_overrides.get(&instance).unwrap_or(&self.default_task)
    }

    /// Checks names, sizes, the SLA and every task spec.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.name.is_empty() {
            return Err(SpecError::Empty("name"));
        }
        if self.owner.is_empty() {
            return Err(SpecError::Empty("owner"));
        }
        if !self.pool.starts_with('/') {
            return Err(SpecError::Invalid {
                field: "pool",
                reason: format!("`{}` is not a path starting with /", self.pool),
            });
        }
        check_len("name", &self.name)?;
        check_len("owner", &self.owner)?;
        check_len("pool", &self.pool)?;
        check_len("description", &self.description)?;
        check_count("labels", self.labels.len())?;
        for (k, v) in &self.labels {
            check_len("labels", k)?;
            check_len("labels", v)?;
        }
        if self.instance_count > MAX_INSTANCES {
            return Err(SpecError::Invalid {
                field: "instance_count",
                reason: format!("{} is more than the limit of {MAX_INSTANCES}", self.instance_count),
            });
        }
        if let Some(gang) = self.sla.min_running_instances
            && gang > self.instance_count.max(1)
        {
            return Err(SpecError::Invalid {
                field: "sla.min_running_instances",
                reason: format!("gang of {gang} is larger than the job's {} instances", self.instance_count),
            });
        }
        self.default_task.validate()?;
        check_count("instance_overrides", self.instance_overrides.len())?;
        for (i, spec) in &self.instance_overrides {
            if *i >= self.instance_count {
                return Err(SpecError::Invalid {
                    field: "instance_overrides",
                    reason: format!("instance {i} is not below instance_count {}", self.instance_count),
                });
            }
            spec.validate()?;
        }
        check_count("plugin_overrides", self.plugin_overrides.len())?;
        self.validate_gang()?;
        if let Some(secs) = self.owner_lease_secs
            && !(1..=MAX_OWNER_LEASE_SECS).contains(&secs)
        {
            return Err(SpecError::Invalid {
                field: "owner_lease_secs",
                reason: format!("{secs} is not between 1 and {MAX_OWNER_LEASE_SECS} seconds"),
            });
        }
        if let Some(user) = &self.user {
            crate::task_user::check_user(user).map_err(|reason| SpecError::Invalid { field: "user", reason })?;
        }
        Ok(())
    }
}

impl JobConfig {
    /// A framework's discovery needs a gang, and a coordinator port on
    /// every instance (its first port; rank 0's is the coordinator's).
    fn validate_gang(&self) -> Result<(), SpecError> {
        let discovery = self.gang.discovery;
        if discovery == crate::gang::GangDiscovery::None {
            return Ok(());
        }
        if self.sla.min_running_instances.unwrap_or(1) <= 1 {
            return Err(SpecError::Invalid {
                field: "gang.discovery",
                reason: format!(
                    "{} needs a gang: set sla.min_running_instances to the number of processes",
                    discovery.as_str()
                ),
            });
        }
        let portless = std::iter::once(("default_task".to_string(), &self.default_task))
            .chain(self.instance_overrides.iter().map(|(i, s)| (format!("instance_overrides[{i}]"), s)))
            .find(|(_, s)| s.ports.is_empty());
        if let Some((which, _)) = portless {
            return Err(SpecError::Invalid {
                field: "gang.discovery",
                reason: format!(
                    "{} needs a port for its coordinator, and {which} names none (add e.g. `ports: [coord]`)",
                    discovery.as_str()
                ),
            });
        }
        Ok(())
    }

    /// Refuses control characters in the fields listings print (name, owner,
    /// pool, labels, plugin overrides, description): a terminal that shows
    /// `job list` would otherwise run escape sequences a job's author put
    /// there (retitle the window, hide text, rewrite earlier lines). The
    /// description may hold line breaks and tabs (it is prose); nothing
    /// else. Task commands, arguments and environment are the program's
    /// business and may hold anything.
    ///
    /// A rule for new input (the API checks it on create and update), not
    /// part of [`JobConfig::validate`]: the store validates what it writes,
    /// and jobs stored before the rule must still restore from a snapshot,
    /// migrate and show (clients print them escaped).
    pub fn check_printable(&self) -> Result<(), SpecError> {
        check_printable("name", &self.name, "")?;
        check_printable("owner", &self.owner, "")?;
        check_printable("pool", &self.pool, "")?;
        check_printable("description", &self.description, "\n\t")?;
        for (k, v) in &self.labels {
            check_printable("labels", k, "")?;
            check_printable("labels", v, "")?;
        }
        for (k, v) in &self.plugin_overrides {
            check_printable("plugin_overrides", k, "")?;
            check_printable("plugin_overrides", v, "")?;
        }
        let tasks = std::iter::once(("default_task.labels", &self.default_task))
            .chain(self.instance_overrides.values().map(|t| ("instance_overrides.labels", t)));
        for (field, task) in tasks {
            for (k, v) in &task.labels {
                check_printable(field, k, "")?;
                check_printable(field, v, "")?;
            }
        }
        Ok(())
    }
}

/// Whether `c` is a control character: C0 (U+0000–U+001F), DEL (U+007F)
/// or C1 (U+0080–U+009F, which some terminals read as escapes too).
pub fn is_control(c: char) -> bool {
    c.is_control()
}

/// Refuses a control character in `value` other than those in `allowed`,
/// naming the field, the character and where it is.
fn check_printable(field: &'static str, value: &str, allowed: &str) -> Result<(), SpecError> {
    match value.char_indices().find(|(_, c)| is_control(*c) && !allowed.contains(*c)) {
        None => Ok(()),
        Some((at, c)) => Err(SpecError::Invalid {
            field,
            reason: format!(
                "contains the control character U+{:04X} at byte {at} of `{}`; control characters (terminal escape sequences) are not allowed",
                c as u32,
                value.escape_debug()
            ),
        }),
    }
}

/// The state of a job as a whole; derived from its tasks' states.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// Written; tasks not yet created.
    #[default]
    Initialized,
    /// Tasks exist; none is running yet.
    Pending,
    /// At least one task is running or about to.
    Running,
    /// Every instance succeeded. Terminal.
    Succeeded,
    /// Too many instances failed. Terminal.
    Failed,
    /// Being killed.
    Killing,
    /// Killed on request. Terminal.
    Killed,
}

impl JobState {
    /// Every state.
    pub const ALL: [JobState; 7] = [
        JobState::Initialized,
        JobState::Pending,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Killing,
        JobState::Killed,
    ];

    /// The name used in storage and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Initialized => "INITIALIZED",
            JobState::Pending => "PENDING",
            JobState::Running => "RUNNING",
            JobState::Succeeded => "SUCCEEDED",
            JobState::Failed => "FAILED",
            JobState::Killing => "KILLING",
            JobState::Killed => "KILLED",
        }
    }

    /// Parses [`JobState::as_str`]'s names.
    pub fn parse(s: &str) -> Option<JobState> {
        JobState::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// A terminal job changes no more (until a restart makes it live again).
    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Succeeded | JobState::Failed | JobState::Killed)
    }

    /// Derives the job state from task counts: all succeeded → SUCCEEDED;
    /// everything terminal with more than `max_failed` failures → FAILED;
    /// all terminal with a kill → KILLED; any task beyond PENDING → RUNNING;
    /// any task at all → PENDING.
    pub fn derive(counts: &BTreeMap<TaskState, u32>, instance_count: u32, max_failed: u32) -> JobState {
        let n = |s: TaskState| counts.get(&s).copied().unwrap_or(0);
        let total: u32 = counts.values().sum();
        let terminal: u32 = counts.iter().filter(|(s, _)| s.is_terminal()).map(|(_, c)| *c).sum();
        if total == 0 {
            return JobState::Initialized;
        }
        if total >= instance_count && terminal == total {
            if n(TaskState::Succeeded) == total {
                return JobState::Succeeded;
            }
            if n(TaskState::Failed) + n(TaskState::Lost) > max_failed {
                return JobState::Failed;
            }
            if n(TaskState::Killed) > 0 {
                return JobState::Killed;
            }
            return JobState::Succeeded;
        }
        if n(TaskState::Killing) > 0 && n(TaskState::Killing) + terminal == total {
            return JobState::Killing;
        }
        let waiting = n(TaskState::Initialized) + n(TaskState::Pending);
        if waiting + terminal == total { JobState::Pending } else { JobState::Running }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the runtime wants the job to become.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobGoal {
    /// Run the job's instances.
    #[default]
    Run,
    /// Kill every instance.
    Kill,
    /// Kill every instance and delete the job.
    Delete,
}

/// The mutable record of a job. Written with compare-and-set on `version`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRuntime {
    /// Current state, derived from task counts.
    pub state: JobState,
    /// What the runtime drives the job toward.
    pub goal: JobGoal,
    /// Config version the job's instances run (or are moving away from).
    pub config_version: u64,
    /// Config version the instances should run.
    pub desired_config_version: u64,
    /// Instances per task state, as last counted by the job manager.
    pub task_counts: BTreeMap<TaskState, u32>,
    /// The update in progress, if any.
    pub update_id: Option<String>,
    /// When the job was created, milliseconds since the epoch.
    pub created_at_ms: u64,
    /// Last change, milliseconds since the epoch.
    pub updated_at_ms: u64,
    /// When the job reached a terminal state, if it has.
    pub completed_at_ms: Option<u64>,
    /// Human-readable detail of the last change.
    pub message: String,
    /// Storage version for compare-and-set: 1 when created, +1 per write.
    /// Owned by the store: callers pass the version they read.
    pub version: u64,
}

impl JobRuntime {
    /// The runtime of a newly created job at config version `config_version`.
    pub fn initial(config_version: u64, now_ms: u64) -> Self {
        JobRuntime {
            state: JobState::Initialized,
            goal: JobGoal::Run,
            config_version,
            desired_config_version: config_version,
            task_counts: BTreeMap::new(),
            update_id: None,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            completed_at_ms: None,
            message: String::new(),
            version: 0,
        }
    }

    /// Checks sizes of free-form fields.
    pub fn validate(&self) -> Result<(), SpecError> {
        check_len("message", &self.message)?;
        if let Some(u) = &self.update_id {
            check_len("update_id", u)?;
        }
        Ok(())
    }
}

/// The state of an update workflow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum UpdateState {
    /// Created; no instance touched yet.
    #[default]
    Initialized,
    /// Moving instances to the new config, batch by batch.
    RollingForward,
    /// Paused by an operator (or created paused).
    Paused,
    /// Every instance runs the new config. Terminal.
    Succeeded,
    /// Moving instances back to the previous config after a failure.
    RollingBackward,
    /// Rolled back to the previous config. Terminal.
    RolledBack,
    /// Stopped by an operator, instances left where they are. Terminal.
    Aborted,
    /// Failed without rollback. Terminal.
    Failed,
}

impl UpdateState {
    /// A terminal update changes no more.
    pub fn is_terminal(self) -> bool {
        matches!(self, UpdateState::Succeeded | UpdateState::RolledBack | UpdateState::Aborted | UpdateState::Failed)
    }
}

/// Where one instance stands in an update.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum InstanceUpdateState {
    /// Not yet in a batch.
    #[default]
    Pending,
    /// In the current batch: being restarted on the new config.
    InProgress,
    /// Running the new config and healthy.
    Succeeded,
    /// Did not come up on the new config.
    Failed,
    /// Moved back to the previous config.
    RolledBack,
}

/// Progress of one instance in an update.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceProgress {
    /// Instance number.
    pub instance: u32,
    /// Where it stands.
    pub state: InstanceUpdateState,
    /// Attempts so far.
    pub attempts: u32,
    /// Last change, milliseconds since the epoch.
    pub updated_at_ms: u64,
}

/// An update workflow: moves a job from one config version to another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Update {
    /// Unique id of the update.
    pub id: String,
    /// The job being updated.
    pub job_id: String,
    /// Config version instances move away from.
    pub from_config_version: u64,
    /// Config version instances move to.
    pub to_config_version: u64,
    /// Workflow state.
    pub state: UpdateState,
    /// How it rolls out (copied from the config at creation).
    pub spec: UpdateSpec,
    /// Instances the update touches, in order.
    pub instances: Vec<u32>,
    /// When created, milliseconds since the epoch.
    pub created_at_ms: u64,
    /// Last change, milliseconds since the epoch.
    pub updated_at_ms: u64,
    /// Human-readable detail of the last change.
    pub message: String,
    /// Storage version for compare-and-set, owned by the store.
    pub version: u64,
}

impl Update {
    /// Checks ids and sizes.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.id.is_empty() {
            return Err(SpecError::Empty("id"));
        }
        if self.job_id.is_empty() {
            return Err(SpecError::Empty("job_id"));
        }
        check_len("id", &self.id)?;
        check_len("message", &self.message)?;
        if self.instances.len() > MAX_INSTANCES as usize {
            return Err(SpecError::TooMany {
                field: "instances",
                len: self.instances.len(),
                max: MAX_INSTANCES as usize,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> JobConfig {
        JobConfig {
            name: "web".into(),
            owner: "team-a".into(),
            pool: "/prod".into(),
            kind: JobKind::Stateless,
            instance_count: 3,
            default_task: TaskSpec { command: "serve".into(), ..Default::default() },
            ..Default::default()
        }
    }

    #[test]
    fn validation() {
        assert!(config().validate().is_ok());
        let mut c = config();
        c.pool = "prod".into();
        assert!(c.validate().is_err());
        let mut c = config();
        c.instance_overrides.insert(7, c.default_task.clone());
        assert!(c.validate().is_err());
        let mut c = config();
        c.sla.min_running_instances = Some(4);
        assert!(c.validate().is_err());
        let mut c = config();
        c.user = Some("nobody".into());
        assert!(c.validate().is_ok());
        for root in ["root", "0"] {
            c.user = Some(root.into());
            assert!(
                matches!(c.validate(), Err(SpecError::Invalid { field: "user", ref reason }) if reason.contains("root")),
                "{root}"
            );
        }
    }

    #[test]
    fn a_framework_discovery_needs_a_gang_and_a_port_on_every_instance() {
        let mut c = config();
        c.gang.discovery = crate::gang::GangDiscovery::Pytorch;
        let field = |c: &JobConfig| match c.validate() {
            Err(SpecError::Invalid { field, reason }) => format!("{field}: {reason}"),
            other => format!("{other:?}"),
        };
        assert!(field(&c).starts_with("gang.discovery: pytorch needs a gang"), "{}", field(&c));
        c.sla.min_running_instances = Some(3);
        assert!(field(&c).contains("default_task names none"), "{}", field(&c));
        c.default_task.ports = vec!["coord".into()];
        c.default_task.resources.ports = 1;
        assert!(c.validate().is_ok());
        c.instance_overrides.insert(2, TaskSpec { command: "x".into(), ..Default::default() });
        assert!(field(&c).contains("instance_overrides[2] names none"), "{}", field(&c));
        // `none` asks for nothing: a gang's members still get PACELINE_GANG_*.
        c.gang.discovery = crate::gang::GangDiscovery::None;
        assert!(c.validate().is_ok());
        // Stored jobs without the field read as before, and are written as before.
        let json = serde_json::to_string(&config()).unwrap_or_default();
        assert!(!json.contains("gang"), "{json}");
    }

    #[test]
    fn control_characters_in_printed_fields_are_refused_naming_the_field() {
        type Set = fn(&mut JobConfig, &str);
        let cases: [(&str, Set); 8] = [
            ("name", |c, v| c.name = v.into()),
            ("owner", |c, v| c.owner = v.into()),
            ("pool", |c, v| c.pool = format!("/{v}")),
            ("description", |c, v| c.description = v.into()),
            ("labels", |c, v| {
                c.labels.insert("team".into(), v.into());
            }),
            ("labels", |c, v| {
                c.labels.insert(v.into(), "x".into());
            }),
            ("plugin_overrides", |c, v| {
                c.plugin_overrides.insert("placement/batch".into(), v.into());
            }),
            ("default_task.labels", |c, v| {
                c.default_task.labels.insert("k".into(), v.into());
            }),
        ];
        // ESC (a terminal escape), BEL, CR, DEL, and C1's CSI.
        for bad in ["web\u{1b}]0;owned\u{7}", "a\rb", "a\u{7f}", "a\u{9b}31m"] {
            for (field, set) in &cases {
                let mut c = config();
                set(&mut c, bad);
                assert!(c.validate().is_ok(), "stored jobs stay valid: {field} = {bad:?}");
                match c.check_printable() {
                    Err(SpecError::Invalid { field: f, reason }) => {
                        assert_eq!(f, *field, "{bad:?}");
                        assert!(reason.contains("control character U+"), "{reason}");
                    }
                    other => panic!("{field} = {bad:?}: {other:?}"),
                }
            }
        }
        // Printable text of any script passes; the description may have line breaks and tabs.
        let mut c = config();
        c.name = "wéb-サービス".into();
        c.description = "line one\n\tline two".into();
        c.labels.insert("note".into(), "ünïcode ok".into());
        assert!(c.check_printable().is_ok(), "{:?}", c.check_printable());
        c.name = "line\nbreak".into();
        assert!(c.check_printable().is_err(), "a name is one line");
    }

    #[test]
    fn derive_state() {
        let m = |v: &[(TaskState, u32)]| v.iter().copied().collect::<BTreeMap<_, _>>();
        let cases = [
            (m(&[]), JobState::Initialized),
            (m(&[(TaskState::Pending, 3)]), JobState::Pending),
            (m(&[(TaskState::Pending, 2), (TaskState::Running, 1)]), JobState::Running),
            (m(&[(TaskState::Succeeded, 3)]), JobState::Succeeded),
            (m(&[(TaskState::Succeeded, 2), (TaskState::Failed, 1)]), JobState::Failed),
            (m(&[(TaskState::Killed, 3)]), JobState::Killed),
            (m(&[(TaskState::Killing, 1), (TaskState::Killed, 2)]), JobState::Killing),
        ];
        for (counts, want) in cases {
            assert_eq!(JobState::derive(&counts, 3, 0), want, "{counts:?}");
        }
    }

    #[test]
    fn yaml_round_trip() {
        let c = config();
        let s = serde_yaml::to_string(&c).expect("serializes");
        assert_eq!(serde_yaml::from_str::<JobConfig>(&s).expect("parses"), c);
    }
}
