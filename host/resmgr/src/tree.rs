//! The pool tree: an arena of pools with their specs, their accounting
//! (aggregated up the tree) and their last computed entitlement.
//!
//! Every change is validated in full before anything is written, so a refused
//! change leaves the tree exactly as it was. Rules (ARCHITECTURE.md §4):
//! the sum of children's reservations ≤ the parent's, reservation ≤ limit,
//! a child's limit ≤ its parent's, unique sibling names, no cycles, jobs only
//! in leaves, no deleting a pool with children or live jobs. The root `/` is
//! fixed: unlimited, it receives the cluster's capacity. A limit of
//! [`UNLIMITED`] means "no limit of its own": the pool is still bounded by its
//! ancestors' limits through their entitlement, so it is exempt from the
//! nesting check.

pub use paceline_joints::PoolId;
use std::collections::HashMap;

use paceline_model::pool::{PoolEntry, PoolFile, PoolSpec, PoolType, ResourceKind, UNLIMITED};

use crate::amounts::{self, Amounts, ZERO};
use crate::error::{PoolError, PoolErrorReason as R};

pub(crate) const NONE: u32 = u32::MAX;

/// One pool: spec, accounting over its subtree, entitlement.
///
/// `repr(C)` with the fields an entitlement pass reads first, cache-line
/// aligned: a pass over 10,000 pools is bound by memory traffic, and this
/// keeps what it touches per pool in four or five lines instead of spread
/// over the whole record.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub(crate) struct Node {
    // Hot: read by every entitlement pass.
    pub children: Vec<u32>,
    /// Non-revocable demand the subtree can use: min(cap, own demand or Σ children's).
    pub usable: Amounts,
    pub alloc_nr: Amounts,
    pub queued_nr: Amounts,
    pub res: Amounts,
    /// Most it may be entitled to: the limit, or the reservation if static.
    pub cap: Amounts,
    pub share: Amounts,
    pub ent: Amounts,
    /// Kinds in which the pool is static.
    pub is_static: [bool; 4],
    /// Demand below changed since the last entitlement pass.
    pub dirty: bool,
    pub live: bool,
    pub parent: u32,
    // Warm: incremental passes, slack, admission.
    pub usable_sum: Amounts,
    /// Non-preemptible part of `alloc_nr`.
    pub alloc_np: Amounts,
    /// What controller tasks hold (any lane).
    pub alloc_ctl: Amounts,
    /// Most controller tasks may hold here (`PoolSpec::controller_cap`).
    pub ctl_cap: Amounts,
    pub alloc_rev: Amounts,
    pub queued_rev: Amounts,
    pub usable_rev: Amounts,
    pub slack_ent: Amounts,
    /// Most revocable entitlement: min(slack limit, cap).
    pub slack_cap: Amounts,
    pub gangs: u64,
    pub tasks: u64,
    /// Consecutive periods with non-revocable allocation above entitlement.
    pub over_periods: u32,
    // Cold.
    pub path: String,
    pub spec: PoolSpec,
}

impl Node {
    fn new(path: String, parent: u32, spec: PoolSpec) -> Node {
        let mut n = Node {
            live: true,
            path,
            parent,
            children: Vec::new(),
            spec: PoolSpec::default(),
            res: ZERO,
            cap: ZERO,
            share: ZERO,
            slack_cap: ZERO,
            is_static: [false; 4],
            alloc_nr: ZERO,
            alloc_rev: ZERO,
            alloc_np: ZERO,
            alloc_ctl: ZERO,
            ctl_cap: ZERO,
            queued_nr: ZERO,
            queued_rev: ZERO,
            gangs: 0,
            tasks: 0,
            usable: ZERO,
            usable_sum: ZERO,
            usable_rev: ZERO,
            ent: ZERO,
            slack_ent: ZERO,
            dirty: true,
            over_periods: 0,
        };
        n.set_spec(spec);
        n
    }

