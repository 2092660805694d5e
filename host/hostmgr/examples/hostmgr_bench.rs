//! `cargo run -p paceline-hostmgr --example hostmgr_bench [hosts] [runs]`: prints
//! the host manager's figures (what `paceline bench hosts` reports).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use paceline_hostmgr::bench;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().unwrap());
    let hosts = args.next().unwrap_or(10_000);
    let runs = args.next().unwrap_or(100_000);
    for per_lease in [100, hosts] {
        let l = bench::lease_rounds(hosts, per_lease, Duration::from_secs(2)).await.unwrap();
        println!(
            "lease+release: {:.0} rounds/s ({} hosts, {} per lease, {} rounds in {:.2?}; budget >= 100/s)",
            l.rounds_per_sec, l.hosts, l.hosts_per_lease, l.rounds, l.elapsed
        );
    }
    let s = bench::status_updates(hosts, runs).await.unwrap();
    println!(
        "status updates: {:.0}/s ({} runs, {} updates acknowledged in {:.2?}; budget >= 50000/s)",
        s.updates_per_sec, s.runs, s.updates, s.elapsed
    );
}
