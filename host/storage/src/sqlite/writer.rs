//! The single writer thread with group commit.
//!
//! Every write is a closure sent to one thread that owns the only writing
//! connection. The thread takes whatever writes are queued (up to
//! [`MAX_GROUP`]), runs each in its own savepoint inside one transaction,
//! commits once — one fsync for the whole group — and only then answers
//! each caller. A write that fails rolls back to its savepoint, so it
//! leaves nothing behind while the others in the group still commit.

use std::path::Path;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::error::{Result, StoreError};

/// Most writes committed together.
const MAX_GROUP: usize = 256;

type Done = Box<dyn FnOnce(Option<String>) + Send>;
type Op = Box<dyn FnOnce(&Connection) -> (bool, Done) + Send>;

/// Handle to the writer thread; dropping the last one stops the thread.
#[derive(Debug)]
pub struct Writer {
    tx: mpsc::Sender<Op>,
}

impl Writer {
    /// Starts the thread on `conn` (already migrated, WAL, synchronous=FULL)
    /// and, beside it, the checkpointer on a connection of its own to `path`.
    ///
    /// Why a second thread: SQLite's automatic checkpoint runs inside the
    /// commit that crosses the threshold, on the writer's thread, and every
    /// write queued behind that commit waits for it (about 7% of the writer's
    /// time in `bench pipeline`). A PASSIVE checkpoint from another
    /// connection copies the same frames without blocking the writer.
    pub fn start(conn: Connection, path: &Path) -> Result<Writer> {
        conn.pragma_update(None, "wal_autocheckpoint", 0).map_err(|e| StoreError::Backend(e.to_string()))?;
        let checkpointer = Connection::open(path).map_err(|e| StoreError::Backend(format!("{}: {e}", path.display())))?;
        checkpointer.busy_timeout(Duration::from_secs(10)).map_err(|e| StoreError::Backend(e.to_string()))?;
        let (kick, kicked) = mpsc::sync_channel::<()>(1);
        thread::Builder::new()
            .name("paceline-sqlite-checkpoint".into())
            .spawn(move || checkpoint_loop(checkpointer, kicked))
            .map_err(|e| StoreError::Backend(format!("cannot start the sqlite checkpoint thread: {e}")))?;
        let (tx, rx) = mpsc::channel::<Op>();
        thread::Builder::new()
            .name("paceline-sqlite-writer".into())
            .spawn(move || run(conn, rx, kick))
            .map_err(|e| StoreError::Backend(format!("cannot start the sqlite writer thread: {e}")))?;
        Ok(Writer { tx })
    }

    /// Runs `f` in the next group; resolves once the group is durable.
    pub async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let op: Op = Box::new(move |conn| {
            let result = f(conn);
            let ok = result.is_ok();
            let done: Done = Box::new(move |commit_error| {
                let result = match commit_error {
                    Some(e) => Err(StoreError::Backend(format!("commit failed: {e}"))),
                    None => result,
                };
                // The caller may have gone away (cancelled); nothing to do then.
                let _ = reply.send(result);
            });
            (ok, done)
        });
        self.tx.send(op).map_err(|_| StoreError::Backend("the sqlite writer thread has stopped".into()))?;
        answer.await.map_err(|_| StoreError::Backend("the sqlite writer thread dropped a write".into()))?
    }
}

/// Commits between checkpoints. SQLite's own default is 1,000 WAL pages; a
/// group commit of `bench pipeline` writes tens of pages, so this is of the
/// same order.
const COMMITS_PER_CHECKPOINT: u32 = 32;

/// Checkpoints the WAL whenever the writer asks; ends with the writer.
fn checkpoint_loop(conn: Connection, kicked: mpsc::Receiver<()>) {
    while kicked.recv().is_ok() {
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(error = %e, "sqlite: checkpoint failed; the next one retries");
        }
    }
    // Last one: a store reopened later starts from a short WAL.
    let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    tracing::debug!("sqlite checkpoint thread stopped");
}

fn run(conn: Connection, rx: mpsc::Receiver<Op>, kick: mpsc::SyncSender<()>) {
    let mut commits = 0u32;
    while let Ok(first) = rx.recv() {
        let mut ops = vec![first];
        while ops.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(op) => ops.push(op),
                Err(_) => break,
            }
        }
        let n = ops.len();
        if let Err(e) = conn.prepare_cached("BEGIN IMMEDIATE").and_then(|mut s| s.execute([])) {
            let msg = e.to_string();
            tracing::error!(error = %msg, "sqlite: cannot begin a transaction");
            // Run nothing: dropping the ops drops their reply channels, and
            // every caller gets an error instead of a write outside a transaction.
            drop(ops);
            continue;
        }
        let mut dones = Vec::with_capacity(n);
        for op in ops {
            // Cached statements: parsing these per write showed in profiles.
            if let Err(e) = conn.prepare_cached("SAVEPOINT op").and_then(|mut s| s.execute([])) {
                tracing::error!(error = %e, "sqlite: savepoint failed");
            }
            let (ok, done) = op(&conn);
            let undo = if ok {
                conn.prepare_cached("RELEASE op").and_then(|mut s| s.execute([])).map(|_| ())
            } else {
                conn.execute_batch("ROLLBACK TO op; RELEASE op")
            };
            if let Err(e) = undo {
                tracing::error!(error = %e, "sqlite: savepoint release failed");
            }
            dones.push(done);
        }
        let commit_error = conn.prepare_cached("COMMIT").and_then(|mut s| s.execute([])).err().map(|e| e.to_string());
        if let Some(e) = &commit_error {
            tracing::error!(error = %e, writes = n, "sqlite: group commit failed");
            let _ = conn.execute_batch("ROLLBACK");
        }
        commits += 1;
        if commits >= COMMITS_PER_CHECKPOINT {
            commits = 0;
            // Full: a checkpoint is already due; this one adds nothing.
            let _ = kick.try_send(());
        }
        for done in dones {
            done(commit_error.clone());
        }
    }
    tracing::debug!("sqlite writer thread stopped");
}