    fn set_spec(&mut self, spec: PoolSpec) {
        self.res = spec.reservation.to_array();
        self.share = spec.share.to_array();
        self.is_static = spec.pool_type.to_array().map(|t| t == PoolType::Static);
        let limit = spec.limit.to_array();
        self.cap = std::array::from_fn(|k| if self.is_static[k] { self.res[k] } else { limit[k] });
        self.slack_cap = amounts::min(&spec.slack_limit.to_array(), &self.cap);
        self.ctl_cap = spec.controller_cap().to_array();
        self.spec = spec;
    }

    pub fn demand_nr(&self) -> Amounts {
        amounts::add(&self.alloc_nr, &self.queued_nr)
    }

    pub fn demand_rev(&self) -> Amounts {
        amounts::add(&self.alloc_rev, &self.queued_rev)
    }

    pub fn holds_jobs(&self) -> bool {
        self.gangs > 0 || self.tasks > 0
    }

    /// A leaf with jobs of its own: it may not get children.
    pub fn own_jobs(&self) -> bool {
        self.children.is_empty() && self.holds_jobs()
    }
}

/// The tree of pools.
#[derive(Clone, Debug)]
pub struct PoolTree {
    pub(crate) nodes: Vec<Node>,
    by_path: HashMap<String, u32>,
    free: Vec<u32>,
    /// Live pools, parents before children; rebuilt after a shape change.
    pub(crate) order: Vec<u32>,
    /// The shape or a spec changed: the next entitlement pass is a full one.
    pub(crate) shape_changed: bool,
}

impl Default for PoolTree {
    fn default() -> Self {
        Self::new()
    }
}

fn root_spec() -> PoolSpec {
    PoolSpec {
        reservation: paceline_model::pool::PerKind::splat(UNLIMITED),
        slack_limit: paceline_model::pool::PerKind::splat(UNLIMITED),
        ..PoolSpec::default()
    }
}

/// Splits `/a/b` into (`/a`, `b`) after checking the syntax.
fn split(path: &str) -> Result<(&str, &str), PoolError> {
    let bad = || PoolError::new(path, "path", R::InvalidPath);
    let rest = path.strip_prefix('/').ok_or_else(bad)?;
    if rest.is_empty() {
        return Err(PoolError::new(path, "path", R::Root));
    }
    for seg in rest.split('/') {
        let ok = !seg.is_empty()
            && seg != "."
            && seg != ".."
            && seg.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-');
        if !ok {
            return Err(bad());
        }
    }
    let cut = path.rfind('/').ok_or_else(bad)?;
    let parent = if cut == 0 { "/" } else { &path[..cut] };
    Ok((parent, &path[cut + 1..]))
}

fn spec_error(path: &str, e: paceline_model::pool::SpecError) -> PoolError {
    PoolError::new(path, e.field(), R::Spec(e))
}

impl PoolTree {
    /// A tree with only the root.
    pub fn new() -> PoolTree {
        let mut by_path = HashMap::new();
        by_path.insert("/".to_string(), 0);
        PoolTree {
            nodes: vec![Node::new("/".to_string(), NONE, root_spec())],
            by_path,
            free: Vec::new(),
            order: vec![0],
            shape_changed: true,
        }
    }

    /// The pool at `path`.
    pub fn id(&self, path: &str) -> Option<PoolId> {
        self.by_path.get(path).map(|&i| PoolId(i))
    }

    pub(crate) fn lookup(&self, path: &str) -> Result<u32, PoolError> {
        self.by_path.get(path).copied().ok_or_else(|| PoolError::new(path, "path", R::NotFound))
    }

    /// A pool's path, if it is live.
    pub fn path(&self, id: PoolId) -> Option<&str> {
        self.nodes.get(id.index()).filter(|n| n.live).map(|n| n.path.as_str())
    }

    /// A pool's spec.
    pub fn spec(&self, id: PoolId) -> Option<&PoolSpec> {
        self.nodes.get(id.index()).filter(|n| n.live).map(|n| &n.spec)
    }

