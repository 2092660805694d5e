//! The snapshot file format, version 1 (docs/operations.md, "Snapshot file
//! format"): JSON lines.
//!
//! - Line 1, the header: `{"format":"paceline-snapshot","version":1,…}`.
//! - Then one record per line, `{"t":KIND,"r":{…}}`, in the order the
//!   export visits the store (pools, their sealed secrets, hosts, provider ids, plugins, slots,
//!   then each job followed by its tasks, task events, updates and job
//!   events), which is also an order restore can write them in.
//! - The last line, the trailer: `{"t":"end","r":{"counts":{KIND:N,…},
//!   "sha256":HEX}}`, the number of records of each kind and the SHA-256 of
//!   every byte before the trailer line (header included).
//!
//! JSON lines and not a binary format: a damaged file is found by the
//! checksum either way, and an operator can read (and `grep`) a backup
//! without Paceline. Records are the model's own serde types, so a field
//! added to the model later is a field added here (readers of version 1
//! ignore nothing: the model's types refuse unknown fields).

use std::collections::BTreeMap;
use std::io::BufRead;

use base64::Engine;
use paceline_model::event::JobEvent;
use paceline_model::host::HostRecord;
use paceline_model::job::{InstanceProgress, JobConfig, JobRuntime, Update};
use paceline_model::task::{TaskEvent, TaskRuntime};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::SnapshotError;
use crate::types::PluginVersion;

/// The `format` field of every header.
pub const FORMAT_NAME: &str = "paceline-snapshot";

/// The newest format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// The first line of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// Format version; a reader refuses one newer than [`FORMAT_VERSION`].
    pub version: u32,
    /// When the export began, milliseconds since the epoch.
    pub created_at_ms: u64,
    /// The backend it was taken from (`sqlite`, `cassandra`, `memory`).
    pub source_backend: String,
    /// Whether every record comes from one read view of the store (SQLite:
    /// yes; Cassandra: no, see docs/operations.md).
    pub point_in_time: bool,
    /// The Paceline version that wrote it.
    pub written_by: String,
}

/// The last line of a snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trailer {
    /// Records of each kind (the `t` of their lines).
    pub counts: BTreeMap<String, u64>,
    /// SHA-256 of every byte before the trailer line, lowercase hex.
    pub sha256: String,
}

/// A job with every config version it has, oldest first, and its runtime.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// Job id.
    pub id: String,
    /// `(version, config)`, oldest first, versions 1..=latest.
    pub configs: Vec<(u64, JobConfig)>,
    /// The runtime as stored (its `version` is informational: restore starts at 1).
    pub runtime: JobRuntime,
}

/// One record of a snapshot. `t` names the kind, `r` holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", content = "r", rename_all = "snake_case")]
pub enum Record {
    /// A resource pool's opaque spec (base64).
    Pool {
        /// Pool path.
        path: String,
        /// The resource manager's serialized spec, base64.
        spec: String,
    },
    /// A task secret as the store keeps it: sealed (AES-256-GCM under the
    /// server's key, decision 0032), never in the clear.
    Secret(crate::secrets::SealedSecret),
    /// A host with its maintenance state.
    Host(HostRecord),
    /// An id a provider gave the cluster (`mesos` → framework id).
    ProviderId {
        /// Provider name.
        provider: String,
        /// Its id.
        id: String,
    },
    /// A plugin version with its component bytes (base64).
    Plugin {
        /// The version's metadata, state included.
        version: PluginVersion,
        /// The component, base64.
        bytes: String,
    },
    /// A slot's activation history; the last entry is the active version.
    Slot {
        /// Slot name.
        slot: String,
        /// `name@version` ids, oldest first.
        history: Vec<String>,
    },
    /// A job.
    Job(JobRecord),
    /// One task runtime of the job before it.
    Task {
        /// Job id.
        job: String,
        /// Instance number.
        instance: u32,
        /// The runtime.
        runtime: TaskRuntime,
    },
    /// A task's state-change events, oldest first.
    TaskEvents {
        /// Job id.
        job: String,
        /// Instance number.
        instance: u32,
        /// The events, oldest first.
        events: Vec<TaskEvent>,
    },
    /// An update workflow with its per-instance progress.
    Update {
        /// The update.
        update: Update,
        /// Progress by instance.
        progress: Vec<InstanceProgress>,
    },
    /// A job's events (decision 0025), most recently seen first.
    JobEvents {
        /// Job id.
        job: String,
        /// The events.
        events: Vec<JobEvent>,
    },
    /// The trailer; only ever the last line.
    End(Trailer),
}

impl Record {
    /// The kind, as counted in the trailer.
    pub fn kind(&self) -> &'static str {
        match self {
            Record::Pool { .. } => "pool",
            Record::Secret(_) => "secret",
            Record::Host(_) => "host",
            Record::ProviderId { .. } => "provider_id",
            Record::Plugin { .. } => "plugin",
            Record::Slot { .. } => "slot",
            Record::Job(_) => "job",
            Record::Task { .. } => "task",
            Record::TaskEvents { .. } => "task_events",
            Record::Update { .. } => "update",
            Record::JobEvents { .. } => "job_events",
            Record::End(_) => "end",
        }
    }
}

/// Base64 of bytes, as records hold them.
pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Bytes of a record's base64 field.
pub fn unb64(what: &str, s: &str) -> Result<Vec<u8>, SnapshotError> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| SnapshotError::Damaged(format!("{what}: not base64: {e}")))
}

/// Writes a snapshot's lines into a buffer, hashing and counting as it
/// goes; the caller drains the buffer ([`Encoder::take`]) wherever the
/// bytes go (a file, a gRPC stream).
pub struct Encoder {
    hash: Sha256,
    counts: BTreeMap<String, u64>,
    buf: Vec<u8>,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder").field("counts", &self.counts).field("buffered", &self.buf.len()).finish()
    }
}

