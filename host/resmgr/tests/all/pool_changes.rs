//! Pool changes: every invalid change is refused with an error naming the
//! pool and the field, and leaves the tree exactly as it was.

use paceline_resmgr::{PoolError, PoolErrorReason, PoolSpec, ResourceManager, UNLIMITED};

use crate::common::{cpu, gang, manager};

fn world() -> ResourceManager {
    let mut rm = manager(1000);
    rm.create_pool("/a", cpu(50, Some(100), 1)).expect("a");
    rm.create_pool("/a/x", cpu(20, Some(80), 1)).expect("x");
    rm.create_pool("/b", cpu(40, None, 1)).expect("b");
    rm.submit("/b", gang(1, 1, 10), 0).expect("job in b");
    rm.recompute_entitlement();
    rm
}

/// Everything a change could alter: paths, specs, accounting, entitlement.
fn snapshot(rm: &ResourceManager) -> Vec<String> {
    rm.tree().paths().iter().map(|p| format!("{:?}", rm.pool_status(p).expect("status"))).collect()
}

fn with(f: impl FnOnce(&mut PoolSpec)) -> PoolSpec {
    let mut s = PoolSpec::default();
    f(&mut s);
    s
}

type Change = Box<dyn Fn(&mut ResourceManager) -> Result<(), PoolError>>;

fn create(path: &'static str, spec: PoolSpec) -> Change {
    Box::new(move |rm| rm.create_pool(path, spec.clone()).map(|_| ()))
}
fn update(path: &'static str, spec: PoolSpec) -> Change {
    Box::new(move |rm| rm.update_pool(path, spec.clone()))
}
fn delete(path: &'static str) -> Change {
    Box::new(move |rm| rm.delete_pool(path))
}
fn mv(path: &'static str, to: &'static str) -> Change {
    Box::new(move |rm| rm.move_pool(path, to).map(|_| ()))
}

#[test]
fn invalid_changes_are_refused_and_change_nothing() {
    // (what, change, pool named, field named)
    let cases: Vec<(&str, Change, &str, &str)> = vec![
        ("bad path segment", create("/a/../y", PoolSpec::default()), "/a/../y", "path"),
        ("relative path", create("a", PoolSpec::default()), "a", "path"),
        ("trailing slash", create("/a/", PoolSpec::default()), "/a/", "path"),
        ("duplicate sibling name", create("/a/x", PoolSpec::default()), "/a/x", "path"),
        ("missing parent", create("/zz/y", PoolSpec::default()), "/zz/y", "parent"),
        ("children's reservations exceed parent's", create("/a/y", cpu(40, None, 1)), "/a/y", "reservation.cpu_millis"),
        ("limit above parent's", create("/a/y", cpu(0, Some(200), 1)), "/a/y", "limit.cpu_millis"),
        (
            "reservation above limit",
            create(
                "/c",
                with(|s| {
                    s.reservation.memory = 10;
                    s.limit.memory = 5;
                }),
            ),
            "/c",
            "reservation.memory_mib",
        ),
        ("zero share", create("/c", with(|s| s.share.gpu = 0)), "/c", "share.gpus"),
        ("child under a pool with jobs", create("/b/y", PoolSpec::default()), "/b/y", "parent"),
        ("reservation below children's", update("/a", cpu(10, Some(100), 1)), "/a", "reservation.cpu_millis"),
        ("limit below a child's", update("/a", cpu(50, Some(50), 1)), "/a", "limit.cpu_millis"),
        ("update beyond parent's reservation", update("/a/x", cpu(60, Some(80), 1)), "/a/x", "reservation.cpu_millis"),
        ("update the root", update("/", PoolSpec::default()), "/", "path"),
        ("update a missing pool", update("/nope", PoolSpec::default()), "/nope", "path"),
        ("delete with children", delete("/a"), "/a", "children"),
        ("delete with jobs", delete("/b"), "/b", "jobs"),
        ("delete missing", delete("/nope"), "/nope", "path"),
        ("delete root", delete("/"), "/", "path"),
        ("move under itself", mv("/a", "/a"), "/a", "parent"),
        ("move under own child", mv("/a", "/a/x"), "/a", "parent"),
        ("move under a pool with jobs", mv("/a/x", "/b"), "/a/x", "parent"),
        ("move beyond new parent's reservation", mv("/b", "/a"), "/b", "reservation.cpu_millis"),
        ("move to missing parent", mv("/a/x", "/zz"), "/a/x", "parent"),
        ("move the root", mv("/", "/a"), "/", "path"),
    ];
    for (what, change, pool, field) in cases {
        let mut rm = world();
        let before = snapshot(&rm);
        let err = change(&mut rm).expect_err(what);
        assert_eq!((err.pool.as_str(), err.field.as_str()), (pool, field), "{what}: {err}");
        let text = err.to_string();
        assert!(text.contains(pool) && text.contains(field), "{what}: message {text:?} names pool and field");
        rm.recompute_entitlement();
        assert_eq!(snapshot(&rm), before, "{what}: tree changed");
    }
}

