//! Resource pool specifications: what an operator declares for each pool.
//!
//! A pool lives at a path (`/`, `/ml`, `/ml/training`) and has, per resource
//! kind (cpu, memory, disk, gpu): a reservation (guaranteed), a limit (never
//! exceeded), a share (weight for dividing what is above reservations) and a
//! type (elastic pools lend and borrow; static pools get their reservation
//! whole and never borrow). It also has a slack limit (how much revocable
//! resource it may use) and a queue policy.
//!
//! These are plain data. The rules that relate pools to each other (child
//! reservations fit in the parent's, limits nest, …) are checked by the
//! resource manager, which owns the tree; [`PoolSpec::check`] only checks what
//! one spec can get wrong on its own.
//!
//! [`PoolFile`] is the YAML form. Kinds are named as in task and host
//! resources, with their unit: `cpu_millis`, `memory_mib`, `disk_mib`,
//! `gpus` (the older `cpu`, `memory`, `disk`, `gpu` are accepted too), and an
//! amount may be `unlimited`:
//!
//! ```yaml
//! pools:
//!   - path: /ml
//!     reservation: { cpu_millis: 40000, memory_mib: 163840, gpus: 8 }
//!     limit: { cpu_millis: 80000 }   # kinds left out (or `unlimited`) have no limit; 0 is zero
//!     share: 2                       # every kind; or per kind: { cpu_millis: 2, gpus: 3 }
//!     type: elastic                  # or static, or per kind: { gpus: static }
//!     slack_limit: { cpu_millis: 10000 }  # kinds left out: no revocable use
//!     queue_policy: priority_fifo    # or fifo
//! ```
//!
//! [`PoolEntry::from_spec`] writes a spec back in this form (the CLI's
//! `pool get -o yaml`), so what is shown can be edited and applied again.
//!
//! The parts: `kinds` (resource kinds and per-kind values), `file` (the
//! YAML form). This file holds the spec itself and its checks.

mod file;
mod kinds;

use serde::{Deserialize, Serialize};

pub use file::{Amount, KindValues, OneOrPerKind, PoolEntry, PoolFile};
pub use kinds::{PerKind, ResourceKind, UNLIMITED, amount_text, whole_gpus_to_milli};

/// How a pool treats its reservation in one kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolType {
    /// Lends unused reservation to siblings and borrows idle capacity up to its limit.
    #[default]
    Elastic,
    /// Is entitled to exactly its reservation: never lends it, never borrows.
    Static,
}

/// The order of a leaf pool's queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueuePolicy {
    /// Higher priority first; first in, first out within a priority.
    #[default]
    PriorityFifo,
    /// First in, first out; priority ignored for ordering (still used for preemption).
    Fifo,
}

/// Everything an operator declares for one pool. GPU amounts are in
/// milli-GPUs; a spec stored before GPU shares (whole GPUs, no
/// `gpu_milli_units` mark) is read as whole devices.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "StoredPoolSpec", into = "StoredPoolSpec")]
pub struct PoolSpec {
    /// Guaranteed amounts.
    pub reservation: PerKind<u64>,
    /// Never entitled above this; [`UNLIMITED`] for no limit.
    pub limit: PerKind<u64>,
    /// Weight for what is divided above reservations; at least 1.
    pub share: PerKind<u64>,
    /// Elastic or static, per kind.
    pub pool_type: PerKind<PoolType>,
    /// How much revocable resource the pool's jobs may use.
    pub slack_limit: PerKind<u64>,
    /// Order of the pool's queue.
    pub queue_policy: QueuePolicy,
    /// Most of the pool that controller tasks (jobs marked `controller`,
    /// such as a Spark driver that runs its executors as another job) may
    /// hold at once, in percent of the pool's reservation, per kind; in a
    /// kind the pool reserves nothing, of its limit (no cap where it has
    /// neither). `None`: no cap. Peloton's `controller_limit`: drivers
    /// cannot fill a pool and leave no room for the executors they start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_limit_percent: Option<u8>,
    /// Host users the pool's jobs may name in `user:` to run their tasks
    /// as ([`crate::task_user`]); empty (the default): none, every run gets
    /// a uid of its own. Set by operators: a job of the pool running as one
    /// of these users can read whatever that user can on every host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub task_users: Vec<String>,
    /// Most live (not yet finished) jobs whose pool is this one; `None`:
    /// the server's `quotas.max_live_jobs_per_pool`; 0: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_live_jobs: Option<u64>,
    /// Most live tasks of this pool's live jobs; `None`: the server's
    /// `quotas.max_live_tasks_per_pool`; 0: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_live_tasks: Option<u64>,
}

