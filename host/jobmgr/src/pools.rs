//! Pool changes made durable: the one place a pool is created, changed or
//! deleted while the cluster runs (issue 42: this lived in the gRPC
//! handlers, and the web UI held a second copy with a lock of its own).
//!
//! A change is applied to the resource manager first, which checks it
//! against the tree (a cycle, a reservation over the parent's, a pool that
//! holds jobs), and then written to the store as the spec's JSON under the
//! pool's path. If the write fails the change is undone in memory, so memory
//! never holds a pool the store would lose, and the caller hears the store's
//! error. Changes are serialised by one lock, so each store write follows
//! the memory change it records, whatever surface (gRPC, web UI) asked.
//! [`restore_pools`] reads the pools back at start and [`apply_pools`] puts
//! them into a resource manager.
//!
//! The job manager owns jobs the same way ([`crate::JobManager`]); the two
//! share the resource manager's lock, which is only held for the in-memory
//! step here, never across a store write.

use std::sync::{Arc, Mutex, MutexGuard};

use paceline_model::Resources;
use paceline_model::pool::PoolSpec;
use paceline_resmgr::{PoolError, ResourceManager};
use paceline_storage::{Store, StoreError};

/// Why a pool change was not made.
#[derive(Debug, thiserror::Error)]
pub enum PoolChangeError {
    /// The resource manager refused it (the tree's rules); nothing changed.
    #[error(transparent)]
    Refused(#[from] PoolError),
    /// No pool at that path.
    #[error("no pool {0}")]
    NotFound(String),
    /// The spec could not be encoded for the store; nothing changed.
    #[error("encoding the spec of pool {path}: {message}")]
    Encode {
        /// The pool.
        path: String,
        /// Why.
        message: String,
    },
    /// The store refused or failed the write; the memory change was undone.
    #[error("storing pool {path}: {source}")]
    Store {
        /// The pool.
        path: String,
        /// The store's error.
        source: StoreError,
    },
}

/// Why stored pools could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The store failed.
    #[error("reading pools: {0}")]
    Store(#[from] StoreError),
    /// A stored spec is not a pool spec.
    #[error("pool {path}: stored spec does not decode: {source}")]
    Decode {
        /// The pool.
        path: String,
        /// Why.
        source: serde_json::Error,
    },
}

/// Pool changes over the cluster's resource manager and store. One per
/// cluster: every surface that changes pools goes through it.
pub struct PoolManager {
    resmgr: Arc<Mutex<ResourceManager>>,
    store: Arc<dyn Store>,
    /// Serialises changes so each store write matches the memory it follows.
    changes: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for PoolManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolManager").field("store", &self.store.backend()).finish_non_exhaustive()
    }
}

impl PoolManager {
    /// Over the cluster's resource manager and store.
    pub fn new(resmgr: Arc<Mutex<ResourceManager>>, store: Arc<dyn Store>) -> PoolManager {
        PoolManager { resmgr, store, changes: tokio::sync::Mutex::new(()) }
    }

    fn rm(&self) -> MutexGuard<'_, ResourceManager> {
        // Plain data behind the lock: a panic elsewhere leaves it usable.
        self.resmgr.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates pool `path`. Returns the cluster's capacity at that moment
    /// (what the caller warns a reservation against).
    pub async fn create(&self, path: &str, spec: PoolSpec) -> Result<Resources, PoolChangeError> {
        let bytes = encode(path, &spec)?;
        let _serial = self.changes.lock().await;
        let capacity = {
            let mut rm = self.rm();
            rm.create_pool(path, spec)?;
            rm.capacity()
        };
        if let Err(source) = self.store.put_pool(path, &bytes).await {
            if let Err(undo) = self.rm().delete_pool(path) {
                tracing::error!(pool = %path, error = %undo, "could not undo a pool that was not stored");
            }
            return Err(PoolChangeError::Store { path: path.to_string(), source });
        }
        tracing::info!(pool = %path, "pool created");
        Ok(capacity)
    }

    /// Replaces pool `path`'s spec. Returns the cluster's capacity at that
    /// moment.
    pub async fn update(&self, path: &str, spec: PoolSpec) -> Result<Resources, PoolChangeError> {
        let bytes = encode(path, &spec)?;
        let _serial = self.changes.lock().await;
        let (before, capacity) = {
            let mut rm = self.rm();
            let before = rm.pool_status(path).ok_or_else(|| PoolChangeError::NotFound(path.to_string()))?.spec;
            rm.update_pool(path, spec)?;
            (before, rm.capacity())
        };
        if let Err(source) = self.store.put_pool(path, &bytes).await {
            if let Err(undo) = self.rm().update_pool(path, before) {
                tracing::error!(pool = %path, error = %undo, "could not undo a pool change that was not stored");
            }
            return Err(PoolChangeError::Store { path: path.to_string(), source });
        }
        tracing::info!(pool = %path, "pool updated");
        Ok(capacity)
    }

    /// Deletes pool `path` (the resource manager refuses one with children
    /// or jobs).
    pub async fn delete(&self, path: &str) -> Result<(), PoolChangeError> {
        let _serial = self.changes.lock().await;
        let before = {
            let mut rm = self.rm();
            let before = rm.pool_status(path).ok_or_else(|| PoolChangeError::NotFound(path.to_string()))?.spec;
            rm.delete_pool(path)?;
            before
        };
        if let Err(source) = self.store.delete_pool(path).await {
            if let Err(undo) = self.rm().create_pool(path, before) {
                tracing::error!(pool = %path, error = %undo, "could not undo a pool deletion that was not stored");
            }
            return Err(PoolChangeError::Store { path: path.to_string(), source });
        }
        tracing::info!(pool = %path, "pool deleted");
        Ok(())
    }
}

