//! Saturating resource arithmetic and integer scoring.

use crate::types::Resources;

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
    #[inline(always)]
    pub fn fits_in(&self, available: &Resources) -> bool {
        // Non-short-circuiting `&` keeps the hot loop branch-free.
        (self.cpu_millis <= available.cpu_millis)
            & (self.memory_mib <= available.memory_mib)
            & (self.disk_mib <= available.disk_mib)
            & (self.gpus <= available.gpus)
            & (self.ports <= available.ports)
    }

    /// Kind-wise sum, saturating at `u64::MAX`.
    #[must_use]
    pub fn saturating_add(&self, other: &Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_add(other.cpu_millis),
            memory_mib: self.memory_mib.saturating_add(other.memory_mib),
            disk_mib: self.disk_mib.saturating_add(other.disk_mib),
            gpus: self.gpus.saturating_add(other.gpus),
            ports: self.ports.saturating_add(other.ports),
        }
    }

    /// Kind-wise difference, saturating at zero.
    #[must_use]
    pub fn saturating_sub(&self, other: &Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_sub(other.cpu_millis),
            memory_mib: self.memory_mib.saturating_sub(other.memory_mib),
            disk_mib: self.disk_mib.saturating_sub(other.disk_mib),
            gpus: self.gpus.saturating_sub(other.gpus),
            ports: self.ports.saturating_sub(other.ports),
        }
    }

    /// Kind-wise minimum.
    #[must_use]
    pub fn min(&self, other: &Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.min(other.cpu_millis),
            memory_mib: self.memory_mib.min(other.memory_mib),
            disk_mib: self.disk_mib.min(other.disk_mib),
            gpus: self.gpus.min(other.gpus),
            ports: self.ports.min(other.ports),
        }
    }

    /// Kind-wise multiplication by a count, saturating.
    #[must_use]
    pub fn times(&self, n: u64) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_mul(n),
            memory_mib: self.memory_mib.saturating_mul(n),
            disk_mib: self.disk_mib.saturating_mul(n),
            gpus: self.gpus.saturating_mul(n),
            ports: self.ports.saturating_mul(n),
        }
    }

    /// How many copies of `self` fit in `available` (`u64::MAX` if `self` is zero).
    pub fn copies_in(&self, available: &Resources) -> u64 {
        fn per(need: u64, have: u64) -> u64 {
            have.checked_div(need).unwrap_or(u64::MAX)
        }
        per(self.cpu_millis, available.cpu_millis)
            .min(per(self.memory_mib, available.memory_mib))
            .min(per(self.disk_mib, available.disk_mib))
            .min(per(self.gpus, available.gpus))
            .min(per(self.ports, available.ports))
    }
}

/// Fixed-point weights that turn a resource vector into a fullness score
/// without division in the hot loop: `weight = 2^32 / total` per kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScoreScale {
    cpu: u64,
    memory: u64,
    disk: u64,
    gpus: u64,
}

impl ScoreScale {
    /// Weights for a host of capacity `total` (kinds with zero capacity weigh zero).
    pub fn for_total(total: &Resources) -> ScoreScale {
        fn w(t: u64) -> u64 {
            (1u64 << 32).checked_div(t).unwrap_or(0)
        }
        ScoreScale {
            cpu: w(total.cpu_millis),
            memory: w(total.memory_mib),
            disk: w(total.disk_mib),
            gpus: w(total.gpus),
        }
    }

    /// Sum over kinds of `amount / total` in 2^-32 units: 0 is empty, 4·2^32 is
    /// all four kinds whole. Used to score leftover capacity (best fit picks the
    /// smallest) or load (spread picks the smallest).
    #[inline(always)]
    pub fn score(&self, amount: &Resources) -> u64 {
        // `amount <= total` in every kind, so each product is at most 2^32.
        amount
            .cpu_millis
            .wrapping_mul(self.cpu)
            .wrapping_add(amount.memory_mib.wrapping_mul(self.memory))
            .wrapping_add(amount.disk_mib.wrapping_mul(self.disk))
            .wrapping_add(amount.gpus.wrapping_mul(self.gpus))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let a = Resources::new(5, 10, 0, 1);
        let b = Resources::new(7, 3, 1, 0);
        assert_eq!(a.saturating_sub(&b), Resources::new(0, 7, 0, 1));
        assert_eq!(Resources::new(u64::MAX, 0, 0, 0).saturating_add(&b).cpu_millis, u64::MAX);
        assert_eq!(b.times(3), Resources::new(21, 9, 3, 0));
    }

    #[test]
    fn fits_and_copies() {
        let need = Resources::new(500, 1024, 0, 0);
        let have = Resources::new(2000, 3000, 10, 0);
        assert!(need.fits_in(&have));
        assert!(!have.fits_in(&need));
        assert_eq!(need.copies_in(&have), 2);
        assert_eq!(Resources::ZERO.copies_in(&have), u64::MAX);
    }

    #[test]
    fn score_orders_fullness() {
        // Powers of two, so 2^32 / total is exact.
        let total = Resources::new(4096, 8192, 0, 0);
        let s = ScoreScale::for_total(&total);
        assert_eq!(s.score(&Resources::ZERO), 0);
        assert!(s.score(&Resources::new(1000, 0, 0, 0)) < s.score(&Resources::new(2000, 0, 0, 0)));
        // Half the CPU weighs the same as half the memory.
        let half_cpu = s.score(&Resources::new(2048, 0, 0, 0));
        let half_mem = s.score(&Resources::new(0, 4096, 0, 0));
        assert_eq!(half_cpu, half_mem);
    }
}