impl PoolSpec {
    /// The most controller tasks may hold in each kind ([`u64::MAX`] where
    /// there is no cap).
    pub fn controller_cap(&self) -> PerKind<u64> {
        let Some(pct) = self.controller_limit_percent else {
            return PerKind::splat(u64::MAX);
        };
        let of = |kind: ResourceKind| {
            let (r, l) = (self.reservation.get(kind), self.limit.get(kind));
            let base = if r > 0 { r } else { l };
            if base == UNLIMITED {
                u64::MAX
            } else {
                // At most 100%: no overflow (u64 × 100 / 100 in u128).
                (u128::from(base) * u128::from(pct.min(100)) / 100) as u64
            }
        };
        PerKind {
            cpu: of(ResourceKind::Cpu),
            memory: of(ResourceKind::Memory),
            disk: of(ResourceKind::Disk),
            gpu: of(ResourceKind::Gpu),
        }
    }
}

/// [`PoolSpec`] as stored: the same fields and a mark that its GPU amounts
/// are milli-GPUs (absent in specs stored before GPU shares).
#[derive(Clone, Serialize, Deserialize)]
struct StoredPoolSpec {
    reservation: PerKind<u64>,
    limit: PerKind<u64>,
    share: PerKind<u64>,
    pool_type: PerKind<PoolType>,
    slack_limit: PerKind<u64>,
    queue_policy: QueuePolicy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    controller_limit_percent: Option<u8>,
    #[serde(default)]
    gpu_milli_units: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    task_users: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_live_jobs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_live_tasks: Option<u64>,
}

impl From<StoredPoolSpec> for PoolSpec {
    fn from(s: StoredPoolSpec) -> Self {
        let mut spec = PoolSpec {
            reservation: s.reservation,
            limit: s.limit,
            share: s.share,
            pool_type: s.pool_type,
            slack_limit: s.slack_limit,
            queue_policy: s.queue_policy,
            controller_limit_percent: s.controller_limit_percent,
            task_users: s.task_users,
            max_live_jobs: s.max_live_jobs,
            max_live_tasks: s.max_live_tasks,
        };
        if !s.gpu_milli_units {
            for amounts in [&mut spec.reservation, &mut spec.limit, &mut spec.slack_limit] {
                amounts.gpu = whole_gpus_to_milli(amounts.gpu);
            }
        }
        spec
    }
}

impl From<PoolSpec> for StoredPoolSpec {
    fn from(s: PoolSpec) -> Self {
        StoredPoolSpec {
            reservation: s.reservation,
            limit: s.limit,
            share: s.share,
            pool_type: s.pool_type,
            slack_limit: s.slack_limit,
            queue_policy: s.queue_policy,
            controller_limit_percent: s.controller_limit_percent,
            gpu_milli_units: true,
            task_users: s.task_users,
            max_live_jobs: s.max_live_jobs,
            max_live_tasks: s.max_live_tasks,
        }
    }
}

impl Default for PoolSpec {
    /// No reservation, no limit, share 1, elastic, no slack.
    fn default() -> Self {
        PoolSpec {
            reservation: PerKind::splat(0),
            limit: PerKind::splat(UNLIMITED),
            share: PerKind::splat(1),
            pool_type: PerKind::splat(PoolType::Elastic),
            slack_limit: PerKind::splat(0),
            queue_policy: QueuePolicy::PriorityFifo,
            controller_limit_percent: None,
            task_users: Vec::new(),
            max_live_jobs: None,
            max_live_tasks: None,
        }
    }
}

