//! Per-kind amounts as `[u64; 4]` (cpu, memory, disk, gpu): the form the hot
//! paths work in. Ports are not entitled (they are a per-host matter), so
//! they are dropped here.

use paceline_model::Resources;
use paceline_model::pool::ResourceKind;

/// cpu millicores, memory MiB, disk MiB, milli-GPUs.
pub type Amounts = [u64; 4];

/// Nothing.
pub const ZERO: Amounts = [0; 4];

/// The four entitled kinds of a resource vector.
#[inline]
pub fn of(r: &Resources) -> Amounts {
    [r.cpu_millis, r.memory_mib, r.disk_mib, r.gpu_milli]
}

/// Back to a resource vector (no ports).
#[inline]
pub fn to_resources(a: &Amounts) -> Resources {
    Resources::new(a[0], a[1], a[2], a[3])
}

/// Kind-wise saturating sum.
#[inline]
pub fn add(a: &Amounts, b: &Amounts) -> Amounts {
    [a[0].saturating_add(b[0]), a[1].saturating_add(b[1]), a[2].saturating_add(b[2]), a[3].saturating_add(b[3])]
}

/// Kind-wise difference saturating at zero.
#[inline]
pub fn sub(a: &Amounts, b: &Amounts) -> Amounts {
    [a[0].saturating_sub(b[0]), a[1].saturating_sub(b[1]), a[2].saturating_sub(b[2]), a[3].saturating_sub(b[3])]
}

/// Kind-wise minimum.
#[inline]
pub fn min(a: &Amounts, b: &Amounts) -> Amounts {
    [a[0].min(b[0]), a[1].min(b[1]), a[2].min(b[2]), a[3].min(b[3])]
}

/// Kind-wise `a * n`, saturating.
#[inline]
pub fn times(a: &Amounts, n: u64) -> Amounts {
    a.map(|v| v.saturating_mul(n))
}

/// The first kind in which `used + extra` exceeds `bound`, and by how much.
#[inline]
pub fn over(used: &Amounts, extra: &Amounts, bound: &Amounts) -> Option<(ResourceKind, u64)> {
    for k in 0..4 {
        let total = used[k].saturating_add(extra[k]);
        if total > bound[k] {
            return Some((ResourceKind::ALL[k], total - bound[k]));
        }
    }
    None
}

/// Every kind of `a` is at most `b`'s.
#[inline]
pub fn fits(a: &Amounts, b: &Amounts) -> bool {
    (a[0] <= b[0]) & (a[1] <= b[1]) & (a[2] <= b[2]) & (a[3] <= b[3])
}

/// Every kind is zero.
#[inline]
pub fn is_zero(a: &Amounts) -> bool {
    *a == ZERO
}
