//! The durable status outbox.
//!
//! Every status update is appended to its run's log file and fsynced before
//! anyone may send it; an `Ack` is appended to the same log (also fsynced)
//! before the update is dropped from memory. A restarted agent replays the
//! logs, so unacknowledged updates are resent in order and acknowledged
//! ones never are. One file per run keeps appends of different runs from
//! serialising on one lock and makes forgetting a run a file deletion.
//!
//! Record format: `kind: u8`, `len: u32 LE`, `len` bytes. Kind 1 is a
//! prost-encoded `StatusUpdate`, kind 2 an acknowledged `seq` (`u64 LE`).
//! A torn record at the tail (the agent died mid-write) was never fsynced,
//! hence never sent: it is cut off on open.

use std::collections::{HashMap, VecDeque};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use paceline_proto::agent::v1 as pb;
use prost::Message;

use crate::error::{AgentError, io_ctx};

const KIND_UPDATE: u8 = 1;
const KIND_ACK: u8 = 2;
/// Acknowledged records a log may carry before it is compacted.
const COMPACT_AFTER: usize = 64;
/// File name of a run's log inside its state directory.
pub(crate) const LOG_FILE: &str = "outbox.log";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; keep going.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[derive(Debug)]
struct RunLog {
    path: PathBuf,
    last_seq: u64,
    acked: u64,
    /// State of the last update appended (acknowledged or not).
    last_state: Option<pb::RunState>,
    /// The last update appended (acknowledged or not), kept through compaction.
    last: Option<pb::StatusUpdate>,
    /// Records in the file, to decide when to compact it.
    records: usize,
    pending: VecDeque<pb::StatusUpdate>,
}

impl RunLog {
    /// Rewrites the log as: the last update (so its state and seq survive
    /// even when acknowledged), the pending ones, and the ack watermark.
    /// Atomic: temp file, fsync, rename.
    fn compact(&mut self) -> Result<(), AgentError> {
        let mut buf = Vec::new();
        let mut records = 0;
        let mut push = |kind: u8, payload: &[u8]| {
            buf.push(kind);
            buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            buf.extend_from_slice(payload);
            records += 1;
        };
        if let Some(last) = &self.last
            && last.seq <= self.acked
        {
            push(KIND_UPDATE, &last.encode_to_vec());
        }
        for update in &self.pending {
            push(KIND_UPDATE, &update.encode_to_vec());
        }
        push(KIND_ACK, &self.acked.to_le_bytes());
        let tmp = self.path.with_extension("log.tmp");
        let ctx = || format!("compacting {}", self.path.display());
        let mut file = fs::File::create(&tmp).map_err(io_ctx(ctx()))?;
        file.write_all(&buf).map_err(io_ctx(ctx()))?;
        file.sync_data().map_err(io_ctx(ctx()))?;
        fs::rename(&tmp, &self.path).map_err(io_ctx(ctx()))?;
        self.records = records;
        Ok(())
    }

    fn append_record(&self, kind: u8, payload: &[u8]) -> Result<(), AgentError> {
        let mut buf = Vec::with_capacity(payload.len() + 5);
        buf.push(kind);
        buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        buf.extend_from_slice(payload);
        let ctx = || format!("appending to {}", self.path.display());
        let mut file = OpenOptions::new().create(true).append(true).open(&self.path).map_err(io_ctx(ctx()))?;
        file.write_all(&buf).map_err(io_ctx(ctx()))?;
        file.sync_data().map_err(io_ctx(ctx()))?;
        Ok(())
    }
}

/// Status updates on their way to the host manager; see the module docs.
#[derive(Debug)]
pub struct Outbox {
    root: PathBuf,
    runs: Mutex<HashMap<String, Arc<Mutex<RunLog>>>>,
}

impl Outbox {
    /// Opens the outbox kept under `root` (one directory per run, named by
    /// run id), replaying every run's log.
    pub fn open(root: &Path) -> Result<Self, AgentError> {
        fs::create_dir_all(root).map_err(io_ctx(format!("creating {}", root.display())))?;
        let mut runs = HashMap::new();
        let entries = fs::read_dir(root).map_err(io_ctx(format!("listing {}", root.display())))?;
        for entry in entries {
            let entry = entry.map_err(io_ctx(format!("listing {}", root.display())))?;
            let path = entry.path().join(LOG_FILE);
            if !path.is_file() {
                continue;
            }
            let run_id = entry.file_name().to_string_lossy().into_owned();
            let log = replay(&path)?;
            runs.insert(run_id, Arc::new(Mutex::new(log)));
        }
        Ok(Self { root: root.to_owned(), runs: Mutex::new(runs) })
    }

    fn run_log(&self, run_id: &str) -> Arc<Mutex<RunLog>> {
        let mut runs = lock(&self.runs);
        runs.entry(run_id.to_owned())
            .or_insert_with(|| {
                Arc::new(Mutex::new(RunLog {
                    path: self.root.join(run_id).join(LOG_FILE),
                    last_seq: 0,
                    acked: 0,
                    last_state: None,
                    last: None,
                    records: 0,
                    pending: VecDeque::new(),
                }))
            })
            .clone()
    }

    /// Gives `update` the run's next `seq`, makes it durable and queues it.
    /// Returns the update as it will be sent.
    pub fn append(&self, mut update: pb::StatusUpdate) -> Result<pb::StatusUpdate, AgentError> {
        let log = self.run_log(&update.run_id);
        let mut log = lock(&log);
        if let Some(dir) = log.path.parent() {
            fs::create_dir_all(dir).map_err(io_ctx(format!("creating {}", dir.display())))?;
        }
        update.seq = log.last_seq + 1;
        log.append_record(KIND_UPDATE, &update.encode_to_vec())?;
        log.last_seq = update.seq;
        log.last_state = pb::RunState::try_from(update.state).ok();
        log.last = Some(update.clone());
        log.records += 1;
        log.pending.push_back(update.clone());
        Ok(update)
    }

