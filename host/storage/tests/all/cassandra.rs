//! Cassandra: the conformance suite against a real node.
//!
//! The node comes from `PACELINE_CASSANDRA` (host:port) or, when unset,
//! from `deploy/cassandra/cassandra.sh start`. If neither gives a node the
//! tests fail: a skipped suite would hide a broken backend.

use std::sync::{Arc, OnceLock};

use paceline_storage::cassandra::{CassandraStore, SCHEMA_VERSION};
use paceline_storage::{CassandraConfig, Store, StoreError};

fn address() -> String {
    static ADDR: OnceLock<String> = OnceLock::new();
    ADDR.get_or_init(|| {
        if let Ok(a) = std::env::var("PACELINE_CASSANDRA")
            && !a.trim().is_empty()
        {
            return a.trim().to_string();
        }
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/cassandra/cassandra.sh");
        let out = std::process::Command::new("bash")
            .arg(&script)
            // The script's default directory (or CASSANDRA_DIR): the same
            // node CI starts, reused across runs.
            .arg("start")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "PACELINE_CASSANDRA is not set and {} start failed:\n{}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().trim().to_string()
    })
    .clone()
}

fn keyspace() -> &'static str {
    static KS: OnceLock<String> = OnceLock::new();
    KS.get_or_init(|| format!("paceline_test_{}_{}", std::process::id(), fastrand::u32(..)))
}

/// Serialises the first connect, which creates the keyspace and runs the
/// migrations; later connects find them done.
static FIRST: tokio::sync::Mutex<bool> = tokio::sync::Mutex::const_new(false);

async fn make() -> Arc<dyn Store> {
    let cfg = CassandraConfig::local(&address(), keyspace());
    let mut done = FIRST.lock().await;
    let store = CassandraStore::connect(&cfg).await.unwrap_or_else(|e| panic!("cassandra at {}: {e}", address()));
    *done = true;
    Arc::new(store)
}

crate::conformance_suite!(make);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_fencing() {
    // Two sessions on the test keyspace; only these handles ever claim.
    crate::conformance::leader_fencing(make().await, make().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newer_schema_is_refused() {
    let _first = FIRST.lock().await;
    let ks = format!("{}_newer", keyspace());
    let cfg = CassandraConfig::local(&address(), &ks);
    let store = CassandraStore::connect(&cfg).await.expect("connect");
    store
        .session()
        .query_unpaged(
            "INSERT INTO schema_migrations (id, description, applied_at_ms) VALUES (?, 'from the future', 0)",
            ((SCHEMA_VERSION + 1) as i32,),
        )
        .await
        .expect("insert");
    drop(store);
    match CassandraStore::connect(&cfg).await {
        Err(StoreError::SchemaTooNew { found, supported, .. }) => {
            assert_eq!((found, supported), (SCHEMA_VERSION + 1, SCHEMA_VERSION))
        }
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
    // Leave no future-schema keyspace behind.
    let current = CassandraStore::connect(&CassandraConfig::local(&address(), keyspace())).await.expect("connect");
    current.session().query_unpaged(format!("DROP KEYSPACE IF EXISTS {ks}"), &[]).await.expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_are_idempotent() {
    let cfg = CassandraConfig::local(&address(), keyspace());
    {
        let _first = FIRST.lock().await;
        CassandraStore::connect(&cfg).await.expect("first");
    }
    let again = CassandraStore::connect(&cfg).await.expect("second connect runs nothing twice");
    let rows = again.session().query_unpaged("SELECT id FROM schema_migrations", &[]).await.expect("rows");
    assert_eq!(rows.into_rows_result().expect("rows").rows_num(), SCHEMA_VERSION as usize);
}
