//! The single writer thread with group commit.
//!
//! Every write is a closure sent to one thread that owns the only writing
//! connection. The thread takes whatever writes are queued (up to
//! [`MAX_GROUP`]), runs each in its own savepoint inside one transaction,
//! commits once — one fsync for the whole group — and only then answers
//! each caller. A write that fails rolls back to its savepoint, so it
//! leaves nothing behind while the others in the group still commit.

use std::sync::mpsc;
use std::thread;

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
    /// Starts the thread on `conn` (already migrated, WAL, synchronous=FULL).
    ///
    /// SQLite's automatic checkpoint stays on this thread, inside the commit
    /// that crosses its threshold. A PASSIVE checkpoint from a thread of its
    /// own was tried: under a steady stream of commits it never finds the
    /// WAL fully copied at the moment the next write begins, so the WAL is
    /// never restarted and grows without bound (25 MB after 3,000 commits in
    /// the test `the_wal_stays_short_while_writes_go_on`).
    pub fn start(conn: Connection) -> Result<Writer> {
        let (tx, rx) = mpsc::channel::<Op>();
        thread::Builder::new()
            .name("paceline-sqlite-writer".into())
            .spawn(move || run(conn, rx))
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

fn run(conn: Connection, rx: mpsc::Receiver<Op>) {
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
        for done in dones {
            done(commit_error.clone());
        }
    }
    tracing::debug!("sqlite writer thread stopped");
}
