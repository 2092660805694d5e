//! The single writer thread with group commit.
//!
//! Every write is a closure sent to one thread that owns the only writing
//! connection. The thread takes whatever writes are queued (up to
//! [`MAX_GROUP`]), runs each in its own savepoint inside one transaction,
//! commits once — one fsync for the whole group — and only then answers
//! each caller. A write that fails rolls back to its savepoint, so it
//! leaves nothing behind while the others in the group still commit.

use std::sync::{Arc, mpsc};
use std::thread;

use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::error::{Result, StoreError};
use crate::fence::Fence;

/// Most writes committed together.
const MAX_GROUP: usize = 256;

/// Why a whole group was not committed.
#[derive(Clone, Debug)]
enum GroupFailure {
    /// The commit itself failed.
    Commit(String),
    /// A later leader's epoch is in the store: nothing of the group ran.
    Fenced { mine: u64, current: u64 },
    /// The leader epoch could not be read: nothing ran (refusing is safer).
    Unchecked(String),
}

impl GroupFailure {
    fn into_error(self) -> StoreError {
        match self {
            GroupFailure::Commit(e) => StoreError::Backend(format!("commit failed: {e}")),
            GroupFailure::Fenced { mine, current } => StoreError::Fenced { mine, current },
            GroupFailure::Unchecked(e) => StoreError::Backend(format!("reading the leader epoch: {e}")),
        }
    }
}

type Done = Box<dyn FnOnce(Option<GroupFailure>) + Send>;
/// A queued write: called with the connection to run it (answering whether
/// it succeeded and how to answer its caller once the group is committed),
/// or with the reason its group runs nothing (then it answers at once).
type Op = Box<dyn FnOnce(std::result::Result<&Connection, GroupFailure>) -> Option<(bool, Done)> + Send>;

/// Handle to the writer thread; dropping the last one stops the thread.
#[derive(Debug)]
pub struct Writer {
    tx: mpsc::Sender<Op>,
}

impl Writer {
    /// Starts the thread on `conn` (already migrated, WAL, synchronous=FULL).
    ///
    /// SQLite's automatic checkpoint stays on this thread, inside the commit
    /// that crosses its threshold. A PASSIVE checkpoint from a thread of its
    /// own was tried: under a steady stream of commits it never finds the
    /// WAL fully copied at the moment the next write begins, so the WAL is
    /// never restarted and grows without bound (25 MB after 3,000 commits in
    /// the test `the_wal_stays_short_while_writes_go_on`).
    ///
    /// Leader fencing: once `fence` holds a claimed epoch, every group first
    /// reads the recorded epoch inside its own `BEGIN IMMEDIATE` transaction
    /// (which holds SQLite's write lock, so no other process can claim in
    /// between) and runs nothing if a larger one is there.
    pub fn start(conn: Connection, fence: Arc<Fence>) -> Result<Writer> {
        let (tx, rx) = mpsc::channel::<Op>();
        thread::Builder::new()
            .name("paceline-sqlite-writer".into())
            .spawn(move || run(conn, rx, &fence))
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
            let conn = match conn {
                Ok(conn) => conn,
                Err(failure) => {
                    let _ = reply.send(Err(failure.into_error()));
                    return None;
                }
            };
            let result = f(conn);
            let ok = result.is_ok();
            let done: Done = Box::new(move |failure| {
                let result = match failure {
                    Some(failure) => Err(failure.into_error()),
                    None => result,
                };
                // The caller may have gone away (cancelled); nothing to do then.
                let _ = reply.send(result);
            });
            Some((ok, done))
        });
        self.tx.send(op).map_err(|_| StoreError::Backend("the sqlite writer thread has stopped".into()))?;
        answer.await.map_err(|_| StoreError::Backend("the sqlite writer thread dropped a write".into()))?
    }
}

/// The recorded leader epoch (0 when none was ever claimed).
pub fn recorded_epoch(conn: &Connection) -> rusqlite::Result<u64> {
    use rusqlite::OptionalExtension;
    Ok(conn
        .prepare_cached("SELECT epoch FROM leader_fence WHERE id = 1")?
        .query_row([], |r| r.get::<_, u64>(0))
        .optional()?
        .unwrap_or(0))
}

/// `Some(failure)` when the group must not run: this handle is fenced.
fn fenced(conn: &Connection, fence: &Fence) -> Option<GroupFailure> {
    fence.claimed()?;
    match recorded_epoch(conn) {
        Ok(recorded) => match fence.check(recorded) {
            Ok(()) => None,
            Err(StoreError::Fenced { mine, current }) => Some(GroupFailure::Fenced { mine, current }),
            Err(e) => Some(GroupFailure::Unchecked(e.to_string())),
        },
        // Cannot tell: refuse rather than risk a stale leader's write.
        Err(e) => Some(GroupFailure::Unchecked(e.to_string())),
    }
}

fn run(conn: Connection, rx: mpsc::Receiver<Op>, fence: &Fence) {
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
        if let Some(failure) = fenced(&conn, fence) {
            let _ = conn.execute_batch("ROLLBACK");
            for op in ops {
                op(Err(failure.clone()));
            }
            continue;
        }
        let mut dones = Vec::with_capacity(n);
        for op in ops {
            // Cached statements: parsing these per write showed in profiles.
            if let Err(e) = conn.prepare_cached("SAVEPOINT op").and_then(|mut s| s.execute([])) {
                tracing::error!(error = %e, "sqlite: savepoint failed");
            }
            let Some((ok, done)) = op(Ok(&conn)) else { continue };
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
        for done in dones {
            done(commit_error.clone().map(GroupFailure::Commit));
        }
    }
    tracing::debug!("sqlite writer thread stopped");
}