    /// A pool's parent (`None` for the root).
    pub fn parent(&self, id: PoolId) -> Option<PoolId> {
        self.nodes.get(id.index()).filter(|n| n.live && n.parent != NONE).map(|n| PoolId(n.parent))
    }

    /// A pool's children.
    pub fn children(&self, id: PoolId) -> impl Iterator<Item = PoolId> + '_ {
        self.nodes.get(id.index()).map(|n| n.children.as_slice()).unwrap_or(&[]).iter().map(|&c| PoolId(c))
    }

    /// Every live pool's path, sorted (for snapshots and listings).
    pub fn paths(&self) -> Vec<String> {
        let mut v: Vec<String> = self.by_path.keys().cloned().collect();
        v.sort();
        v
    }

    /// Every live pool, parents before children.
    pub fn pools(&mut self) -> impl Iterator<Item = PoolId> + '_ {
        self.ensure_order();
        self.order.iter().map(|&i| PoolId(i))
    }

    /// Number of live pools, root included.
    pub fn len(&self) -> usize {
        self.by_path.len()
    }

    /// Only the root.
    pub fn is_empty(&self) -> bool {
        self.len() == 1
    }

    pub(crate) fn ensure_order(&mut self) {
        if self.order.len() == self.by_path.len() && !self.shape_changed {
            return;
        }
        self.order.clear();
        self.order.push(0);
        let mut i = 0;
        while i < self.order.len() {
            let n = self.order[i] as usize;
            for c in 0..self.nodes[n].children.len() {
                let child = self.nodes[n].children[c];
                self.order.push(child);
            }
            i += 1;
        }
    }

    /// Checks `spec` for a pool at `path` under `parent`, with `siblings`
    /// (the parent's other children) and the pool's own `children`.
    fn check_fit(
        &self,
        path: &str,
        spec: &PoolSpec,
        parent: u32,
        siblings_except: u32,
        children: &[u32],
    ) -> Result<(), PoolError> {
        spec.check().map_err(|e| spec_error(path, e))?;
        let p = &self.nodes[parent as usize];
        let res = spec.reservation.to_array();
        let limit = spec.limit.to_array();
        for kind in ResourceKind::ALL {
            let k = kind.index();
            let sum = p
                .children
                .iter()
                .filter(|&&c| c != siblings_except)
                .fold(res[k], |s, &c| s.saturating_add(self.nodes[c as usize].res[k]));
            if sum > p.res[k] {
                return Err(PoolError::new(
                    path,
                    format!("reservation.{}", kind.field()),
                    R::ChildReservations { kind, sum, parent: p.path.clone(), parent_reservation: p.res[k] },
                ));
            }
            let parent_limit = p.spec.limit.to_array()[k];
            if limit[k] != UNLIMITED && limit[k] > parent_limit {
                return Err(PoolError::new(
                    path,
                    format!("limit.{}", kind.field()),
                    R::LimitAboveParent { kind, limit: limit[k], parent: p.path.clone(), parent_limit },
                ));
            }
            let own_children = children.iter().fold(0u64, |s, &c| s.saturating_add(self.nodes[c as usize].res[k]));
            if own_children > res[k] {
                return Err(PoolError::new(
                    path,
                    format!("reservation.{}", kind.field()),
                    R::ChildReservations {
                        kind,
                        sum: own_children,
                        parent: path.to_string(),
                        parent_reservation: res[k],
                    },
                ));
            }
            for &c in children {
                let child = &self.nodes[c as usize];
                let child_limit = child.spec.limit.to_array()[k];
                if child_limit != UNLIMITED && child_limit > limit[k] {
                    return Err(PoolError::new(
                        path,
                        format!("limit.{}", kind.field()),
                        R::LimitBelowChild { kind, child: child.path.clone(), child_limit, limit: limit[k] },
                    ));
                }
            }
        }
        Ok(())
    }

    /// Creates a pool. Its parent must exist and hold no jobs.
    pub fn create(&mut self, path: &str, spec: PoolSpec) -> Result<PoolId, PoolError> {
        let (parent_path, _) = split(path)?;
        if self.by_path.contains_key(path) {
            return Err(PoolError::new(path, "path", R::AlreadyExists));
        }
        let parent = self
            .by_path
            .get(parent_path)
            .copied()
            .ok_or_else(|| PoolError::new(path, "parent", R::ParentNotFound(parent_path.to_string())))?;
        if self.nodes[parent as usize].own_jobs() {
            return Err(PoolError::new(path, "parent", R::ParentHoldsJobs(parent_path.to_string())));
        }
        self.check_fit(path, &spec, parent, NONE, &[])?;
        let node = Node::new(path.to_string(), parent, spec);
        let id = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        self.nodes[parent as usize].children.push(id);
        self.by_path.insert(path.to_string(), id);
        self.shape_changed = true;
        tracing::debug!(pool = path, "pool created");
        Ok(PoolId(id))
    }

    /// Replaces a pool's spec.
    pub fn update(&mut self, path: &str, spec: PoolSpec) -> Result<(), PoolError> {
        let id = self.lookup(path)?;
        let n = &self.nodes[id as usize];
        if n.parent == NONE {
            return Err(PoolError::new(path, "path", R::Root));
        }
        let children = n.children.clone();
        self.check_fit(path, &spec, n.parent, id, &children)?;
        self.nodes[id as usize].set_spec(spec);
        self.shape_changed = true;
        tracing::debug!(pool = path, "pool updated");
        Ok(())
    }

    /// Deletes a pool with no children and no jobs.
    pub fn delete(&mut self, path: &str) -> Result<(), PoolError> {
        let id = self.lookup(path)?;
        let n = &self.nodes[id as usize];
        if n.parent == NONE {
            return Err(PoolError::new(path, "path", R::Root));
        }
        if !n.children.is_empty() {
            return Err(PoolError::new(path, "children", R::HasChildren));
        }
        if n.holds_jobs() {
            return Err(PoolError::new(path, "jobs", R::HoldsJobs { gangs: n.gangs, tasks: n.tasks }));
        }
        let parent = n.parent as usize;
        self.nodes[parent].children.retain(|&c| c != id);
        self.nodes[id as usize].live = false;
        self.by_path.remove(path);
        self.free.push(id);
        self.shape_changed = true;
        tracing::debug!(pool = path, "pool deleted");
        Ok(())
    }

    /// Moves a pool (with its subtree, jobs and accounting) under `new_parent`.
    /// Returns the pool's new path.
    pub fn move_pool(&mut self, path: &str, new_parent: &str) -> Result<String, PoolError> {
        let id = self.lookup(path)?;
        if self.nodes[id as usize].parent == NONE {
            return Err(PoolError::new(path, "path", R::Root));
        }
        let target = self
            .by_path
            .get(new_parent)
            .copied()
            .ok_or_else(|| PoolError::new(path, "parent", R::ParentNotFound(new_parent.to_string())))?;
        // A cycle: the target is the pool or below it.
        let mut up = target;
        while up != NONE {
            if up == id {
                return Err(PoolError::new(path, "parent", R::Cycle(new_parent.to_string())));
            }
            up = self.nodes[up as usize].parent;
        }
        let name = &path[path.rfind('/').map_or(0, |i| i + 1)..];
        let new_path = if new_parent == "/" { format!("/{name}") } else { format!("{new_parent}/{name}") };
        if self.by_path.contains_key(&new_path) && new_path != path {
            return Err(PoolError::new(path, "parent", R::AlreadyExists));
        }
        if self.nodes[target as usize].own_jobs() {
            return Err(PoolError::new(path, "parent", R::ParentHoldsJobs(new_parent.to_string())));
        }
        let spec = self.nodes[id as usize].spec.clone();
        let children = self.nodes[id as usize].children.clone();
        self.check_fit(path, &spec, target, id, &children)?;

        // Validated: now write. Accounting leaves the old ancestors and joins the new.
        let old_parent = self.nodes[id as usize].parent;
        let n = &self.nodes[id as usize];
        let carried = Carried::of(n);
        self.walk_up(old_parent, |a| carried.apply(a, false));
        self.walk_up(target, |a| carried.apply(a, true));
        self.nodes[old_parent as usize].children.retain(|&c| c != id);
        self.nodes[target as usize].children.push(id);
        self.nodes[id as usize].parent = target;
        // Re-path the subtree.
        let mut stack = vec![id];
        while let Some(x) = stack.pop() {
            let old = std::mem::take(&mut self.nodes[x as usize].path);
            let renamed = format!("{new_path}{}", &old[path.len()..]);
            self.by_path.remove(&old);
            self.by_path.insert(renamed.clone(), x);
            self.nodes[x as usize].path = renamed;
            stack.extend(self.nodes[x as usize].children.iter().copied());
        }
        self.shape_changed = true;
        tracing::debug!(pool = path, to = new_path.as_str(), "pool moved");
        Ok(new_path)
    }

    /// Applies a pool file: every entry is created, or updated if it exists.
    /// All or nothing: on an error the tree is left as it was.
    pub fn apply_file(&mut self, file: &PoolFile) -> Result<usize, PoolError> {
        let mut next = self.clone();
        for entry in &file.pools {
            next.apply_entry(entry)?;
        }
        *self = next;
        Ok(file.pools.len())
    }

    fn apply_entry(&mut self, entry: &PoolEntry) -> Result<(), PoolError> {
        let spec = entry.spec();
        if self.by_path.contains_key(&entry.path) {
            self.update(&entry.path, spec)
        } else {
            self.create(&entry.path, spec).map(|_| ())
        }
    }

    /// Parses YAML (see [`PoolFile`]) and applies it, all or nothing.
    pub fn load_yaml(&mut self, yaml: &str) -> Result<usize, PoolError> {
        let file: PoolFile =
            serde_yaml::from_str(yaml).map_err(|e| PoolError::new("/", "file", R::File(e.to_string())))?;
        self.apply_file(&file)
    }

    /// Calls `f` on `from` and each of its ancestors.
    #[inline]
    pub(crate) fn walk_up(&mut self, mut from: u32, mut f: impl FnMut(&mut Node)) {
        while from != NONE {
            let n = &mut self.nodes[from as usize];
            f(n);
            from = n.parent;
        }
    }
}

