//! The resource kinds pools divide, one value per kind, and amounts (`unlimited`).

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

    /// The name of the kind in pool files, JSON and tables, with its unit
    /// (the name task and host resources use): `cpu_millis`, `memory_mib`,
    /// `disk_mib`, `gpus`. Field paths in errors use it (`limit.cpu_millis`).
    pub fn field(self) -> &'static str {
        match self {
            Self::Cpu => "cpu_millis",
            Self::Memory => "memory_mib",
            Self::Disk => "disk_mib",
            Self::Gpu => "gpus",
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
    /// GPU (milli-GPUs for amounts: 1000 is one device).
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
        PerKind { cpu: r.cpu_millis, memory: r.memory_mib, disk: r.disk_mib, gpu: r.gpu_milli }
    }

    /// As a resource vector with no ports.
    pub fn to_resources(&self) -> Resources {
        Resources::new(self.cpu, self.memory, self.disk, self.gpu)
    }
}

/// No limit in a kind.
pub const UNLIMITED: u64 = u64::MAX;

/// Whole GPUs as milli-GPUs, [`UNLIMITED`] kept.
pub fn whole_gpus_to_milli(whole: u64) -> u64 {
    if whole == UNLIMITED { UNLIMITED } else { whole.saturating_mul(crate::resources::GPU_MILLI) }
}

/// An amount as people read it: [`UNLIMITED`] as `unlimited`, else the number.
pub fn amount_text(v: u64) -> String {
    if v == UNLIMITED { "unlimited".to_owned() } else { v.to_string() }
}