#[test]
fn move_carries_subtree_and_accounting() {
    let mut rm = world();
    rm.create_pool("/c", cpu(60, None, 1)).expect("c");
    rm.submit("/a/x", gang(2, 2, 5), 0).expect("job");
    let new = rm.move_pool("/a", "/c").expect("move");
    assert_eq!(new, "/c/a");
    assert!(rm.tree().id("/a").is_none());
    assert!(rm.tree().id("/c/a/x").is_some());
    let c = rm.pool_status("/c").expect("c");
    assert_eq!((c.demand.cpu_millis, c.queued_gangs), (10, 1));
    assert_eq!(rm.pool_status("/").expect("root").demand.cpu_millis, 20);
}

#[test]
fn jobs_only_in_leaves_and_delete_when_empty() {
    let mut rm = world();
    let err = rm.submit("/a", gang(1, 1, 1), 0).expect_err("interior pool");
    assert!(
        matches!(err, paceline_resmgr::SubmitError::Pool(PoolError { reason: PoolErrorReason::NotLeaf, .. })),
        "{err}"
    );
    assert!(rm.submit("/", gang(1, 1, 1), 0).is_err(), "root takes no jobs");
    rm.delete_pool("/a/x").expect("empty leaf deletes");
    rm.delete_pool("/a").expect("then its parent");
    assert_eq!(rm.tree().paths(), vec!["/".to_string(), "/b".to_string()]);
}

#[test]
fn yaml_loads_all_or_nothing() {
    let mut rm = ResourceManager::new(Default::default());
    let good = "pools:\n  - path: /ml\n    reservation: { cpu: 4000, gpu: 4 }\n    limit: { gpu: 8 }\n    share: { cpu: 2 }\n  - path: /ml/train\n    reservation: { gpu: 4 }\n    type: { gpu: static }\n    slack_limit: { cpu: 1000 }\n";
    assert_eq!(rm.load_pools_yaml(good), Ok(2));
    let spec = rm.tree().spec(rm.tree().id("/ml/train").expect("train")).expect("spec").clone();
    assert_eq!(spec.reservation.gpu, 4000, "4 whole GPUs, in milli-GPUs");
    assert_eq!(spec.limit.gpu, UNLIMITED, "no limit of its own; bounded by /ml's through entitlement");
    let before = snapshot(&rm);
    // The second entry breaks the reservation rule: the first must not be applied either.
    let bad = "pools:\n  - path: /web\n  - path: /ml/infer\n    reservation: { gpu: 1 }\n";
    let err = rm.load_pools_yaml(bad).expect_err("over reservation");
    assert_eq!((err.pool.as_str(), err.field.as_str()), ("/ml/infer", "reservation.gpus"));
    assert_eq!(snapshot(&rm), before);
    let err = rm.load_pools_yaml("pools:\n  - path: /x\n    resrvation: {}\n").expect_err("unknown field");
    assert_eq!(err.field, "file");
    assert_eq!(snapshot(&rm), before);
}