/// A subtree's accounting, carried from old ancestors to new ones on a move.
struct Carried {
    alloc_nr: Amounts,
    alloc_rev: Amounts,
    alloc_np: Amounts,
    alloc_ctl: Amounts,
    queued_nr: Amounts,
    queued_rev: Amounts,
    gangs: u64,
    tasks: u64,
}

impl Carried {
    fn of(n: &Node) -> Carried {
        Carried {
            alloc_nr: n.alloc_nr,
            alloc_rev: n.alloc_rev,
            alloc_np: n.alloc_np,
            alloc_ctl: n.alloc_ctl,
            queued_nr: n.queued_nr,
            queued_rev: n.queued_rev,
            gangs: n.gangs,
            tasks: n.tasks,
        }
    }

    fn apply(&self, a: &mut Node, add: bool) {
        let f = if add { amounts::add } else { amounts::sub };
        a.alloc_nr = f(&a.alloc_nr, &self.alloc_nr);
        a.alloc_rev = f(&a.alloc_rev, &self.alloc_rev);
        a.alloc_np = f(&a.alloc_np, &self.alloc_np);
        a.alloc_ctl = f(&a.alloc_ctl, &self.alloc_ctl);
        a.queued_nr = f(&a.queued_nr, &self.queued_nr);
        a.queued_rev = f(&a.queued_rev, &self.queued_rev);
        if add {
            a.gangs += self.gangs;
            a.tasks += self.tasks;
        } else {
            a.gangs -= self.gangs;
            a.tasks -= self.tasks;
        }
    }
}
