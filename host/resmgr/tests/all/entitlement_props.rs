//! Property tests over random trees, demands and capacities, per kind
//! (ARCHITECTURE.md §4): Σ children ≤ parent; each child ≥ min(demand,
//! reservation) when the parent covers reservations; ≤ limit; work-conserving;
//! shares respected within one unit. And: an incremental pass after demand
//! changes gives exactly what a full pass gives.

use paceline_model::Resources;
use paceline_resmgr::{Config, GangSpec, PerKind, PoolId, PoolSpec, PoolStatus, PoolType, ResourceManager, UNLIMITED};
use proptest::prelude::*;

/// One random pool: which earlier pool is its parent, and raw numbers that
/// are clamped into a valid spec.
#[derive(Clone, Debug)]
struct RawPool {
    parent: usize,
    reservation: [u64; 4],
    limit: [Option<u64>; 4],
    share: [u64; 4],
    is_static: [bool; 4],
    demand: [u64; 4],
}

fn raw_pool() -> impl Strategy<Value = RawPool> {
    (
        any::<usize>(),
        prop::array::uniform4(0u64..60),
        prop::array::uniform4(prop::option::weighted(0.4, 0u64..200)),
        prop::array::uniform4(1u64..5),
        prop::array::uniform4(prop::bool::weighted(0.15)),
        prop::array::uniform4(prop::option::weighted(0.7, 0u64..120)),
    )
        .prop_map(|(parent, reservation, limit, share, is_static, demand)| RawPool {
            parent,
            reservation,
            limit,
            share,
            is_static,
            demand: demand.map(|d| d.unwrap_or(0)),
        })
}

struct World {
    rm: ResourceManager,
    paths: Vec<String>,
}

/// Builds a valid tree from raw pools: reservations clamped to what the
/// parent has left, limits to [reservation, parent's limit].
fn build(raw: &[RawPool], capacity: [u64; 4]) -> World {
    let mut rm = ResourceManager::new(Config::default());
    rm.set_capacity(Resources::new(capacity[0], capacity[1], capacity[2], capacity[3]));
    let mut paths: Vec<String> = vec!["/".into()];
    let mut res_left: Vec<[u64; 4]> = vec![[u64::MAX; 4]];
    let mut limits: Vec<[u64; 4]> = vec![[UNLIMITED; 4]];
    let mut depth = vec![0usize];
    for (i, r) in raw.iter().enumerate() {
        // Parents among earlier pools of depth < 3, so trees stay shallow and bushy.
        let candidates: Vec<usize> = (0..paths.len()).filter(|&p| depth[p] < 3).collect();
        let parent = candidates[r.parent % candidates.len()];
        let mut spec = PoolSpec::default();
        let mut res = [0u64; 4];
        let mut lim = [0u64; 4];
        for k in 0..4 {
            res[k] = r.reservation[k].min(res_left[parent][k]);
            lim[k] = match r.limit[k] {
                Some(l) => l.max(res[k]).min(limits[parent][k]),
                None => limits[parent][k],
            };
            res_left[parent][k] -= res[k];
        }
        spec.reservation = PerKind::from_array(res);
        spec.limit = PerKind::from_array(lim);
        spec.share = PerKind::from_array(r.share);
        spec.pool_type = PerKind::from_array(r.is_static.map(|s| if s { PoolType::Static } else { PoolType::Elastic }));
        let path = if parent == 0 { format!("/p{i}") } else { format!("{}/p{i}", paths[parent]) };
        rm.create_pool(&path, spec).unwrap_or_else(|e| panic!("generated spec refused: {e}"));
        paths.push(path);
        res_left.push(res);
        limits.push(lim);
        depth.push(depth[parent] + 1);
    }
    World { rm, paths }
}

fn submit_demands(w: &mut World, raw: &[RawPool]) {
    for (i, r) in raw.iter().enumerate() {
        let path = &w.paths[i + 1];
        let id = w.rm.tree().id(path).expect("pool");
        if w.rm.tree().children(id).next().is_some() || r.demand == [0; 4] {
            continue;
        }
        let d = r.demand;
        let g = GangSpec { per_task: Resources::new(d[0], d[1], d[2], d[3]), ..GangSpec::default() };
        w.rm.submit(path, g, 0).expect("submit to leaf");
    }
}

fn amounts(r: &Resources) -> [u64; 4] {
    [r.cpu_millis, r.memory_mib, r.disk_mib, r.gpu_milli]
}

