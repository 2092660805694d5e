//! Cassandra: the conformance suite against a real node.
//!
//! The node comes from `PACELINE_CASSANDRA` (host:port), with the login and
//! CA of `PACELINE_CASSANDRA_USER`, `PACELINE_CASSANDRA_PASSWORD_FILE` and
//! `PACELINE_CASSANDRA_CA_FILE`, `PACELINE_CASSANDRA_CERT_FILE` and
//! `PACELINE_CASSANDRA_KEY_FILE` (what `deploy/cassandra/cassandra.sh env`
//! prints), or, when unset, from `deploy/cassandra/cassandra.sh start` and its
//! `env`. If neither gives a node the tests fail: a skipped suite would hide a
//! broken backend. The node must require a login (the script's node does):
//! the `login_*` tests check that it refuses a wrong one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use paceline_storage::cassandra::{CassandraStore, SCHEMA_VERSION};
use paceline_storage::{CassandraConfig, CassandraTls, Store, StoreError};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/cassandra/cassandra.sh")
}

/// The node and how to reach it, as `cassandra.sh env` exports it.
fn node() -> &'static HashMap<String, String> {
    static NODE: OnceLock<HashMap<String, String>> = OnceLock::new();
    NODE.get_or_init(|| {
        let keys = [
            "PACELINE_CASSANDRA",
            "PACELINE_CASSANDRA_USER",
            "PACELINE_CASSANDRA_PASSWORD_FILE",
            "PACELINE_CASSANDRA_CA_FILE",
            "PACELINE_CASSANDRA_CERT_FILE",
            "PACELINE_CASSANDRA_KEY_FILE",
        ];
        if std::env::var("PACELINE_CASSANDRA").is_ok_and(|a| !a.trim().is_empty()) {
            return keys
                .iter()
                .filter_map(|k| {
                    std::env::var(k)
                        .ok()
                        .filter(|v| !v.trim().is_empty())
                        .map(|v| (k.to_string(), v.trim().to_string()))
                })
                .collect();
        }
        start_node();
        let out = std::process::Command::new("bash").arg(script()).arg("env").output().expect("cassandra.sh env");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.strip_prefix("export ")?.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches(['\'', '"']).to_string()))
            .collect()
    })
}

fn address() -> String {
    node().get("PACELINE_CASSANDRA").cloned().expect("PACELINE_CASSANDRA from the environment or cassandra.sh env")
}

/// Settings for `keyspace` on the test node, with its login and TLS.
fn config(keyspace: &str) -> CassandraConfig {
    let mut cfg = CassandraConfig::local(&address(), keyspace);
    if let Some(user) = node().get("PACELINE_CASSANDRA_USER") {
        cfg.username = Some(user.clone());
        cfg.password_file = node().get("PACELINE_CASSANDRA_PASSWORD_FILE").map(PathBuf::from);
    }
    if let Some(ca) = node().get("PACELINE_CASSANDRA_CA_FILE") {
        cfg.tls = Some(CassandraTls {
            ca_file: ca.into(),
            cert_file: node().get("PACELINE_CASSANDRA_CERT_FILE").map(PathBuf::from),
            key_file: node().get("PACELINE_CASSANDRA_KEY_FILE").map(PathBuf::from),
            verify_address: true,
        });
    }
    cfg
}

/// Starts (or finds) the script's node: its default directory (or
/// CASSANDRA_DIR), the same node CI starts, reused across runs.
fn start_node() {
    let script = script();
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg("start")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "PACELINE_CASSANDRA is not set and {} start failed:\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn keyspace() -> &'static str {
    static KS: OnceLock<String> = OnceLock::new();
    KS.get_or_init(|| format!("paceline_test_{}_{}", std::process::id(), fastrand::u32(..)))
}

/// Serialises the first connect, which creates the keyspace and runs the
/// migrations; later connects find them done.
static FIRST: tokio::sync::Mutex<bool> = tokio::sync::Mutex::const_new(false);