    /// Acknowledges every update of `run_id` up to `seq`. Returns how many
    /// were newly acknowledged; unknown runs and old acks are ignored.
    pub fn ack(&self, run_id: &str, seq: u64) -> Result<usize, AgentError> {
        let Some(log) = lock(&self.runs).get(run_id).cloned() else {
            return Ok(0);
        };
        let mut log = lock(&log);
        // An ack beyond what was sent is a manager bug; never let it swallow
        // updates that do not exist yet.
        let seq = seq.min(log.last_seq);
        if seq <= log.acked {
            return Ok(0);
        }
        log.append_record(KIND_ACK, &seq.to_le_bytes())?;
        log.acked = seq;
        log.records += 1;
        let before = log.pending.len();
        log.pending.retain(|u| u.seq > seq);
        let newly = before - log.pending.len();
        // A long-lived run (health flapping for days) must not grow its log
        // without bound: rewrite it once it is mostly acknowledged history.
        if log.records > 2 * log.pending.len() + COMPACT_AFTER
            && let Err(e) = log.compact()
        {
            tracing::warn!(path = %log.path.display(), error = %e, "compacting a status log");
        }
        Ok(newly)
    }

    /// Every unacknowledged update, in order per run (runs by id).
    pub fn pending(&self) -> Vec<pb::StatusUpdate> {
        self.pending_after(&HashMap::new())
    }

    /// Unacknowledged updates whose `seq` is above `sent[run_id]`, in order
    /// per run. The session uses it to send each update once per stream.
    pub fn pending_after(&self, sent: &HashMap<String, u64>) -> Vec<pb::StatusUpdate> {
        let mut logs: Vec<(String, Arc<Mutex<RunLog>>)> =
            lock(&self.runs).iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        logs.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out = Vec::new();
        for (run_id, log) in logs {
            let floor = sent.get(&run_id).copied().unwrap_or(0);
            out.extend(lock(&log).pending.iter().filter(|u| u.seq > floor).cloned());
        }
        out
    }

    /// Number of unacknowledged updates.
    pub fn pending_len(&self) -> usize {
        let logs: Vec<_> = lock(&self.runs).values().cloned().collect();
        logs.iter().map(|l| lock(l).pending.len()).sum()
    }

    /// The last `seq` given to an update of `run_id` (0 when none).
    pub fn last_seq(&self, run_id: &str) -> u64 {
        lock(&self.runs).get(run_id).map(|l| lock(l).last_seq).unwrap_or(0)
    }

    /// The state of the run's last update, acknowledged or not.
    pub fn last_state(&self, run_id: &str) -> Option<pb::RunState> {
        lock(&self.runs).get(run_id).and_then(|l| lock(l).last_state)
    }

    /// The highest acknowledged `seq` of `run_id` (0 when none).
    pub fn acked(&self, run_id: &str) -> u64 {
        lock(&self.runs).get(run_id).map(|l| lock(l).acked).unwrap_or(0)
    }

    /// Drops a run from memory (its directory is removed by the caller).
    pub fn forget(&self, run_id: &str) {
        lock(&self.runs).remove(run_id);
    }
}

/// Reads a run's log, cutting off a torn tail.
fn replay(path: &Path) -> Result<RunLog, AgentError> {
    let bytes = fs::read(path).map_err(io_ctx(format!("reading {}", path.display())))?;
    let mut log = RunLog {
        path: path.to_owned(),
        last_seq: 0,
        acked: 0,
        last_state: None,
        last: None,
        records: 0,
        pending: VecDeque::new(),
    };
    let mut pos = 0usize;
    while bytes.len() - pos >= 5 {
        let kind = bytes[pos];
        let mut len_bytes = [0u8; 4];
        len_bytes.copy_from_slice(&bytes[pos + 1..pos + 5]);
        let len = u32::from_le_bytes(len_bytes) as usize;
        if bytes.len() - pos - 5 < len {
            break;
        }
        let payload = &bytes[pos + 5..pos + 5 + len];
        match kind {
            KIND_UPDATE => {
                let update = pb::StatusUpdate::decode(payload)
                    .map_err(|e| AgentError::Corrupt { path: path.to_owned(), message: e.to_string() })?;
                log.last_seq = log.last_seq.max(update.seq);
                log.last_state = pb::RunState::try_from(update.state).ok();
                log.last = Some(update.clone());
                log.pending.push_back(update);
            }
            KIND_ACK if len == 8 => {
                let mut seq = [0u8; 8];
                seq.copy_from_slice(payload);
                log.acked = log.acked.max(u64::from_le_bytes(seq));
            }
            _ => {
                return Err(AgentError::Corrupt {
                    path: path.to_owned(),
                    message: format!("unknown record kind {kind} (length {len}) at offset {pos}"),
                });
            }
        }
        pos += 5 + len;
        log.records += 1;
    }
    if pos < bytes.len() {
        tracing::warn!(path = %path.display(), kept = pos, dropped = bytes.len() - pos, "cutting a torn record off a status log");
        let file = OpenOptions::new().write(true).open(path).map_err(io_ctx(format!("opening {}", path.display())))?;
        file.set_len(pos as u64).map_err(io_ctx(format!("truncating {}", path.display())))?;
    }
    let acked = log.acked;
    log.last_seq = log.last_seq.max(acked);
    log.pending.retain(|u| u.seq > acked);
    Ok(log)
}