fn encode(path: &str, spec: &PoolSpec) -> Result<Vec<u8>, PoolChangeError> {
    serde_json::to_vec(spec).map_err(|e| PoolChangeError::Encode { path: path.to_string(), message: e.to_string() })
}

/// Every stored pool with its spec, parents before children, ready for
/// [`apply_pools`] (or `ResourceManager::create_pool`) before the job
/// manager recovers.
pub async fn restore_pools(store: &dyn Store) -> Result<Vec<(String, PoolSpec)>, RestoreError> {
    let mut pools = store
        .list_pools()
        .await?
        .into_iter()
        .map(|(path, bytes)| match serde_json::from_slice::<PoolSpec>(&bytes) {
            Ok(spec) => Ok((path, spec)),
            Err(source) => Err(RestoreError::Decode { path, source }),
        })
        .collect::<Result<Vec<_>, _>>()?;
    // Depth first, then path: every parent precedes its children.
    pools.sort_by(|(a, _), (b, _)| a.matches('/').count().cmp(&b.matches('/').count()).then_with(|| a.cmp(b)));
    Ok(pools)
}

/// Creates (or, when it exists, updates) each pool in order.
pub fn apply_pools(rm: &mut ResourceManager, pools: &[(String, PoolSpec)]) -> Result<(), PoolError> {
    for (path, spec) in pools {
        if rm.tree().id(path).is_some() {
            rm.update_pool(path, spec.clone())?;
        } else {
            rm.create_pool(path, spec.clone())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use paceline_model::pool::PerKind;
    use paceline_storage::sqlite::SqliteStore;

    fn rm() -> Arc<Mutex<ResourceManager>> {
        let mut rm = ResourceManager::new(paceline_resmgr::Config::default());
        rm.set_capacity(Resources::new(8_000, 16_384, 100_000, 0));
        Arc::new(Mutex::new(rm))
    }

    fn reserving(cpu: u64) -> PoolSpec {
        PoolSpec { reservation: PerKind { cpu, ..PerKind::default() }, ..PoolSpec::default() }
    }

    fn has(rm: &Arc<Mutex<ResourceManager>>, path: &str) -> Option<PoolSpec> {
        rm.lock().expect("rm").pool_status(path).map(|s| s.spec)
    }

    #[tokio::test]
    async fn changes_reach_memory_and_the_store_and_read_back_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("s.db")).expect("store"));
        let rm = rm();
        let pools = PoolManager::new(rm.clone(), store.clone());
        pools.create("/org", reserving(4_000)).await.expect("create /org");
        pools.create("/org/team", reserving(1_000)).await.expect("create /org/team");
        pools.update("/org/team", reserving(2_000)).await.expect("update");
        assert_eq!(has(&rm, "/org/team"), Some(reserving(2_000)));
        let stored = restore_pools(&*store).await.expect("restore");
        let paths: Vec<&str> = stored.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["/org", "/org/team"], "parents first");
        assert_eq!(stored[1].1, reserving(2_000));
        // A change the tree refuses touches neither.
        let refused = pools.create("/org/team/x", reserving(3_000)).await;
        assert!(matches!(refused, Err(PoolChangeError::Refused(_))), "{refused:?}");
        assert_eq!(restore_pools(&*store).await.expect("restore").len(), 2);
        assert!(matches!(pools.delete("/nope").await, Err(PoolChangeError::NotFound(_))));
        pools.delete("/org/team").await.expect("delete");
        assert_eq!(has(&rm, "/org/team"), None);
        assert_eq!(restore_pools(&*store).await.expect("restore").len(), 1);
    }

    /// A store that refuses the write (here: fenced by a newer leader on the
    /// same file) leaves memory as it was, for each kind of change.
    #[tokio::test]
    async fn a_write_the_store_refuses_is_undone_in_memory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.db");
        let ours = Arc::new(SqliteStore::open(&path).expect("store"));
        ours.claim_leadership(1).await.expect("claim");
        let rm = rm();
        let pools = PoolManager::new(rm.clone(), ours.clone());
        pools.create("/kept", reserving(1_000)).await.expect("create while leading");
        SqliteStore::open(&path).expect("newer").claim_leadership(2).await.expect("a newer leader");

        let created = pools.create("/lost", reserving(1_000)).await;
        assert!(matches!(created, Err(PoolChangeError::Store { .. })), "{created:?}");
        assert_eq!(has(&rm, "/lost"), None, "a create not stored is undone");
        let updated = pools.update("/kept", reserving(3_000)).await;
        assert!(matches!(updated, Err(PoolChangeError::Store { .. })), "{updated:?}");
        assert_eq!(has(&rm, "/kept"), Some(reserving(1_000)), "an update not stored is undone");
        let deleted = pools.delete("/kept").await;
        assert!(matches!(deleted, Err(PoolChangeError::Store { .. })), "{deleted:?}");
        assert_eq!(has(&rm, "/kept"), Some(reserving(1_000)), "a deletion not stored is undone");
    }
}
