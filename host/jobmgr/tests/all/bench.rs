/// The bench figures on a debug build: a 10,000-instance batch job created
/// and handed to the resource manager, and in-memory goal-state transitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_figures() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = paceline_jobmgr::bench::run(dir.path(), 10_000).await.expect("bench");
    println!("{}", serde_json::to_string(&r).expect("json"));
    assert_eq!(r.gangs_submitted, 10_000);
    assert_eq!(r.held_after_kill, 0, "the kill left nothing queued or charged: {r:?}");
    assert!(r.transitions >= 1_000_000);
    // Budgets (1 s, 100,000/s) are for optimised builds; a debug build must
    // still be within 5x of them.
    assert!(r.create_ms < 5_000.0, "{r:?}");
    assert!(r.transitions_per_sec > 20_000.0, "{r:?}");
}
