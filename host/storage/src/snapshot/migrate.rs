//! Copying a whole store into another, of either backend (`paceline storage
//! migrate`): the snapshot's record stream ([`super::walk`]) written with
//! the restore's writes, resumable and verified (decision 0030, item 3).
//!
//! - **A marker in the target.** The provider id [`MARKER`] holds `in
//!   progress from SOURCE` from the first write on and `complete from SOURCE`
//!   at the end. A target without the marker must be empty; one with the
//!   marker of another source is refused.
//! - **Resumable, a job at a time.** Records other than jobs are upserts (a
//!   plugin version already there must have the same digest). A job is
//!   copied whole: on a resumed run, a job already in the target is compared
//!   with the source record by record (checksums); equal, it is skipped,
//!   otherwise (cut short by the interruption) it is deleted and copied
//!   again.
//! - **Verified.** At the end both stores are walked again and every
//!   record's SHA-256 (with compare-and-set versions left out) must be in
//!   both, kind by kind, with the same counts.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use super::{Record, RecordSink, Restorer, SnapshotError, contents, walk, walk_job};
use crate::store::Store;

/// The provider id under which the target records the migration.
pub const MARKER: &str = "paceline-migration";

/// Figures of a migration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Jobs written (first time or again).
    pub jobs_copied: u64,
    /// Jobs found complete in the target (a resumed run) and skipped.
    pub jobs_skipped: u64,
    /// Jobs found cut short in the target, deleted and copied again.
    pub jobs_redone: u64,
    /// Records verified in each store, by kind.
    pub verified: BTreeMap<String, u64>,
    /// Whether this run resumed an earlier one.
    pub resumed: bool,
}

/// Where a running migration is.
#[derive(Clone, Debug)]
pub struct Progress {
    /// Jobs handled so far.
    pub jobs_done: u64,
    /// Jobs in the source when the run began.
    pub jobs_total: u64,
    /// Since the run began.
    pub elapsed: Duration,
}

/// A record's checksum as migrations compare them: SHA-256 of its JSON with
/// the compare-and-set versions zeroed (the target counts its own).
pub fn record_digest(record: &Record) -> Result<[u8; 32], SnapshotError> {
    let mut r = record.clone();
    match &mut r {
        Record::Job(j) => j.runtime.version = 0,
        Record::Task { runtime, .. } => runtime.version = 0,
        Record::Update { update, .. } => update.version = 0,
        _ => {}
    }
    let bytes = serde_json::to_vec(&r).map_err(|e| SnapshotError::Encode(e.to_string()))?;
    Ok(Sha256::digest(&bytes).into())
}

/// Collects records in memory.
#[derive(Default)]
struct Collect(Vec<Record>);

#[async_trait]
impl RecordSink for Collect {
    async fn record(&mut self, record: Record) -> Result<(), SnapshotError> {
        self.0.push(record);
        Ok(())
    }
}

/// Per-kind sorted digests of every record of a store.
#[derive(Default)]
struct Digests(BTreeMap<String, Vec<[u8; 32]>>);

#[async_trait]
impl RecordSink for Digests {
    async fn record(&mut self, record: Record) -> Result<(), SnapshotError> {
        let d = record_digest(&record)?;
        self.0.entry(record.kind().to_string()).or_default().push(d);
        Ok(())
    }
}

async fn digests(store: &dyn Store, frozen: bool) -> Result<BTreeMap<String, Vec<[u8; 32]>>, SnapshotError> {
    let mut d = Digests::default();
    walk(store, frozen, &mut d).await?;
    for v in d.0.values_mut() {
        v.sort_unstable();
    }
    Ok(d.0)
}

/// The sink of the copy: non-job records at once, each job's records
/// gathered and then written (or skipped) whole.
struct Copy<'a> {
    dst: &'a dyn Store,
    job: Vec<Record>,
    report: Report,
    total: u64,
    started: Instant,
    last_progress: Instant,
    progress: &'a mut (dyn FnMut(Progress) + Send),
}

