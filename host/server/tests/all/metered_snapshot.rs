//! The metered store (`paceline_storage::metered`) under the operator API's
//! snapshot: a paused snapshot holds a write back until its records are
//! read, through the wrapper every server puts around its store.

use futures::StreamExt;
use paceline_api::operator::OperatorApi;
use paceline_proto::v1 as pb;
use paceline_proto::v1::operator_service_server::OperatorService;
use paceline_storage::memory::MemoryStore;
use paceline_storage::snapshot;
use sha2::{Digest, Sha256};

use std::future::Future;
use std::sync::Arc;

use paceline_model::job::{JobConfig, JobRuntime};
use paceline_storage::metered::{MeteredStore, StoreMetrics};
use paceline_storage::{PluginVersion, Store};

fn job() -> JobConfig {
    let mut c =
        JobConfig { name: "j".into(), owner: "o".into(), pool: "/p".into(), instance_count: 1, ..Default::default() };
    c.default_task.command = "true".into();
    c.default_task.resources.cpu_millis = 100;
    c.default_task.resources.memory_mib = 64;
    c
}

/// Takes a snapshot through the API, reading its first chunk only
/// before `meanwhile` runs; returns the file's bytes.
async fn snapshot_with(store: Arc<dyn Store>, pause_writes: bool, meanwhile: impl Future<Output = ()>) -> Vec<u8> {
    let api = OperatorApi::new(store);
    let request = tonic::Request::new(pb::SnapshotRequest { pause_writes });
    let mut stream = api.snapshot(request).await.expect("snapshot").into_inner();
    let mut bytes = stream.next().await.expect("a first chunk").expect("chunk").data;
    meanwhile.await;
    while let Some(chunk) = stream.next().await {
        bytes.extend(chunk.expect("chunk").data);
    }
    bytes
}

/// A snapshot with `pause_writes` holds a write back until its records
/// are read, so the file is of one moment even where the backend has
/// no read view (the memory store has none, like Cassandra); without
/// it, the same write goes through at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_snapshot_holds_writes_back_until_its_records_are_read() {
    let store: Arc<dyn Store> = Arc::new(MeteredStore::new(Arc::new(MemoryStore::new()), StoreMetrics::default()));
    // A plugin of 6 MiB: its record is more chunks than the stream
    // buffers, so the export waits on this reader in the middle of its walk.
    let bytes = vec![7u8; 6 << 20];
    let version = PluginVersion {
        slot: "placement".into(),
        name: "big".into(),
        version: "1.0.0".into(),
        sha256: hex::encode(Sha256::digest(&bytes)),
        world: "placement".into(),
        deployed_at_ms: 1,
        state: "inactive".into(),
        size: bytes.len() as u64,
    };
    store.put_plugin_version(&version, &bytes).await.expect("plugin");
    store.create_job("before", &job(), &JobRuntime::initial(1, 0)).await.expect("job");

    let writer = store.clone();
    let file = snapshot_with(store.clone(), true, async move {
        let write = tokio::spawn(async move { writer.create_job("during", &job(), &JobRuntime::initial(1, 0)).await });
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(!write.is_finished(), "a write waits while a paused snapshot reads");
        // Released once the walk ends: awaited after the stream is read.
        tokio::spawn(async move { write.await.expect("join").expect("the write goes through after") });
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("paused.snap");
    std::fs::write(&path, &file).expect("write");
    let (header, trailer) = snapshot::verify(&path).expect("a whole file");
    assert!(header.point_in_time, "paused: one moment");
    assert_eq!(trailer.counts.get("job"), Some(&1), "{:?}", trailer.counts);
    let restored = MemoryStore::new();
    snapshot::restore(&path, &restored).await.expect("restore");
    assert!(restored.get_job_runtime("before").await.is_ok());
    assert!(restored.get_job_runtime("during").await.expect_err("after the moment").is_not_found());
    eventually_exists(&store, "during").await;

    // Not paused: the same write goes through while the snapshot reads.
    let writer = store.clone();
    let file = snapshot_with(store.clone(), false, async move {
        writer.create_job("unpaused", &job(), &JobRuntime::initial(1, 0)).await.expect("not held back");
    })
    .await;
    let path = dir.path().join("unpaused.snap");
    std::fs::write(&path, &file).expect("write");
    assert!(!snapshot::verify(&path).expect("a whole file").0.point_in_time, "read record by record");
}

async fn eventually_exists(store: &Arc<dyn Store>, id: &str) {
    for _ in 0..100 {
        if store.get_job_runtime(id).await.is_ok() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("{id} was never written");
}
