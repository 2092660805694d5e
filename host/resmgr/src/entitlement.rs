//! Entitlement: how much of each kind every pool may hold, computed top-down.
//!
//! The root gets the cluster's capacity. Each pool divides its entitlement
//! among its children, per kind, in three water-fills (see [`crate::waterfill`]):
//!
//! 1. **Reservations**: each child gets min(demand, reservation), or its whole
//!    reservation if it is static. If the parent cannot cover them all, these
//!    amounts are water-filled by share instead.
//! 2. **Demand**: what is left goes by share to children whose *usable*
//!    demand is unmet, capped by it (exact max-min: satisfied children leave
//!    the share total). Usable demand is demand capped by the pool's limit and
//!    by what its children can use, so capacity never goes to a subtree that
//!    cannot use it while a sibling could.
//! 3. **Idle**: what is still left goes by share up to each child's limit, so
//!    new demand is served at once. Static pools never borrow: their cap is
//!    their reservation.
//!
//! A separate pass entitles slack to revocable work: capacity not held by
//! non-revocable tasks, divided the same way (no reservation phase), each
//! pool capped by its slack limit.
//!
//! Incremental: a demand change marks its leaf. The next pass updates usable
//! demand along the leaf's path only, then re-divides from the root down,
//! descending only into children that are on a marked path or whose
//! entitlement changed. In a contended tree a leaf whose demand is already
//! above its fair share changes nothing but its path; when the change moves
//! the division, the affected subtrees are recomputed, at worst all of them.

use crate::amounts::{self, Amounts};
use crate::tree::{NONE, PoolTree};
use crate::waterfill::{self, Scratch};

/// Reused buffers: a pass allocates nothing once warm.
#[derive(Debug, Default)]
pub(crate) struct EntScratch {
    kids: Vec<u32>,
    wants: Vec<u64>,
    shares: Vec<u64>,
    out: Vec<u64>,
    old: Vec<Amounts>,
    stack: Vec<u32>,
    rows: Vec<Row>,
    fill: Scratch,
    /// Pools whose children were re-divided in the last pass (work done).
    pub divided: usize,
}

/// Recomputes every pool's non-revocable entitlement.
pub(crate) fn full(tree: &mut PoolTree, capacity: &Amounts, s: &mut EntScratch) {
    tree.ensure_order();
    // Bottom-up: usable demand.
    for oi in (0..tree.order.len()).rev() {
        let i = tree.order[oi] as usize;
        let n = &tree.nodes[i];
        let usable = if n.children.is_empty() {
            amounts::min(&n.cap, &n.demand_nr())
        } else {
            let sum = n.children.iter().fold(amounts::ZERO, |a, &c| amounts::add(&a, &tree.nodes[c as usize].usable));
            tree.nodes[i].usable_sum = sum;
            amounts::min(&tree.nodes[i].cap, &sum)
        };
        let n = &mut tree.nodes[i];
        n.usable = usable;
        n.dirty = false;
    }
    let root = &mut tree.nodes[0];
    root.ent = amounts::min(capacity, &root.cap);
    s.divided = 0;
    for oi in 0..tree.order.len() {
        let i = tree.order[oi];
        if !tree.nodes[i as usize].children.is_empty() {
            divide(tree, i, s);
        }
    }
    tree.shape_changed = false;
}

/// Updates entitlement after demand changes at `dirty` leaves (each already
/// marked `dirty`). Falls back to [`full`] after a shape or spec change.
pub(crate) fn incremental(tree: &mut PoolTree, capacity: &Amounts, dirty: &mut Vec<u32>, s: &mut EntScratch) {
    if tree.shape_changed {
        dirty.clear();
        full(tree, capacity, s);
        return;
    }
    if dirty.is_empty() {
        return;
    }
    for &leaf in dirty.iter() {
        let n = &tree.nodes[leaf as usize];
        if !n.live {
            continue;
        }
        let mut new = amounts::min(&n.cap, &n.demand_nr());
        let mut at = leaf;
        loop {
            let n = &mut tree.nodes[at as usize];
            let old = n.usable;
            n.usable = new;
            n.dirty = true;
            let parent = n.parent;
            if parent == NONE {
                break;
            }
            let p = &mut tree.nodes[parent as usize];
            for k in 0..4 {
                // The sum holds `old`; saturating all the same, so a broken
                // invariant skews one pass instead of stopping the scheduler.
                p.usable_sum[k] = p.usable_sum[k].saturating_sub(old[k]).saturating_add(new[k]);
            }
            new = amounts::min(&p.cap, &p.usable_sum);
            at = parent;
        }
    }
    dirty.clear();
    s.divided = 0;
    let root = &mut tree.nodes[0];
    root.ent = amounts::min(capacity, &root.cap);
    s.stack.clear();
    s.stack.push(0);
    while let Some(i) = s.stack.pop() {
        tree.nodes[i as usize].dirty = false;
        if tree.nodes[i as usize].children.is_empty() {
            continue;
        }
        s.old.clear();
        for &c in &tree.nodes[i as usize].children {
            s.old.push(tree.nodes[c as usize].ent);
        }
        divide(tree, i, s);
        for (ci, &c) in s.kids.iter().enumerate() {
            let child = &tree.nodes[c as usize];
            if child.dirty || child.ent != s.old[ci] {
                s.stack.push(c);
            }
        }
    }
}

