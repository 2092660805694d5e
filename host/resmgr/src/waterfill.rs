//! Weighted max-min water-filling in integers, the step every entitlement
//! phase is made of.
//!
//! Given an amount to hand out, and for each claimant a want (the most it may
//! get in this step) and a share, every claimant gets `min(want, level·share)`
//! for the highest water level the amount allows. Each claimant that is
//! satisfied leaves the pool and **its share leaves the share total**, so what
//! it did not need is spread over the others (Peloton kept the original total
//! and left capacity idle).
//! The fractional level is floored and the few units left over (fewer than
//! the claimants still unsatisfied) go one each to those claimants, so every
//! claimant is within one unit of its exact weighted fair amount.

/// Reusable buffers, so a fill does not allocate once warm.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    order: Vec<u32>,
}

/// Hands out up to `amount` over claimants, adding to `out[i]`. Returns what
/// was handed out. `wants`, `shares` and `out` have one entry per claimant;
/// a claimant with share 0 is treated as share 1.
pub(crate) fn fill(amount: u64, wants: &[u64], shares: &[u64], out: &mut [u64], scratch: &mut Scratch) -> u64 {
    debug_assert!(wants.len() == shares.len() && wants.len() == out.len());
    let total_want: u128 = wants.iter().map(|&w| u128::from(w)).sum();
    if total_want <= u128::from(amount) {
        // Enough for everyone: the common case when the parent is not contended.
        for (o, &w) in out.iter_mut().zip(wants) {
            *o = o.saturating_add(w);
        }
        return total_want as u64;
    }
    // Find the water level by fixed-point iteration instead of sorting: with
    // L left over the unsatisfied claimants and S their share total, every
    // claimant with want·S ≤ L·share is satisfied at this level; giving them
    // their wants only raises the level, so repeat until none is added. Ends
    // with the same set as processing in increasing want/share, in a few
    // linear passes for the handful of children a pool has.
    let open = &mut scratch.order;
    open.clear();
    open.extend((0..wants.len() as u32).filter(|&i| wants[i as usize] > 0));
    let share = |i: u32| u128::from(shares[i as usize].max(1));
    let want = |i: u32| u128::from(wants[i as usize]);
    let mut left = u128::from(amount);
    let mut share_total: u128 = open.iter().map(|&i| share(i)).sum();
    loop {
        let before = open.len();
        let (l, st) = (left, share_total);
        open.retain(|&i| {
            if want(i) * st <= l * share(i) {
                out[i as usize] = out[i as usize].saturating_add(wants[i as usize]);
                left -= want(i);
                share_total -= share(i);
                false
            } else {
                true
            }
        });
        if open.len() == before || open.is_empty() {
            break;
        }
    }
    if open.is_empty() {
        return amount - left as u64;
    }
    // Everyone still open is capped by the level: floor of the exact share.
    let mut given: u128 = 0;
    for &i in open.iter() {
        let g = mul_div(left, share(i), share_total);
        out[i as usize] = out[i as usize].saturating_add(g as u64);
        given += g;
    }
    // Fewer than open.len() units remain; each of these claimants wanted more
    // than its exact share, so one more unit never passes its want. They go
    // to the last claimants first, so the result is deterministic.
    let mut remainder = left - given;
    for &i in open.iter().rev() {
        if remainder == 0 {
            break;
        }
        out[i as usize] = out[i as usize].saturating_add(1);
        remainder -= 1;
    }
    amount
}

/// `a * b / c` (floored), in 64-bit arithmetic when it fits: a 128-bit
/// division is a slow library call, and amounts and shares are usually small.
#[inline]
fn mul_div(a: u128, b: u128, c: u128) -> u128 {
    if let (Ok(a64), Ok(b64), Ok(c64)) = (u64::try_from(a), u64::try_from(b), u64::try_from(c))
        && let Some(p) = a64.checked_mul(b64)
    {
        return u128::from(p / c64);
    }
    a * b / c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(amount: u64, wants: &[u64], shares: &[u64]) -> Vec<u64> {
        let mut out = vec![0; wants.len()];
        fill(amount, wants, shares, &mut out, &mut Scratch::default());
        out
    }

    #[test]
    fn table() {
        // (amount, wants, shares, expected)
        type Case<'a> = (u64, &'a [u64], &'a [u64], &'a [u64]);
        let cases: &[Case<'_>] = &[
            (100, &[10, 20], &[1, 1], &[10, 20]),
            // Equal shares, one satisfied early: its leftover goes to the others.
            (100, &[10, 100, 100], &[1, 1, 1], &[10, 45, 45]),
            // Shares 1:3 over 80.
            (80, &[100, 100], &[1, 3], &[20, 60]),
            // Re-normalisation: A(1) wants 5, B(1) and C(2) unlimited over 65.
            // Level after A: 60 over shares 3 → 20 each share.
            (65, &[5, 1000, 1000], &[1, 1, 2], &[5, 20, 40]),
            // Remainder units: 10 over three equal shares.
            (10, &[100, 100, 100], &[1, 1, 1], &[3, 3, 4]),
            (0, &[5, 5], &[1, 1], &[0, 0]),
            (7, &[0, 100], &[5, 1], &[0, 7]),
        ];
        for (amount, wants, shares, want) in cases {
            assert_eq!(run(*amount, wants, shares), *want, "amount {amount} wants {wants:?} shares {shares:?}");
        }
    }

    #[test]
    fn unlimited_wants_do_not_overflow() {
        assert_eq!(run(9, &[u64::MAX, u64::MAX], &[1, 2]), vec![3, 6]);
    }
}
