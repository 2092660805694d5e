//! Resources in integer units: CPU in millicores, memory and disk in MiB,
//! GPU in milli-GPUs (1000 is one whole device), ports as a count. All
//! arithmetic saturates.
//!
//! A task asks for whole GPUs (`gpu_milli` a multiple of 1000) or for a
//! share of one device (`gpu_milli` below 1000); which devices it gets is
//! decided per device at placement ([`crate::gpu`]). Aggregates (a host's
//! total, a pool's allocation) sum milli-GPUs. Spec files and stored
//! records written before GPU shares say `gpus: N` (whole devices): that is
//! read as `gpu_milli: N × 1000`.
//!
//! This is the host's own type. The plugin contract has its own
//! (`paceline_plugin_sdk::types::Resources`, the WIT record), converted in one
//! place (`paceline_joints::contract`): the model can grow a kind (GPU shares,
//! say) while a released contract version stays as it was.

use serde::{Deserialize, Serialize};

/// A vector of resources.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "ResourcesFile")]
pub struct Resources {
    /// CPU in millicores: 1000 is one core.
    pub cpu_millis: u64,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Disk in MiB.
    pub disk_mib: u64,
    /// GPU in milli-GPUs: 1000 is one whole device.
    pub gpu_milli: u64,
    /// Host ports, as a count.
    pub ports: u64,
}

/// One GPU device in milli-GPUs.
pub const GPU_MILLI: u64 = 1000;

/// [`Resources`] as files and stored records spell it: `gpus` (whole
/// devices, the older spelling) or `gpu_milli`, not both.
#[derive(Deserialize)]
#[serde(default, deny_unknown_fields)]
#[derive(Default)]
struct ResourcesFile {
    cpu_millis: u64,
    memory_mib: u64,
    disk_mib: u64,
    gpus: Option<u64>,
    gpu_milli: Option<u64>,
    ports: u64,
}

impl TryFrom<ResourcesFile> for Resources {
    type Error = String;

    fn try_from(f: ResourcesFile) -> Result<Self, Self::Error> {
        let gpu_milli = match (f.gpus, f.gpu_milli) {
            (Some(_), Some(_)) => {
                return Err("give `gpus` (whole devices) or `gpu_milli` (1000 is one device), not both".into());
            }
            (Some(whole), None) => whole.saturating_mul(GPU_MILLI),
            (None, milli) => milli.unwrap_or(0),
        };
        Ok(Resources {
            cpu_millis: f.cpu_millis,
            memory_mib: f.memory_mib,
            disk_mib: f.disk_mib,
            gpu_milli,
            ports: f.ports,
        })
    }
}

/// Applies `op` to each kind of `a` and `b`.
macro_rules! each_kind {
    ($a:expr, $b:expr, $op:expr) => {
        Resources {
            cpu_millis: $op($a.cpu_millis, $b.cpu_millis),
            memory_mib: $op($a.memory_mib, $b.memory_mib),
            disk_mib: $op($a.disk_mib, $b.disk_mib),
            gpu_milli: $op($a.gpu_milli, $b.gpu_milli),
            ports: $op($a.ports, $b.ports),
        }
    };
}

impl Resources {
    /// Nothing of anything.
    pub const ZERO: Resources = Resources { cpu_millis: 0, memory_mib: 0, disk_mib: 0, gpu_milli: 0, ports: 0 };

    /// Builds a vector from the four scored kinds (ports zero); GPU in
    /// milli-GPUs.
    pub const fn new(cpu_millis: u64, memory_mib: u64, disk_mib: u64, gpu_milli: u64) -> Self {
        Resources { cpu_millis, memory_mib, disk_mib, gpu_milli, ports: 0 }
    }

    /// Whole GPU devices asked for (a share of one device counts 0).
    pub const fn whole_gpus(&self) -> u64 {
        self.gpu_milli / GPU_MILLI
    }

    /// The share of one device asked for, when the ask is one (1..=999).
    pub const fn gpu_share(&self) -> Option<u64> {
        if self.gpu_milli > 0 && self.gpu_milli < GPU_MILLI { Some(self.gpu_milli) } else { None }
    }

    /// Every kind is zero.
    pub fn is_zero(&self) -> bool {
        *self == Self::ZERO
    }

    /// `self` fits within `available` in every kind.
    pub fn fits_in(&self, available: &Resources) -> bool {
        let within = each_kind!(self, available, |a: u64, b: u64| u64::from(a <= b));
        (within.cpu_millis & within.memory_mib & within.disk_mib & within.gpu_milli & within.ports) == 1
    }

    /// Kind-wise sum, saturating at `u64::MAX`.
    #[must_use]
    pub fn saturating_add(&self, other: &Resources) -> Resources {
        each_kind!(self, other, u64::saturating_add)
    }

    /// Kind-wise difference, saturating at zero.
    #[must_use]
    pub fn saturating_sub(&self, other: &Resources) -> Resources {
        each_kind!(self, other, u64::saturating_sub)
    }

    /// Kind-wise minimum.
    #[must_use]
    pub fn min(&self, other: &Resources) -> Resources {
        each_kind!(self, other, std::cmp::min)
    }

    /// Kind-wise maximum.
    #[must_use]
    pub fn max(&self, other: &Resources) -> Resources {
        each_kind!(self, other, std::cmp::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_and_fits_compare_every_kind() {
        let a = Resources::new(5, 10, 0, 1);
        let b = Resources::new(7, 3, 1, 0);
        assert_eq!(a.saturating_sub(&b), Resources::new(0, 7, 0, 1));
        assert_eq!(Resources::new(u64::MAX, 0, 0, 0).saturating_add(&b).cpu_millis, u64::MAX);
        assert_eq!(a.min(&b), Resources::new(5, 3, 0, 0));
        assert_eq!(a.max(&b), Resources::new(7, 10, 1, 1));
        assert!(Resources::new(5, 3, 0, 0).fits_in(&a));
        assert!(!b.fits_in(&a), "more CPU than available");
        let ports = Resources { ports: 1, ..Resources::ZERO };
        assert!(!ports.fits_in(&Resources::ZERO), "ports count too");
        assert!(Resources::ZERO.is_zero() && !ports.is_zero());
    }

    #[test]
    fn gpus_read_as_whole_devices_and_gpu_milli_as_is() {
        let old: Resources = serde_json::from_str(r#"{"cpu_millis": 1, "gpus": 2}"#).expect("older spelling");
        assert_eq!((old.gpu_milli, old.whole_gpus(), old.gpu_share()), (2000, 2, None));
        let share: Resources = serde_json::from_str(r#"{"gpu_milli": 500}"#).expect("share");
        assert_eq!((share.whole_gpus(), share.gpu_share()), (0, Some(500)));
        let both = serde_json::from_str::<Resources>(r#"{"gpus": 1, "gpu_milli": 500}"#).expect_err("both");
        assert!(both.to_string().contains("not both"), "{both}");
        assert!(serde_json::from_str::<Resources>(r#"{"tpus": 1}"#).is_err(), "unknown kinds are refused");
        let back: Resources = serde_json::from_str(&serde_json::to_string(&share).expect("json")).expect("round trip");
        assert_eq!(back, share);
    }
}