/// What a division reads of one child, gathered once so the per-kind loops
/// run over a small contiguous table instead of the (large) tree nodes.
#[derive(Clone, Copy, Debug, Default)]
struct Row {
    base: Amounts,
    usable: Amounts,
    cap: Amounts,
    share: Amounts,
    ent: Amounts,
}

/// Divides `node`'s entitlement among its children, per kind.
// Kinds index several parallel arrays at once.
#[allow(clippy::needless_range_loop)]
fn divide(tree: &mut PoolTree, node: u32, s: &mut EntScratch) {
    s.divided += 1;
    s.kids.clear();
    s.kids.extend_from_slice(&tree.nodes[node as usize].children);
    let ent = tree.nodes[node as usize].ent;
    let n = s.kids.len();
    s.rows.clear();
    for &c in &s.kids {
        let ch = &tree.nodes[c as usize];
        let mut base = amounts::ZERO;
        for k in 0..4 {
            let demand = ch.alloc_nr[k].saturating_add(ch.queued_nr[k]);
            base[k] = if ch.is_static[k] { ch.res[k] } else { demand.min(ch.res[k]) };
        }
        s.rows.push(Row { base, usable: ch.usable, cap: ch.cap, share: ch.share, ent: amounts::ZERO });
    }
    s.shares.resize(n, 0);
    s.wants.resize(n, 0);
    s.out.resize(n, 0);
    for k in 0..4 {
        for (j, r) in s.rows.iter().enumerate() {
            s.shares[j] = r.share[k];
            s.out[j] = 0;
            s.wants[j] = r.base[k];
        }
        let mut left = ent[k];
        left -= waterfill::fill(left, &s.wants, &s.shares, &mut s.out, &mut s.fill);
        if left > 0 {
            for (j, r) in s.rows.iter().enumerate() {
                s.wants[j] = r.usable[k].saturating_sub(s.out[j]);
            }
            left -= waterfill::fill(left, &s.wants, &s.shares, &mut s.out, &mut s.fill);
        }
        if left > 0 {
            for (j, r) in s.rows.iter().enumerate() {
                s.wants[j] = r.cap[k].saturating_sub(s.out[j]);
            }
            waterfill::fill(left, &s.wants, &s.shares, &mut s.out, &mut s.fill);
        }
        for (j, r) in s.rows.iter_mut().enumerate() {
            r.ent[k] = s.out[j];
        }
    }
    for (j, &c) in s.kids.iter().enumerate() {
        tree.nodes[c as usize].ent = s.rows[j].ent;
    }
}

/// Recomputes every pool's slack (revocable) entitlement.
#[allow(clippy::needless_range_loop)] // Kinds index several parallel arrays.
pub(crate) fn slack(tree: &mut PoolTree, capacity: &Amounts, s: &mut EntScratch) {
    tree.ensure_order();
    for oi in (0..tree.order.len()).rev() {
        let i = tree.order[oi] as usize;
        let n = &tree.nodes[i];
        let own = if n.children.is_empty() {
            n.demand_rev()
        } else {
            n.children.iter().fold(amounts::ZERO, |a, &c| amounts::add(&a, &tree.nodes[c as usize].usable_rev))
        };
        let cap = n.slack_cap;
        tree.nodes[i].usable_rev = amounts::min(&cap, &own);
    }
    let root = &mut tree.nodes[0];
    root.slack_ent = amounts::min(&amounts::sub(capacity, &root.alloc_nr), &root.slack_cap);
    for oi in 0..tree.order.len() {
        let node = tree.order[oi];
        if tree.nodes[node as usize].children.is_empty() {
            continue;
        }
        s.kids.clear();
        s.kids.extend_from_slice(&tree.nodes[node as usize].children);
        let ent = tree.nodes[node as usize].slack_ent;
        let n = s.kids.len();
        s.shares.resize(n, 0);
        s.wants.resize(n, 0);
        s.out.resize(n, 0);
        for k in 0..4 {
            for (j, &c) in s.kids.iter().enumerate() {
                let ch = &tree.nodes[c as usize];
                s.shares[j] = ch.share[k];
                s.out[j] = 0;
                s.wants[j] = ch.usable_rev[k];
            }
            let mut left = ent[k];
            left -= waterfill::fill(left, &s.wants, &s.shares, &mut s.out, &mut s.fill);
            if left > 0 {
                for (j, &c) in s.kids.iter().enumerate() {
                    s.wants[j] = tree.nodes[c as usize].slack_cap[k].saturating_sub(s.out[j]);
                }
                waterfill::fill(left, &s.wants, &s.shares, &mut s.out, &mut s.fill);
            }
            for (j, &c) in s.kids.iter().enumerate() {
                tree.nodes[c as usize].slack_ent[k] = s.out[j];
            }
        }
    }
}
