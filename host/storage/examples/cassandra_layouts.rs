//! How fast a Cassandra node or cluster takes a state change of a bucket of
//! tasks in four table layouts, written by the driver alone (no store, no
//! fence, no versions): what a layout would let the store reach, not what
//! the store does. `bench storage` and `bench server` measure the store.
//!
//! ```sh
//! source <(deploy/cassandra/cassandra.sh env DIR)
//! cargo run --release -p paceline-storage --example cassandra_layouts
//! ```
//!
//! Layouts (each state change is one request for the bucket's tasks):
//! - `rows`: a row per task with `state`, `version` and the runtime's JSON
//!   in `body`, an unlogged batch per bucket: the `tasks` table of schema 9+.
//! - `rows1`: the same with the JSON alone (one cell a row).
//! - `map`: a row per bucket, the tasks' JSON in a `map<int, blob>`.
//! - `blob`: a row per bucket, the tasks' JSON concatenated in one blob.
//!
//! Env: `PROBE_LAYOUTS` (default all four, comma-separated, repeats allowed),
//! `PROBE_SECS` per layout (15), `PROBE_CONCURRENCY` requests in flight (32),
//! `PROBE_TASKS_PER_CHANGE` (100), `PROBE_BODY_BYTES` per task (420, about a
//! running task's runtime JSON). Keyspace `paceline_layout`, dropped after;
//! replication, consistency, login and TLS as `CassandraConfig::with_env_security`
//! reads them, so a cluster is written as the store writes it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use paceline_storage::cassandra::CassandraStore;
use paceline_storage::config::CassandraConfig;
use scylla::statement::batch::{Batch, BatchType};

fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn body(i: i32, v: i64, bytes: usize) -> Vec<u8> {
    format!(
        r#"{{"state":"RUNNING","goal_state":"SUCCEEDED","run_id":"job-{i}-{v}","host":"host-{h}","ports":{{}},"message":"","reason":"","healthy":null,"failure_count":0,"started_at_ms":{t},"placed_at_ms":{t},"launched_at_ms":{t},"version":{v},"desired_config_version":1,"config_version":1,"prev_run_id":null,"devices":[],"agent_id":"agent-{h}"}}"#,
        h = i % 500,
        t = 1_790_000_000_000_i64 + i as i64
    )
    .into_bytes()
    .into_iter()
    .cycle()
    .take(bytes)
    .collect()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("PACELINE_CASSANDRA").map_err(|_| "PACELINE_CASSANDRA (host:port[,…]) is not set")?;
    let secs: u64 = env_num("PROBE_SECS", 15);
    let conc: usize = env_num("PROBE_CONCURRENCY", 32);
    let per: i32 = env_num("PROBE_TASKS_PER_CHANGE", 100);
    let only = std::env::var("PROBE_LAYOUTS").unwrap_or_else(|_| "rows,rows1,map,blob".into());
    let bytes: usize = env_num("PROBE_BODY_BYTES", 420);
    if let Some(bad) = only.split(',').find(|l| !["rows", "rows1", "map", "blob"].contains(l)) {
        return Err(format!("PROBE_LAYOUTS: unknown layout {bad:?} (rows, rows1, map, blob)").into());
    }
    let cfg = CassandraConfig::local(&addr, "paceline_layout").with_env_security();
    let store = CassandraStore::connect(&cfg).await?;
    let s = store.session();
    for ddl in [
        "CREATE TABLE IF NOT EXISTS paceline_layout.t_rows (job_id text, bucket int, instance int, state text, version bigint, body blob, PRIMARY KEY ((job_id, bucket), instance))",
        "CREATE TABLE IF NOT EXISTS paceline_layout.t_rows1 (job_id text, bucket int, instance int, body blob, PRIMARY KEY ((job_id, bucket), instance))",
        "CREATE TABLE IF NOT EXISTS paceline_layout.t_map (job_id text, bucket int, bodies map<int, blob>, PRIMARY KEY ((job_id, bucket)))",
        "CREATE TABLE IF NOT EXISTS paceline_layout.t_blob (job_id text, bucket int, body blob, PRIMARY KEY ((job_id, bucket)))",
    ] {
        s.query_unpaged(ddl, ()).await?;
    }
    let consistency = store.consistency();
    println!("consistency {consistency:?}, {per} tasks a change of {bytes} bytes each, {conc} changes in flight");
    // Every request's values are made before the clock starts: the client
    // shares the machine's cores with the nodes it measures.
    let bodies: Vec<Vec<u8>> = (0..per).map(|i| body(i, 3, bytes)).collect();
    let bucket_map: BTreeMap<i32, Vec<u8>> = (0..per).zip(bodies.iter().cloned()).collect();
    let bucket_blob: Vec<u8> = bodies.concat();
    let (bodies, bucket_map, bucket_blob) = (&bodies, &bucket_map, &bucket_blob);
    let prep = |q: &'static str| async move {
        let mut st = s.prepare(q).await?;
        st.set_consistency(consistency);
        Ok::<_, scylla::errors::PrepareError>(st)
    };
    let st_rows = prep("INSERT INTO paceline_layout.t_rows (job_id, bucket, instance, state, version, body) VALUES (?, 0, ?, 'RUNNING', ?, ?) USING TIMESTAMP ?").await?;
    let st_rows1 = prep(
        "INSERT INTO paceline_layout.t_rows1 (job_id, bucket, instance, body) VALUES (?, 0, ?, ?) USING TIMESTAMP ?",
    )
    .await?;
    let st_map =
        prep("UPDATE paceline_layout.t_map USING TIMESTAMP ? SET bodies = bodies + ? WHERE job_id = ? AND bucket = 0")
            .await?;
    let st_blob =
        prep("INSERT INTO paceline_layout.t_blob (job_id, bucket, body) VALUES (?, 0, ?) USING TIMESTAMP ?").await?;
    let (st_rows, st_rows1, st_map, st_blob) = (&st_rows, &st_rows1, &st_map, &st_blob);
    let mut ts: i64 = 1 << 52;
    for layout in only.split(',') {
        let start = Instant::now();
        let mut n: u64 = 0;
        let mut round = 0i64;
        while start.elapsed() < Duration::from_secs(secs) {
            round += 1;
            let mut futs = Vec::new();
            for c in 0..conc {
                ts += 1;
                let job = format!("job-{round}-{c}");
                let t = ts;
                futs.push((job, t));
            }
            let results = futures::stream::iter(futs)
                .map(|(job, t)| async move {
                    match layout {
                        "rows" | "rows1" => {
                            let st = if layout == "rows" { st_rows } else { st_rows1 };
                            let mut b = Batch::new(BatchType::Unlogged);
                            b.set_consistency(consistency);
                            for _ in 0..per {
                                b.append_statement(st.clone());
                            }
                            let instances = (0..per).zip(bodies);
                            if layout == "rows" {
                                let v: Vec<_> = instances.map(|(i, body)| (&job, i, 3_i64, body, t)).collect();
                                s.batch(&b, v).await.map(|_| ())
                            } else {
                                let v: Vec<_> = instances.map(|(i, body)| (&job, i, body, t)).collect();
                                s.batch(&b, v).await.map(|_| ())
                            }
                        }
                        "map" => s.execute_unpaged(st_map, (t, bucket_map, job)).await.map(|_| ()),
                        _ => s.execute_unpaged(st_blob, (job, bucket_blob, t)).await.map(|_| ()),
                    }
                })
                .buffer_unordered(conc)
                .collect::<Vec<_>>()
                .await;
            for r in results {
                r?;
                n += per as u64;
            }
        }
        let el = start.elapsed().as_secs_f64();
        println!(
            "{layout}: {n} task changes in {el:.1} s = {:.0}/s ({per} per change, {conc} in flight)",
            n as f64 / el
        );
    }
    s.query_unpaged("DROP KEYSPACE paceline_layout", ()).await?;
    Ok(())
}