impl Encoder {
    /// Starts a snapshot with `header`.
    pub fn new(header: &Header) -> Result<Encoder, SnapshotError> {
        let mut e = Encoder { hash: Sha256::new(), counts: BTreeMap::new(), buf: Vec::new() };
        let line = serde_json::to_vec(header).map_err(|e| SnapshotError::Encode(e.to_string()))?;
        e.push_line(line);
        Ok(e)
    }

    fn push_line(&mut self, mut line: Vec<u8>) {
        line.push(b'\n');
        self.hash.update(&line);
        self.buf.extend_from_slice(&line);
    }

    /// Adds one record.
    pub fn record(&mut self, record: &Record) -> Result<(), SnapshotError> {
        let line = serde_json::to_vec(record).map_err(|e| SnapshotError::Encode(e.to_string()))?;
        *self.counts.entry(record.kind().to_string()).or_default() += 1;
        self.push_line(line);
        Ok(())
    }

    /// Bytes buffered so far.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Takes the buffered bytes.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    /// Appends the trailer; returns the last bytes and the trailer.
    pub fn finish(mut self) -> Result<(Vec<u8>, Trailer), SnapshotError> {
        let trailer = Trailer { counts: self.counts.clone(), sha256: hex::encode(self.hash.finalize_reset()) };
        let mut line =
            serde_json::to_vec(&Record::End(trailer.clone())).map_err(|e| SnapshotError::Encode(e.to_string()))?;
        line.push(b'\n');
        self.buf.extend_from_slice(&line);
        Ok((self.buf, trailer))
    }
}

/// Reads a snapshot line by line, checking the header first and the
/// counts and checksum at the trailer. A record handed out before the
/// trailer is checked is not yet known good: read the whole file once
/// ([`verify`]) before acting on any of it.
pub struct Decoder<R: BufRead> {
    input: R,
    hash: Sha256,
    counts: BTreeMap<String, u64>,
    line_no: u64,
    header: Header,
    done: Option<Trailer>,
}

impl<R: BufRead> std::fmt::Debug for Decoder<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder").field("line", &self.line_no).field("header", &self.header).finish()
    }
}

fn read_line<R: BufRead>(input: &mut R, line_no: u64) -> Result<Option<Vec<u8>>, SnapshotError> {
    let mut line = Vec::new();
    let n = input.read_until(b'\n', &mut line).map_err(|e| SnapshotError::Io(format!("line {line_no}: {e}")))?;
    if n == 0 {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') {
        return Err(SnapshotError::Damaged(format!("line {line_no} is cut short (no newline): the file is truncated")));
    }
    Ok(Some(line))
}

impl<R: BufRead> Decoder<R> {
    /// Reads and checks the header.
    pub fn new(mut input: R) -> Result<Decoder<R>, SnapshotError> {
        let line = read_line(&mut input, 1)?.ok_or_else(|| SnapshotError::Damaged("the file is empty".into()))?;
        let value: serde_json::Value = serde_json::from_slice(&line)
            .map_err(|e| SnapshotError::Damaged(format!("line 1 (the header) is not JSON: {e}")))?;
        if value.get("format").and_then(|f| f.as_str()) != Some(FORMAT_NAME) {
            return Err(SnapshotError::Damaged(format!("line 1 is not a {FORMAT_NAME} header: not a snapshot file")));
        }
        // The version is checked before the rest of the header: a newer
        // format may have changed it.
        let version = value.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
        if version > u64::from(FORMAT_VERSION) {
            return Err(SnapshotError::TooNew { found: version, supported: FORMAT_VERSION });
        }
        let header: Header =
            serde_json::from_value(value).map_err(|e| SnapshotError::Damaged(format!("the header: {e}")))?;
        let mut hash = Sha256::new();
        hash.update(&line);
        Ok(Decoder { input, hash, counts: BTreeMap::new(), line_no: 1, header, done: None })
    }

    /// The header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The next record; `None` after the trailer, once it checked out.
    pub fn next_record(&mut self) -> Result<Option<Record>, SnapshotError> {
        if self.done.is_some() {
            if read_line(&mut self.input, self.line_no + 1)?.is_some() {
                return Err(SnapshotError::Damaged(format!("data after the trailer (line {})", self.line_no + 1)));
            }
            return Ok(None);
        }
        self.line_no += 1;
        let n = self.line_no;
        let line = read_line(&mut self.input, n)?.ok_or_else(|| {
            SnapshotError::Damaged(format!("the file ends at line {n} without its trailer: it is truncated"))
        })?;
        let record: Record =
            serde_json::from_slice(&line).map_err(|e| SnapshotError::Damaged(format!("line {n}: {e}")))?;
        if let Record::End(trailer) = record {
            let sha = hex::encode(self.hash.finalize_reset());
            if sha != trailer.sha256 {
                return Err(SnapshotError::Damaged(format!(
                    "checksum mismatch: the content hashes to {sha}, the trailer says {}",
                    trailer.sha256
                )));
            }
            if trailer.counts != self.counts {
                return Err(SnapshotError::Damaged(format!(
                    "record counts differ: the file holds {:?}, the trailer says {:?}",
                    self.counts, trailer.counts
                )));
            }
            self.done = Some(trailer);
            return self.next_record();
        }
        self.hash.update(&line);
        *self.counts.entry(record.kind().to_string()).or_default() += 1;
        Ok(Some(record))
    }

    /// The trailer, once [`Decoder::next_record`] returned `None`.
    pub fn trailer(&self) -> Option<&Trailer> {
        self.done.as_ref()
    }
}