/// What is wrong with one spec on its own: the field and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Reservation above limit in a kind.
    #[error("reservation.{field} ({reservation}) is above limit.{field} ({limit})", field = kind.field())]
    ReservationAboveLimit {
        /// The kind.
        kind: ResourceKind,
        /// The reservation.
        reservation: u64,
        /// The limit.
        limit: u64,
    },
    /// Share of zero.
    #[error("share.{field} is 0; shares must be at least 1", field = kind.field())]
    ZeroShare {
        /// The kind.
        kind: ResourceKind,
    },
    /// Static in a kind tasks need, with no reservation in it: the pool is
    /// entitled to exactly 0 and no task asking for that kind could run.
    #[error(
        "static with no {kind} reservation: a static pool is entitled to exactly its reservation, so no task \
         that needs {kind} could ever run in it; reserve {kind}, or make only the reserved kinds static \
         (type: {{cpu_millis: static}})"
    )]
    StaticWithoutReservation {
        /// The kind.
        kind: ResourceKind,
    },
    /// A controller limit above 100 percent.
    #[error("controller_limit_percent is {0}; it is a percent of the pool's reservation, from 0 to 100")]
    ControllerLimitAbove100(u8),
    /// A limit of 0 in a kind tasks need: no task asking for it could run.
    #[error(
        "a limit of 0 means no task that needs {kind} could ever run in this pool; leave the kind out, or \
         write `unlimited`, for no limit"
    )]
    ZeroLimit {
        /// The kind.
        kind: ResourceKind,
    },
    /// A `task_users` entry that is not a user a task may run as.
    #[error("task_users{0}")]
    TaskUsers(String),
}

impl SpecError {
    /// The field at fault, as `field.kind`.
    pub fn field(&self) -> String {
        match self {
            Self::ReservationAboveLimit { kind, .. } => format!("reservation.{}", kind.field()),
            Self::ZeroShare { kind } => format!("share.{}", kind.field()),
            Self::StaticWithoutReservation { kind } => format!("type.{}", kind.field()),
            Self::ZeroLimit { kind } => format!("limit.{}", kind.field()),
            Self::ControllerLimitAbove100(_) => "controller_limit_percent".to_string(),
            Self::TaskUsers(_) => "task_users".to_string(),
        }
    }
}

impl PoolSpec {
    /// Checks what one spec can get wrong by itself.
    pub fn check(&self) -> Result<(), SpecError> {
        for kind in ResourceKind::ALL {
            let (r, l) = (self.reservation.get(kind), self.limit.get(kind));
            if r > l {
                return Err(SpecError::ReservationAboveLimit { kind, reservation: r, limit: l });
            }
            if self.share.get(kind) == 0 {
                return Err(SpecError::ZeroShare { kind });
            }
        }
        if let Some(pct) = self.controller_limit_percent.filter(|&p| p > 100) {
            return Err(SpecError::ControllerLimitAbove100(pct));
        }
        crate::task_user::check_allow_list(&self.task_users)
            .map_err(|e| SpecError::TaskUsers(if e.starts_with('[') { e } else { format!(": {e}") }))?;
        Ok(())
    }