/// Checks every property at every interior pool, per kind.
#[allow(clippy::needless_range_loop)]
fn check(w: &World) -> Result<(), TestCaseError> {
    let rm = &w.rm;
    let status = |p: PoolId| -> PoolStatus { rm.pool_status(rm.tree().path(p).expect("live")).expect("status") };
    let root = status(PoolId::ROOT);
    let cap = amounts(&rm.capacity());
    prop_assert_eq!(amounts(&root.entitlement), cap, "root gets the cluster");
    for path in &w.paths {
        let id = rm.tree().id(path).expect("pool");
        let kids: Vec<PoolStatus> = rm.tree().children(id).map(status).collect();
        if kids.is_empty() {
            continue;
        }
        let parent = status(id);
        let pe = amounts(&parent.entitlement);
        for k in 0..4 {
            let e = |s: &PoolStatus| amounts(&s.entitlement)[k];
            let res = |s: &PoolStatus| s.spec.reservation.to_array()[k];
            let is_static = |s: &PoolStatus| s.spec.pool_type.to_array()[k] == PoolType::Static;
            let cap_of = |s: &PoolStatus| if is_static(s) { res(s) } else { s.spec.limit.to_array()[k] };
            let base = |s: &PoolStatus| if is_static(s) { res(s) } else { amounts(&s.demand)[k].min(res(s)) };
            let usable = |s: &PoolStatus| amounts(&s.usable_demand)[k];

            let sum: u64 = kids.iter().map(e).sum();
            prop_assert!(sum <= pe[k], "{path} kind {k}: children {sum} > parent {}", pe[k]);
            let bases: u64 = kids.iter().map(base).sum();
            for c in &kids {
                prop_assert!(e(c) <= cap_of(c), "{} kind {k}: {} above limit {}", c.path, e(c), cap_of(c));
                if bases <= pe[k] {
                    prop_assert!(
                        e(c) >= base(c),
                        "{} kind {k}: {} below min(demand, reservation) {}",
                        c.path,
                        e(c),
                        base(c)
                    );
                }
            }
            // Work-conserving: idle only when every child is at its cap.
            if sum < pe[k] {
                for c in &kids {
                    prop_assert_eq!(
                        e(c),
                        cap_of(c),
                        "{} kind {}: {} idle while below its limit",
                        c.path,
                        k,
                        pe[k] - sum
                    );
                }
            }
            // Shares: elastic children with unmet usable demand got the
            // capacity above their reservations in proportion to shares,
            // each within one unit of its exact share.
            if bases <= pe[k] {
                let unmet: Vec<&PoolStatus> = kids.iter().filter(|c| !is_static(c) && e(c) < usable(c)).collect();
                for a in &unmet {
                    for b in &unmet {
                        let (sa, sb) = (a.spec.share.to_array()[k] as i128, b.spec.share.to_array()[k] as i128);
                        let (ia, ib) = ((e(a) - base(a)) as i128, (e(b) - base(b)) as i128);
                        prop_assert!(
                            (ia * sb - ib * sa).abs() < sa + sb,
                            "{} ({ia}, share {sa}) vs {} ({ib}, share {sb}) kind {k}",
                            a.path,
                            b.path
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

fn snapshot(w: &World) -> Vec<(String, Resources)> {
    w.paths.iter().map(|p| (p.clone(), w.rm.pool_status(p).expect("pool").entitlement)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold(raw in prop::collection::vec(raw_pool(), 1..14), capacity in prop::array::uniform4(0u64..400)) {
        let mut w = build(&raw, capacity);
        submit_demands(&mut w, &raw);
        w.rm.recompute_entitlement();
        check(&w)?;
    }

    #[test]
    fn incremental_matches_full(
        raw in prop::collection::vec(raw_pool(), 1..14),
        capacity in prop::array::uniform4(0u64..400),
        changes in prop::collection::vec((any::<usize>(), prop::array::uniform4(0u64..80), any::<bool>()), 1..6),
    ) {
        let mut w = build(&raw, capacity);
        submit_demands(&mut w, &raw);
        w.rm.recompute_entitlement();
        let mut gangs = Vec::new();
        for (pick, d, cancel) in changes {
            let leaves: Vec<String> = w.paths.iter().filter(|p| {
                let id = w.rm.tree().id(p).expect("pool");
                p.as_str() != "/" && w.rm.tree().children(id).next().is_none()
            }).cloned().collect();
            let leaf = &leaves[pick % leaves.len()];
            if cancel && !gangs.is_empty() {
                let g = gangs.remove(pick % gangs.len());
                w.rm.cancel(g);
            } else {
                let g = GangSpec { per_task: Resources::new(d[0], d[1], d[2], d[3]), ..GangSpec::default() };
                gangs.push(w.rm.submit(leaf, g, 0).expect("submit"));
            }
            w.rm.recompute_entitlement();
            let incremental = snapshot(&w);
            w.rm.recompute_entitlement_full();
            prop_assert_eq!(incremental, snapshot(&w));
            check(&w)?;
        }
    }
}
