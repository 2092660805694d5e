//! What `bench server` says of its store: the records each phase wrote, per
//! task and per second, counted by the server's metered store (the figures
//! `/metrics` serves as `store_records_written`), and the store's own limit
//! measured in the same run on the same disk, so the pipeline's share of it
//! is a ratio of two figures of one sitting (issue 47).

use std::time::Duration;

/// Records written so far, per store operation.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tally(Vec<(&'static str, u64)>);

impl Tally {
    /// What the server's store has written since it started.
    pub(crate) fn now(server: &paceline_server::Server) -> Tally {
        Tally(server.store_metrics.records_written(server.cluster.store.backend()))
    }

    /// What was written between `earlier` and `self`.
    pub(crate) fn since(&self, earlier: &Tally) -> Tally {
        let before = |op: &str| earlier.0.iter().find(|(o, _)| *o == op).map_or(0, |(_, n)| *n);
        Tally(self.0.iter().map(|&(op, n)| (op, n.saturating_sub(before(op)))).filter(|&(_, n)| n > 0).collect())
    }

    /// Every record, of every kind.
    pub(crate) fn total(&self) -> u64 {
        self.0.iter().map(|(_, n)| n).sum()
    }

    /// `N records (X a task: op x, …), R/s` over `tasks` tasks and `took`;
    /// the operations by how many they wrote, most first.
    pub(crate) fn describe(&self, tasks: u64, took: Duration) -> String {
        let per_task = |n: u64| n as f64 / tasks.max(1) as f64;
        let mut ops = self.0.clone();
        ops.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let parts: Vec<String> = ops.iter().map(|&(op, n)| format!("{op} {:.2}", per_task(n))).collect();
        format!(
            "{} records ({:.2} a task: {}), {:.0} records/s",
            self.total(),
            per_task(self.total()),
            parts.join(", "),
            rate(self.total(), took)
        )
    }
}

/// Records per second.
pub(crate) fn rate(records: u64, took: Duration) -> f64 {
    records as f64 / took.as_secs_f64().max(1e-9)
}

/// The store's own limit, as `paceline bench storage` measures it (task
/// runtime compare-and-sets in batches of 1,000 on a job of 10,000
/// instances, SQLite opened as the server opens it), in a file of its own
/// in `dir`, which is removed afterwards. Updates per second.
pub(crate) async fn sqlite_limit(dir: &std::path::Path) -> anyhow::Result<f64> {
    let dir = dir.join("store-limit");
    let opts = paceline_storage::bench::BenchOptions {
        sqlite_path: Some(dir.join("bench.db")),
        ..paceline_storage::bench::BenchOptions::default()
    };
    let report = paceline_storage::bench::run(&opts).await;
    let _ = std::fs::remove_dir_all(&dir);
    let report = report?;
    report
        .backends
        .iter()
        .find(|b| b.backend == "sqlite")
        .map(|b| b.cas_updates_per_sec)
        .ok_or_else(|| anyhow::anyhow!("the storage bench measured no SQLite figure"))
}

/// The compare-and-sets per second of the Cassandra store the server was
/// given, measured on a keyspace of its own beside the server's (the same
/// contact points, replication, consistency, login and TLS), which is
/// dropped after. Returns the rate and that keyspace's name.
pub(crate) async fn cassandra_limit(server: &paceline_storage::CassandraConfig) -> anyhow::Result<(f64, String)> {
    let mut cfg = server.clone();
    // Cassandra allows 48 characters in a keyspace name.
    let mut keyspace: String = server.keyspace.chars().take(41).collect();
    keyspace.push_str("_limit");
    cfg.keyspace = keyspace.clone();
    let rate = paceline_storage::bench::cassandra_limit(&cfg, &paceline_storage::bench::BenchOptions::default()).await;
    let dropped = drop_keyspace(&cfg).await;
    let rate = rate?;
    dropped.map_err(|e| anyhow::anyhow!("keyspace {keyspace} not dropped: {e:#}"))?;
    Ok((rate, keyspace))
}

/// Drops `c.keyspace`.
pub(crate) async fn drop_keyspace(c: &paceline_storage::CassandraConfig) -> anyhow::Result<()> {
    let store = paceline_storage::cassandra::CassandraStore::connect(c).await?;
    store.session().query_unpaged(format!("DROP KEYSPACE IF EXISTS {}", c.keyspace), &[]).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_since_another_keeps_only_what_was_written_between() {
        let before = Tally(vec![("append_job_events", 10), ("cas_tasks", 100)]);
        let after = Tally(vec![("append_job_events", 10), ("cas_tasks", 300), ("create_job_with_tasks", 102)]);
        let between = after.since(&before);
        assert_eq!(between.0, vec![("cas_tasks", 200), ("create_job_with_tasks", 102)]);
        assert_eq!(between.total(), 302);
        assert_eq!(
            between.describe(100, Duration::from_secs(2)),
            "302 records (3.02 a task: cas_tasks 2.00, create_job_with_tasks 1.02), 151 records/s"
        );
    }
}
