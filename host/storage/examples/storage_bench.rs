//! `cargo run --release -p paceline-storage --example storage_bench`
//!
//! Runs [`paceline_storage::bench`] on SQLite, and on Cassandra when
//! `PACELINE_CASSANDRA` (host:port) is set. Optional env: `BENCH_INSTANCES`,
//! `BENCH_BATCH`, `BENCH_ROUNDS`.

use paceline_storage::bench::{BenchOptions, run};

fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let d = BenchOptions::default();
    let opts = BenchOptions {
        instances: env_num("BENCH_INSTANCES", d.instances),
        batch: env_num("BENCH_BATCH", d.batch),
        rounds: env_num("BENCH_ROUNDS", d.rounds),
        sqlite_path: None,
        cassandra: std::env::var("PACELINE_CASSANDRA").ok().filter(|s| !s.is_empty()),
    };
    match run(&opts).await {
        Ok(report) => print!("{report}"),
        Err(e) => {
            eprintln!("bench failed: {e}");
            std::process::exit(1);
        }
    }
}