    /// Checks, for a pool being created or changed through the API or the
    /// CLI, that tasks can run in it at all: a kind every task asks for
    /// (cpu, memory, disk; not gpus, where 0 means "no GPU work here") must
    /// not be static at a reservation of 0 nor limited to 0. Not part of
    /// [`PoolSpec::check`], so pools stored before this rule still load;
    /// "why pending" names the pool's cap for their gangs.
    pub fn check_usable(&self) -> Result<(), SpecError> {
        for kind in [ResourceKind::Cpu, ResourceKind::Memory, ResourceKind::Disk] {
            if self.pool_type.get(kind) == PoolType::Static && self.reservation.get(kind) == 0 {
                return Err(SpecError::StaticWithoutReservation { kind });
            }
            if self.limit.get(kind) == 0 {
                return Err(SpecError::ZeroLimit { kind });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_defaults_and_yaml() {
        let yaml =
            "pools:\n  - path: /ml\n    reservation: { cpu: 4000 }\n    limit: { gpu: 2 }\n    type: { gpu: static }\n";
        let file: PoolFile = serde_yaml::from_str(yaml).expect("parses");
        let spec = file.pools[0].spec();
        assert_eq!(spec.reservation, PerKind { cpu: 4000, memory: 0, disk: 0, gpu: 0 });
        assert_eq!(spec.limit.gpu, 2000, "two whole GPUs in milli-GPUs");
        assert_eq!(spec.limit.cpu, UNLIMITED);
        assert_eq!(spec.share, PerKind::splat(1));
        assert_eq!(spec.pool_type.gpu, PoolType::Static);
        assert_eq!(spec.pool_type.cpu, PoolType::Elastic);
        assert!(spec.check().is_ok());
    }

    #[test]
    fn check_names_the_field() {
        let mut spec = PoolSpec::default();
        spec.reservation.memory = 10;
        spec.limit.memory = 5;
        assert_eq!(spec.check().map_err(|e| e.field()), Err("reservation.memory_mib".to_string()));
        let mut spec = PoolSpec::default();
        spec.share.gpu = 0;
        assert_eq!(spec.check().map_err(|e| e.field()), Err("share.gpus".to_string()));
    }

    #[test]
    fn the_controller_cap_is_a_share_of_the_reservation_else_of_the_limit() {
        let spec = entry("reservation: {cpu_millis: 4000}\nlimit: {memory_mib: 1000}\ncontroller_limit_percent: 25\n")
            .expect("parses");
        assert_eq!(spec.controller_limit_percent, Some(25));
        let cap = spec.controller_cap();
        assert_eq!((cap.cpu, cap.memory, cap.disk), (1000, 250, u64::MAX), "disk: no reservation, no limit");
        assert!(spec.check().is_ok());
        assert_eq!(PoolSpec::default().controller_cap(), PerKind::splat(u64::MAX));
        let over = PoolSpec { controller_limit_percent: Some(101), ..PoolSpec::default() };
        assert_eq!(over.check().map_err(|e| e.field()), Err("controller_limit_percent".to_string()));
        // The file form keeps it, and a spec stored before the field existed still reads.
        assert_eq!(PoolEntry::from_spec("/a", &spec).spec(), spec);
        let old: PoolSpec =
            serde_yaml::from_str(&serde_yaml::to_string(&PoolSpec::default()).expect("yaml")).expect("old");
        assert_eq!(old.controller_limit_percent, None);
    }

    #[test]
    fn task_users_are_read_kept_and_root_is_refused() {
        let spec = entry("task_users: [nobody, \"1500\"]\n").expect("parses");
        assert_eq!(spec.task_users, vec!["nobody".to_owned(), "1500".to_owned()]);
        assert!(spec.check().is_ok());
        assert_eq!(PoolEntry::from_spec("/a", &spec).spec(), spec);
        let stored: PoolSpec = serde_json::from_str(&serde_json::to_string(&spec).expect("json")).expect("back");
        assert_eq!(stored, spec);
        assert!(PoolSpec::default().task_users.is_empty(), "nobody may pick a user unless allowed");
        let root = PoolSpec { task_users: vec!["nobody".into(), "root".into()], ..PoolSpec::default() };
        let err = root.check().expect_err("root");
        assert_eq!(err.field(), "task_users");
        assert!(err.to_string().starts_with("task_users[1]: `root`"), "{err}");
        let limited = entry("max_live_jobs: 3\nmax_live_tasks: 0\n").expect("parses");
        assert_eq!((limited.max_live_jobs, limited.max_live_tasks), (Some(3), Some(0)));
        assert_eq!(PoolEntry::from_spec("/a", &limited).spec(), limited);
    }

    fn entry(yaml: &str) -> Result<PoolSpec, String> {
        serde_yaml::from_str::<PoolEntry>(&format!("path: /a\n{yaml}")).map(|e| e.spec()).map_err(|e| e.to_string())
    }

    #[test]
    fn the_file_form_takes_unit_names_old_names_unlimited_and_plain_shares() {
        let new = entry(
            "reservation: {cpu_millis: 2000, memory_mib: 4096}\nlimit: {cpu_millis: unlimited, gpus: 0}\nshare: 2\n",
        );
        let old = entry(
            "reservation: {cpu: 2000, memory: 4096}\nlimit: {gpu: 0}\nshare: {cpu: 2, memory: 2, disk: 2, gpu: 2}\n",
        );
        assert_eq!(new, old);
        let spec = new.expect("parses");
        assert_eq!((spec.limit.cpu, spec.limit.memory, spec.limit.gpu), (UNLIMITED, UNLIMITED, 0), "0 is zero");
        assert_eq!(spec.share, PerKind::splat(2));
        let typed = entry("type: {gpus: static}\n").expect("per kind");
        assert_eq!((typed.pool_type.gpu, typed.pool_type.cpu), (PoolType::Static, PoolType::Elastic));
        assert_eq!(entry("type: static\n").expect("all").pool_type, PerKind::splat(PoolType::Static));
        for (yaml, needle) in [
            ("limit: {cpu_millis: -1}\n", "negative"),
            ("limit: {cpu_millis: lots}\n", "`lots` is not an amount"),
            ("share: {cpus: 2}\n", "unknown field `cpus`"),
            ("limit: {cpu: 1, cpu_millis: 2}\n", "duplicate field"),
            ("type: sometimes\n", "sometimes"),
        ] {
            let e = entry(yaml).expect_err(yaml);
            assert!(e.contains(needle), "{yaml}: {e}");
        }
    }

    #[test]
    fn a_spec_is_written_back_in_the_file_form_and_reads_the_same() {
        let spec = PoolSpec {
            reservation: PerKind { cpu: 1000, memory: 10, disk: 0, gpu: UNLIMITED },
            limit: PerKind { cpu: 2000, memory: UNLIMITED, disk: UNLIMITED, gpu: 0 },
            share: PerKind::splat(3),
            pool_type: PerKind { gpu: PoolType::Static, ..PerKind::splat(PoolType::Elastic) },
            ..PoolSpec::default()
        };
        let yaml = serde_yaml::to_string(&PoolEntry::from_spec("/a", &spec)).expect("writes");
        assert!(yaml.contains("memory_mib: unlimited"), "{yaml}");
        assert!(yaml.contains("gpus: unlimited"), "{yaml}");
        assert!(yaml.contains("share: 3"), "{yaml}");
        assert!(yaml.contains("gpus: static"), "{yaml}");
        assert!(!yaml.contains("18446744073709551615"), "{yaml}");
        let back: PoolEntry = serde_yaml::from_str(&yaml).expect("reads");
        assert_eq!(back.spec(), spec);
    }

    #[test]
    fn gpu_amounts_are_milli_gpus_in_files_and_in_stored_specs() {
        let half = entry(
            "reservation: {gpu_milli: 2500}
limit: {gpus: 4}
",
        )
        .expect("parses");
        assert_eq!((half.reservation.gpu, half.limit.gpu), (2500, 4000));
        let yaml = serde_yaml::to_string(&PoolEntry::from_spec("/a", &half)).expect("writes");
        assert!(yaml.contains("gpu_milli: 2500") && yaml.contains("gpus: 4"), "{yaml}");
        assert_eq!(serde_yaml::from_str::<PoolEntry>(&yaml).expect("reads").spec(), half);
        let both: PoolEntry = serde_yaml::from_str(
            "path: /a
limit: {gpus: 1, gpu_milli: 500}
",
        )
        .expect("parses");
        assert!(both.check_gpu_spelling().expect_err("both").contains("limit"));
        // A spec stored before GPU shares counted whole GPUs and had no mark.
        let mut old = serde_json::to_value(half).expect("json");
        assert_eq!(old["gpu_milli_units"], true);
        old.as_object_mut().expect("object").remove("gpu_milli_units");
        old["limit"]["gpu"] = 3.into();
        old["reservation"]["gpu"] = 1.into();
        let read: PoolSpec = serde_json::from_value(old).expect("older spec");
        assert_eq!((read.reservation.gpu, read.limit.gpu, read.limit.cpu), (1000, 3000, UNLIMITED));
        let unlimited: PoolSpec =
            serde_json::from_value(serde_json::to_value(PoolSpec::default()).expect("json")).expect("back");
        assert_eq!(unlimited.limit.gpu, UNLIMITED);
    }

    #[test]
    fn a_pool_no_task_could_run_in_is_refused_by_check_usable() {
        let cases = [
            ("type: static\nreservation: {cpu_millis: 4000}\n", "type.memory_mib"),
            ("type: {cpu_millis: static}\n", "type.cpu_millis"),
            ("limit: {cpu_millis: 0}\n", "limit.cpu_millis"),
            ("limit: {disk: 0}\n", "limit.disk_mib"),
        ];
        for (yaml, field) in cases {
            let spec = entry(yaml).expect("parses");
            assert!(spec.check().is_ok(), "{yaml}: consistent on its own");
            let e = spec.check_usable().expect_err(yaml);
            assert_eq!(e.field(), field, "{yaml}: {e}");
        }
        let fine =
            entry("type: static\nreservation: {cpu_millis: 4000, memory_mib: 8192, disk_mib: 100}\nlimit: {gpus: 0}\n");
        assert_eq!(fine.expect("parses").check_usable(), Ok(()), "no GPUs is a choice, not a trap");
        let message =
            entry("type: static\nreservation: {cpu: 4000}\n").expect("parses").check_usable().expect_err("static at 0");
        assert!(message.to_string().contains("no task that needs memory could ever run"), "{message}");
    }

    #[test]
    fn unknown_field_refused() {
        assert!(serde_yaml::from_str::<PoolFile>("pools:\n  - path: /a\n    reservaton: {}\n").is_err());
    }
}
