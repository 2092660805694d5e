//! Resources in integer units: CPU in millicores, memory and disk in MiB,
//! GPUs as whole devices, ports as a count. All arithmetic saturates.
//!
//! This is the host's own type. The plugin contract has its own
//! (`paceline_plugin_sdk::types::Resources`, the WIT record), converted in one
//! place (`paceline_joints::contract`): the model can grow a kind (GPU shares,
//! say) while a released contract version stays as it was.

use serde::{Deserialize, Serialize};

/// A vector of resources.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Resources {
    /// CPU in millicores: 1000 is one core.
    pub cpu_millis: u64,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Disk in MiB.
    pub disk_mib: u64,
    /// Whole GPU devices.
    pub gpus: u64,
    /// Host ports, as a count.
    pub ports: u64,
}

/// Applies `op` to each kind of `a` and `b`.
macro_rules! each_kind {
    ($a:expr, $b:expr, $op:expr) => {
        Resources {
            cpu_millis: $op($a.cpu_millis, $b.cpu_millis),
            memory_mib: $op($a.memory_mib, $b.memory_mib),
            disk_mib: $op($a.disk_mib, $b.disk_mib),
            gpus: $op($a.gpus, $b.gpus),
            ports: $op($a.ports, $b.ports),
        }
    };
}

impl Resources {
    /// Nothing of anything.
    pub const ZERO: Resources = Resources { cpu_millis: 0, memory_mib: 0, disk_mib: 0, gpus: 0, ports: 0 };

    /// Builds a vector from the four scored kinds (ports zero).
    pub const fn new(cpu_millis: u64, memory_mib: u64, disk_mib: u64, gpus: u64) -> Self {
        Resources { cpu_millis, memory_mib, disk_mib, gpus, ports: 0 }
    }

    /// Every kind is zero.
    pub fn is_zero(&self) -> bool {
        *self == Self::ZERO
    }

    /// `self` fits within `available` in every kind.
    pub fn fits_in(&self, available: &Resources) -> bool {
        let within = each_kind!(self, available, |a: u64, b: u64| u64::from(a <= b));
        (within.cpu_millis & within.memory_mib & within.disk_mib & within.gpus & within.ports) == 1
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
}