async fn make() -> Arc<dyn Store> {
    let cfg = config(keyspace());
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
    let cfg = config(&ks);
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
    let current = CassandraStore::connect(&config(keyspace())).await.expect("connect");
    current.session().query_unpaged(format!("DROP KEYSPACE IF EXISTS {ks}"), &[]).await.expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_are_idempotent() {
    let cfg = config(keyspace());
    {
        let _first = FIRST.lock().await;
        CassandraStore::connect(&cfg).await.expect("first");
    }
    let again = CassandraStore::connect(&cfg).await.expect("second connect runs nothing twice");
    let rows = again.session().query_unpaged("SELECT id FROM schema_migrations", &[]).await.expect("rows");
    assert_eq!(rows.into_rows_result().expect("rows").rows_num(), SCHEMA_VERSION as usize);
}

/// The test node's login, or a failure saying the node has none.
fn node_user() -> String {
    node().get("PACELINE_CASSANDRA_USER").cloned().unwrap_or_else(|| {
        panic!("the test node must require a login: PACELINE_CASSANDRA_USER is unset (start it with cassandra.sh)")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_with_a_wrong_password_is_refused_clearly() {
    let user = node_user();
    let dir = tempfile::tempdir().expect("tempdir");
    let wrong = dir.path().join("wrong-password");
    std::fs::write(&wrong, "definitely-not-it-4711\n").expect("write");
    let mut cfg = config(keyspace());
    cfg.password_file = Some(wrong.clone());
    let err = CassandraStore::connect(&cfg).await.map(|_| ()).expect_err("a wrong password must be refused");
    let msg = err.to_string();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    assert!(msg.contains(&format!("refused the login of role {user:?}")), "{msg}");
    assert!(msg.contains(&wrong.display().to_string()), "names where the password came from: {msg}");
    assert!(!msg.contains("definitely-not-it"), "the password is not in the message: {msg}");

    // No login at all, against a node that requires one.
    let mut anonymous = config(keyspace());
    anonymous.username = None;
    anonymous.password_file = None;
    let msg = CassandraStore::connect(&anonymous).await.map(|_| ()).expect_err("no login").to_string();
    assert!(msg.contains("requires a login"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_an_untrusted_ca_or_without_a_client_certificate_is_refused() {
    let Some(ca) = node().get("PACELINE_CASSANDRA_CA_FILE") else {
        panic!("the test node must offer TLS: PACELINE_CASSANDRA_CA_FILE is unset (start it with cassandra.sh)")
    };
    // The node's own certificate works (the conformance suite runs over it); a bundle of
    // public CAs that did not sign it must not.
    assert!(Path::new(ca).exists(), "{ca}");
    let mut cfg = config(keyspace());
    let public_cas = PathBuf::from("/etc/ssl/certs/ca-certificates.crt");
    assert!(public_cas.exists(), "needs Debian's ca-certificates for an unrelated CA bundle");
    let own = cfg.tls.clone().expect("tls");
    cfg.tls = Some(CassandraTls { ca_file: public_cas, ..own.clone() });
    let msg = CassandraStore::connect(&cfg).await.map(|_| ()).expect_err("untrusted certificate").to_string();
    assert!(msg.contains("TLS failed"), "{msg}");
    // The node requires a client certificate on TLS connections: none is refused.
    assert!(own.cert_file.is_some(), "the test node's client certificate (PACELINE_CASSANDRA_CERT_FILE) is unset");
    cfg.tls = Some(CassandraTls { cert_file: None, key_file: None, ..own });
    let msg = CassandraStore::connect(&cfg).await.map(|_| ()).expect_err("no client certificate").to_string();
    // The driver reports either the node's alert (then with our hint) or just a broken
    // connection, depending on which side of the handshake it sees fail first.
    assert!(!msg.contains("certificate required") || msg.contains("requires a client certificate"), "{msg}");
    // Connected over TLS, the server reports the connection encrypted.
    let _first = FIRST.lock().await;
    let store = CassandraStore::connect(&config(keyspace())).await.expect("connect over TLS");
    let rows = store
        .session()
        .query_unpaged("SELECT ssl_enabled, username FROM system_views.clients", &[])
        .await
        .expect("clients")
        .into_rows_result()
        .expect("rows");
    let clients: Vec<(Option<bool>, Option<String>)> =
        rows.rows::<(Option<bool>, Option<String>)>().expect("typed").map(|r| r.expect("row")).collect();
    let user = node_user();
    assert!(clients.iter().any(|(ssl, u)| *ssl == Some(true) && u.as_deref() == Some(user.as_str())), "{clients:?}");
}

// ---- snapshots (decision 0030) ---------------------------------------------

/// A store on a keyspace of its own (a snapshot's source or target must
/// hold nothing else), dropped again by [`drop_keyspace`].
pub(crate) async fn fresh(name: &str) -> (Arc<dyn Store>, String) {
    let ks = format!("{}_{name}", keyspace());
    let store = CassandraStore::connect(&config(&ks)).await.unwrap_or_else(|e| panic!("cassandra {ks}: {e}"));
    (Arc::new(store), ks)
}

pub(crate) async fn drop_keyspace(ks: &str) {
    let any = CassandraStore::connect(&config(keyspace())).await.expect("connect");
    any.session().query_unpaged(format!("DROP KEYSPACE IF EXISTS {ks}"), &[]).await.expect("drop");
}

fn sqlite() -> Arc<dyn Store> {
    let dir = tempfile::tempdir().expect("tempdir").keep();
    Arc::new(paceline_storage::sqlite::SqliteStore::open(dir.join("paceline.db")).expect("open"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_round_trip_cassandra_to_cassandra() {
    let (src, a) = fresh("snap_src").await;
    let (dst, b) = fresh("snap_dst").await;
    crate::snapshot::round_trip(src, dst).await;
    drop_keyspace(&a).await;
    drop_keyspace(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_round_trip_sqlite_to_cassandra() {
    let (dst, b) = fresh("snap_from_sqlite").await;
    crate::snapshot::round_trip(sqlite(), dst).await;
    drop_keyspace(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_round_trip_cassandra_to_sqlite() {
    let (src, a) = fresh("snap_to_sqlite").await;
    crate::snapshot::round_trip(src, sqlite()).await;
    drop_keyspace(&a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_bad_files_are_refused() {
    let (dst, b) = fresh("snap_bad").await;
    crate::snapshot::bad_files_are_refused(sqlite(), dst).await;
    drop_keyspace(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_sqlite_to_cassandra_to_sqlite() {
    let (middle, ks) = fresh("migrate_mid").await;
    crate::snapshot::migrate_there_and_back(sqlite(), middle, sqlite()).await;
    drop_keyspace(&ks).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_into_cassandra_resumes() {
    let (dst, a) = fresh("migrate_resume").await;
    let (other, b) = fresh("migrate_other").await;
    crate::snapshot::migrate_resumes_and_refuses_strangers(sqlite(), dst, other).await;
    drop_keyspace(&a).await;
    drop_keyspace(&b).await;
}