impl Copy<'_> {
    async fn finish_job(&mut self) -> Result<(), SnapshotError> {
        let records = std::mem::take(&mut self.job);
        let Some(Record::Job(job)) = records.first() else { return Ok(()) };
        let id = job.id.clone();
        match self.dst.get_job_runtime(&id).await {
            Ok(rt) => {
                // In the target already: from an interrupted run. Equal
                // record for record, or redone.
                let latest = self.dst.get_job_config(&id, None).await?.0;
                let mut there = Collect::default();
                walk_job(self.dst, &id, latest, rt, &mut there).await?;
                let same = there.0.len() == records.len()
                    && there
                        .0
                        .iter()
                        .zip(&records)
                        .all(|(a, b)| matches!((record_digest(a), record_digest(b)), (Ok(x), Ok(y)) if x == y));
                if same {
                    self.report.jobs_skipped += 1;
                    return self.tick();
                }
                tracing::info!(job = %id, "job cut short by an earlier run: copied again");
                self.dst.delete_job(&id).await?;
                self.report.jobs_redone += 1;
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
        let mut w = Restorer::new(self.dst);
        for r in records {
            w.record(r).await?;
        }
        w.flush().await?;
        self.report.jobs_copied += 1;
        self.tick()
    }

    fn tick(&mut self) -> Result<(), SnapshotError> {
        let done = self.report.jobs_copied + self.report.jobs_skipped;
        if self.last_progress.elapsed() >= Duration::from_secs(1) || done == self.total {
            self.last_progress = Instant::now();
            (self.progress)(Progress { jobs_done: done, jobs_total: self.total, elapsed: self.started.elapsed() });
        }
        Ok(())
    }

    async fn other(&mut self, record: Record) -> Result<(), SnapshotError> {
        if let Record::Plugin { version, bytes } = &record {
            let there = self.dst.plugin_versions(Some(&version.slot)).await?;
            if let Some(v) = there.iter().find(|v| v.name == version.name && v.version == version.version) {
                if !v.sha256.eq_ignore_ascii_case(&version.sha256) {
                    return Err(SnapshotError::NotEmpty(format!(
                        "plugin {}/{} in the target has another digest than in the source",
                        version.slot,
                        version.id()
                    )));
                }
                let _ = bytes;
                if v.state != version.state {
                    self.dst.set_plugin_state(&version.slot, &version.name, &version.version, &version.state).await?;
                }
                return Ok(());
            }
        }
        let mut w = Restorer::new(self.dst);
        w.record(record).await?;
        w.flush().await
    }
}

#[async_trait]
impl RecordSink for Copy<'_> {
    async fn record(&mut self, record: Record) -> Result<(), SnapshotError> {
        match record {
            Record::Job(_) => {
                self.finish_job().await?;
                self.job.push(record);
            }
            Record::Task { .. } | Record::TaskEvents { .. } | Record::Update { .. } | Record::JobEvents { .. } => {
                self.job.push(record)
            }
            other => {
                self.finish_job().await?;
                self.other(other).await?;
            }
        }
        Ok(())
    }
}

async fn count_jobs(store: &dyn Store) -> Result<u64, SnapshotError> {
    let (mut n, mut cursor) = (0u64, None);
    loop {
        let page = store
            .query_jobs(&crate::types::JobQuery { limit: 10_000, cursor: cursor.take(), ..Default::default() })
            .await?;
        n += page.items.len() as u64;
        match page.next {
            Some(c) => cursor = Some(c),
            None => return Ok(n),
        }
    }
}

/// Copies everything of `src` into `dst` and verifies the copy. `source`
/// names the source in the target's marker (a resumed run must name the
/// same). `progress` is called about once a second.
pub async fn migrate(
    src: &dyn Store,
    dst: &dyn Store,
    source: &str,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Report, SnapshotError> {
    let in_progress = format!("in progress from {source}");
    let complete = format!("complete from {source}");
    let resumed = match dst.get_provider_id(MARKER).await? {
        None => {
            if let Some(held) = contents(dst).await? {
                return Err(SnapshotError::NotEmpty(format!(
                    "{held}, and no migration of this source was started in it"
                )));
            }
            dst.put_provider_id(MARKER, &in_progress).await?;
            false
        }
        Some(m) if m == in_progress || m == complete => true,
        Some(m) => {
            return Err(SnapshotError::NotEmpty(format!("it holds a migration {m}, not from {source}")));
        }
    };
    let view = src.consistent_view().await?;
    let from: &dyn Store = match &view {
        Some(v) => v.store.as_ref(),
        None => src,
    };
    let started = Instant::now();
    let mut copy = Copy {
        dst,
        job: Vec::new(),
        report: Report { resumed, ..Report::default() },
        total: count_jobs(from).await?,
        started,
        last_progress: started,
        progress,
    };
    walk(from, view.is_some(), &mut copy).await?;
    copy.finish_job().await?;
    let mut report = copy.report;

    let (want, got) = (digests(from, view.is_some()).await?, digests(dst, false).await?);
    for kind in want.keys().chain(got.keys()) {
        let (w, g) =
            (want.get(kind).map(Vec::as_slice).unwrap_or(&[]), got.get(kind).map(Vec::as_slice).unwrap_or(&[]));
        if w != g {
            let missing = w.iter().filter(|d| g.binary_search(d).is_err()).count();
            let extra = g.iter().filter(|d| w.binary_search(d).is_err()).count();
            return Err(SnapshotError::Damaged(format!(
                "verification failed for {kind} records: the source has {}, the target {} ({missing} missing or different in the target, {extra} only in the target); run the migration again",
                w.len(),
                g.len()
            )));
        }
        report.verified.insert(kind.clone(), w.len() as u64);
    }
    dst.put_provider_id(MARKER, &complete).await?;
    drop(view);
    Ok(report)
}
