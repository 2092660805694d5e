//! Runs full entitlement passes in a loop, for profiling (`perf record`).
fn main() {
    let (mut rm, leaves) = paceline_resmgr::bench::tree(10);
    for (i, leaf) in leaves.iter().enumerate() {
        let spec = paceline_resmgr::GangSpec {
            tasks: 4 + (i % 13) as u32,
            per_task: paceline_model::Resources::new(500, 2_048, 10_000, (i % 2) as u64),
            ..Default::default()
        };
        if let Err(e) = rm.submit(leaf, spec, 0) {
            panic!("{e}");
        }
    }
    let t = std::time::Instant::now();
    for _ in 0..300 {
        rm.recompute_entitlement_full();
    }
    println!("full pass: {:.1} us", t.elapsed().as_secs_f64() * 1e6 / 300.0);
}
