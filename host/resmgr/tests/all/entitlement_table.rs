//! Hand-computed entitlements. Each case lists the pools (path, spec,
//! demand), the capacity, and the exact cpu entitlement every pool must get,
//! with the arithmetic in a comment.

use paceline_resmgr::PoolSpec;

use crate::common::{cpu, demand, ent, manager, static_cpu};

struct Case {
    name: &'static str,
    capacity: u64,
    /// (path, spec, cpu demand)
    pools: Vec<(&'static str, PoolSpec, u64)>,
    /// (path, expected cpu entitlement)
    want: Vec<(&'static str, u64)>,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            // Phase 1: a=min(50,20)=20, b=min(10,30)=10, c=0; 70 left.
            // Phase 2 (shares 1:2 among a, c): a wants 30, c 100; level 70/3:
            // a 23, c 46, one unit left goes to c.
            name: "reservations then shares",
            capacity: 100,
            pools: vec![("/a", cpu(20, None, 1), 50), ("/b", cpu(30, None, 1), 10), ("/c", cpu(0, None, 2), 100)],
            want: vec![("/a", 43), ("/b", 10), ("/c", 47)],
        },
        Case {
            // a is satisfied at 10; its share leaves the total, so b and c
            // split the remaining 80 (Peloton kept dividing by 3: 30 each, 20 idle).
            name: "share total re-normalised as pools are satisfied",
            capacity: 90,
            pools: vec![("/a", cpu(0, None, 1), 10), ("/b", cpu(0, None, 1), 100), ("/c", cpu(0, None, 1), 100)],
            want: vec![("/a", 10), ("/b", 40), ("/c", 40)],
        },
        Case {
            // Demand met (10 + 20); 70 idle handed out by share 1:3 up to
            // limits: a may take 40 more, level 70/4: a 17, b 52 (+1 unit).
            name: "idle capacity handed out by share up to limit",
            capacity: 100,
            pools: vec![("/a", cpu(0, Some(50), 1), 10), ("/b", cpu(0, None, 3), 20)],
            want: vec![("/a", 27), ("/b", 73)],
        },
        Case {
            // Static a gets its whole reservation with no demand and never more.
            name: "static pool gets its reservation whole",
            capacity: 100,
            pools: vec![("/a", static_cpu(40), 0), ("/b", cpu(0, None, 1), 100)],
            want: vec![("/a", 40), ("/b", 60)],
        },
        Case {
            // Root: a base min(80,60)=60, b 0; 40 left: a wants 20 more, b 100;
            // level 20 each → a 80 (satisfied), b 20.
            // /a divides 80: x base 40, y 0; x wants 40 more → x 80.
            name: "hierarchy",
            capacity: 100,
            pools: vec![
                ("/a", cpu(60, None, 1), 0),
                ("/a/x", cpu(40, None, 1), 80),
                ("/a/y", cpu(20, None, 1), 0),
                ("/b", cpu(0, None, 1), 100),
            ],
            want: vec![("/a", 80), ("/a/x", 80), ("/a/y", 0), ("/b", 20)],
        },
        Case {
            // Reservations (80) exceed capacity (50): filled by share, 25 each.
            name: "capacity below reservations",
            capacity: 50,
            pools: vec![("/a", cpu(40, None, 1), 100), ("/b", cpu(40, None, 1), 100)],
            want: vec![("/a", 25), ("/b", 25)],
        },
        Case {
            // a is capped at its limit; b takes the rest.
            name: "limit caps",
            capacity: 100,
            pools: vec![("/a", cpu(0, Some(30), 1), 100), ("/b", cpu(0, None, 1), 100)],
            want: vec![("/a", 30), ("/b", 70)],
        },
        Case {
            // /a can use at most 30 (its child's limit) although it has no
            // limit itself: the rest goes to /b, nothing is stranded.
            name: "usable demand capped by children",
            capacity: 100,
            pools: vec![("/a", cpu(0, None, 1), 0), ("/a/x", cpu(0, Some(30), 1), 100), ("/b", cpu(0, None, 1), 100)],
            want: vec![("/a", 30), ("/a/x", 30), ("/b", 70)],
        },
        Case {
            // Odd split: 7 over shares 1:1 → 3 and 3, the leftover unit to the later pool.
            name: "rounding",
            capacity: 7,
            pools: vec![("/a", cpu(0, None, 1), 100), ("/b", cpu(0, None, 1), 100)],
            want: vec![("/a", 3), ("/b", 4)],
        },
    ]
}

#[test]
fn hand_computed_entitlements() {
    for case in cases() {
        let mut rm = manager(case.capacity);
        for (path, spec, _) in &case.pools {
            rm.create_pool(path, spec.clone()).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        }
        for (path, _, d) in &case.pools {
            demand(&mut rm, path, *d);
        }
        rm.recompute_entitlement();
        for (path, want) in &case.want {
            assert_eq!(ent(&rm, path), *want, "{}: pool {path}", case.name);
        }
        // The same answer from an incremental pass after the fact and from scratch.
        rm.recompute_entitlement_full();
        for (path, want) in &case.want {
            assert_eq!(ent(&rm, path), *want, "{} (full): pool {path}", case.name);
        }
    }
}

#[test]
fn every_kind_is_divided_on_its_own() {
    use paceline_model::Resources;
    use paceline_resmgr::{GangSpec, PerKind};
    let mut rm = manager(0);
    rm.set_capacity(Resources::new(100, 1000, 0, 3));
    let a = PoolSpec {
        reservation: PerKind { cpu: 60, memory: 0, disk: 0, gpu: 0 },
        share: PerKind { cpu: 1, memory: 3, disk: 1, gpu: 1 },
        ..PoolSpec::default()
    };
    rm.create_pool("/a", a).expect("a");
    rm.create_pool("/b", PoolSpec::default()).expect("b");
    for p in ["/a", "/b"] {
        let g = GangSpec { per_task: Resources::new(100, 1000, 0, 5), ..GangSpec::default() };
        rm.submit(p, g, 0).expect("submit");
    }
    rm.recompute_entitlement();
    let (a, b) = (rm.pool_status("/a").expect("a").entitlement, rm.pool_status("/b").expect("b").entitlement);
    // cpu: a 60 reserved + 20 of the remaining 40; memory 3:1; gpu 3 milli over 1:1 → 1 and 2.
    assert_eq!((a.cpu_millis, b.cpu_millis), (80, 20));
    assert_eq!((a.memory_mib, b.memory_mib), (750, 250));
    assert_eq!((a.gpu_milli, b.gpu_milli), (1, 2));
}
