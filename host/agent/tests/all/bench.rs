use std::time::Duration;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_agent_launches_100_trivial_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let figures = paceline_agent::bench_launch(dir.path(), 100, isolation(), Duration::from_secs(60)).await.unwrap();
    println!("bench_launch: {figures} [budget: 100 SUCCEEDED within 3000 ms]");
    assert_eq!(figures.succeeded, 100, "{figures}");
    if figures.ended_after > Duration::from_secs(3) {
        println!("WARNING: over the 3 s budget on this (shared, 2-core) machine");
    }
}
