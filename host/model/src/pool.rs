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
//! [`PoolFile`] is the YAML form:
//!
//! ```yaml
//! pools:
//!   - path: /ml
//!     reservation: { cpu: 40000, memory: 163840, gpu: 8 }
//!     limit: { cpu: 80000 }          # kinds left out are unlimited
//!     share: { cpu: 2, gpu: 3 }      # kinds left out weigh 1
//!     type: elastic                  # or static, or per kind: { gpu: static }
//!     slack_limit: { cpu: 10000 }    # kinds left out: no revocable use
//!     queue_policy: priority_fifo    # or fifo
//! ```

use serde::{Deserialize, Serialize};

use crate::Resources;

/// The resource kinds pools divide. Ports are a per-host matter and are not
/// entitled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    /// CPU in millicores.
    Cpu,
    /// Memory in MiB.
    Memory,
    /// Disk in MiB.
    Disk,
    /// Whole GPUs.
    Gpu,
}

impl ResourceKind {
    /// Every kind, in the order of [`PerKind::to_array`].
    pub const ALL: [ResourceKind; 4] = [Self::Cpu, Self::Memory, Self::Disk, Self::Gpu];

    /// The kind's name as it appears in YAML and errors.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Memory => "memory",
            Self::Disk => "disk",
            Self::Gpu => "gpu",
        }
    }

    /// The unit the kind is counted in, for messages.
    pub fn unit(self) -> &'static str {
        match self {
            Self::Cpu => "millicores",
            Self::Memory | Self::Disk => "MiB",
            Self::Gpu => "gpus",
        }
    }

    /// Index into a `[_; 4]` laid out like [`PerKind::to_array`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for ResourceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One value per resource kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PerKind<T> {
    /// CPU (millicores for amounts).
    pub cpu: T,
    /// Memory (MiB for amounts).
    pub memory: T,
    /// Disk (MiB for amounts).
    pub disk: T,
    /// GPUs (whole devices for amounts).
    pub gpu: T,
}

impl<T: Copy> PerKind<T> {
    /// The same value for every kind.
    pub const fn splat(v: T) -> Self {
        PerKind { cpu: v, memory: v, disk: v, gpu: v }
    }

    /// Values in the order of [`ResourceKind::ALL`].
    pub fn to_array(&self) -> [T; 4] {
        [self.cpu, self.memory, self.disk, self.gpu]
    }

    /// Inverse of [`PerKind::to_array`].
    pub fn from_array(a: [T; 4]) -> Self {
        PerKind { cpu: a[0], memory: a[1], disk: a[2], gpu: a[3] }
    }

    /// The value for one kind.
    pub fn get(&self, kind: ResourceKind) -> T {
        self.to_array()[kind.index()]
    }
}

impl PerKind<u64> {
    /// Amounts of a resource vector (ports dropped).
    pub fn from_resources(r: &Resources) -> Self {
        PerKind { cpu: r.cpu_millis, memory: r.memory_mib, disk: r.disk_mib, gpu: r.gpus }
    }

    /// As a resource vector with no ports.
    pub fn to_resources(&self) -> Resources {
        Resources::new(self.cpu, self.memory, self.disk, self.gpu)
    }
}

/// No limit in a kind.
pub const UNLIMITED: u64 = u64::MAX;

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

/// Everything an operator declares for one pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
        }
    }
}

/// What is wrong with one spec on its own: the field and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Reservation above limit in a kind.
    #[error("reservation.{kind} ({reservation}) is above limit.{kind} ({limit})")]
    ReservationAboveLimit {
        /// The kind.
        kind: ResourceKind,
        /// The reservation.
        reservation: u64,
        /// The limit.
        limit: u64,
    },
    /// Share of zero.
    #[error("share.{kind} is 0; shares must be at least 1")]
    ZeroShare {
        /// The kind.
        kind: ResourceKind,
    },
}

impl SpecError {
    /// The field at fault, as `field.kind`.
    pub fn field(&self) -> String {
        match self {
            Self::ReservationAboveLimit { kind, .. } => format!("reservation.{kind}"),
            Self::ZeroShare { kind } => format!("share.{kind}"),
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
        Ok(())
    }
}

/// A pool file: the pools to create, parents before children.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolFile {
    /// Pool entries.
    #[serde(default)]
    pub pools: Vec<PoolEntry>,
}

/// The YAML type field: one type for every kind, or per kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TypeEntry {
    /// The same type for every kind.
    All(PoolType),
    /// Per kind; kinds left out are elastic.
    PerKind(PerKind<Option<PoolType>>),
}

/// One pool in a [`PoolFile`]. Kinds left out: reservation 0, limit
/// unlimited, share 1, elastic, slack limit 0.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolEntry {
    /// Path such as `/ml/training`.
    pub path: String,
    /// Guaranteed amounts.
    #[serde(default)]
    pub reservation: PerKind<Option<u64>>,
    /// Limits.
    #[serde(default)]
    pub limit: PerKind<Option<u64>>,
    /// Shares.
    #[serde(default)]
    pub share: PerKind<Option<u64>>,
    /// Elastic or static.
    #[serde(default, rename = "type")]
    pub pool_type: Option<TypeEntry>,
    /// Revocable limits.
    #[serde(default)]
    pub slack_limit: PerKind<Option<u64>>,
    /// Queue order.
    #[serde(default)]
    pub queue_policy: QueuePolicy,
}

fn or(p: PerKind<Option<u64>>, d: u64) -> PerKind<u64> {
    PerKind::from_array(p.to_array().map(|v| v.unwrap_or(d)))
}

impl PoolEntry {
    /// The spec this entry declares, defaults filled in.
    pub fn spec(&self) -> PoolSpec {
        let pool_type = match self.pool_type {
            None => PerKind::splat(PoolType::Elastic),
            Some(TypeEntry::All(t)) => PerKind::splat(t),
            Some(TypeEntry::PerKind(p)) => PerKind::from_array(p.to_array().map(Option::unwrap_or_default)),
        };
        PoolSpec {
            reservation: or(self.reservation, 0),
            limit: or(self.limit, UNLIMITED),
            share: or(self.share, 1),
            pool_type,
            slack_limit: or(self.slack_limit, 0),
            queue_policy: self.queue_policy,
        }
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
        assert_eq!(spec.limit.gpu, 2);
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
        assert_eq!(spec.check().map_err(|e| e.field()), Err("reservation.memory".to_string()));
        let mut spec = PoolSpec::default();
        spec.share.gpu = 0;
        assert_eq!(spec.check().map_err(|e| e.field()), Err("share.gpu".to_string()));
    }

    #[test]
    fn unknown_field_refused() {
        assert!(serde_yaml::from_str::<PoolFile>("pools:\n  - path: /a\n    reservaton: {}\n").is_err());
    }
}
