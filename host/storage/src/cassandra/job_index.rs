//! The job query index (decision 0033): one table, `job_index`, that maps
//! an attribute's value to the jobs that have it, so that a query by
//! state, owner, pool or label reads the few partitions holding those jobs
//! instead of scanning every job and filtering here.
//!
//! - Entries: `(attr, value, shard) → job_id` for `state` (the runtime's),
//!   `owner`, `pool` and `label` (`key=value`), each partition split in
//!   [`SHARDS`] by a stable hash of the id so that one value with many jobs
//!   (every `SUCCEEDED` job) never makes one large partition.
//! - Writers add an entry *before* the write that makes its value true
//!   (the create's claim, a runtime compare-and-set, a new config), so an
//!   entry is never missing; an entry that stopped being true is stale.
//! - Readers check every candidate against its `jobs` row (the truth) and
//!   delete the stale entries they meet, `USING TIMESTAMP` of the entry
//!   they read, so that an entry written again since (the job came back to
//!   that state) survives. A row still being created is skipped, never
//!   cleaned: its creator is writing its entries.
//! - A runtime compare-and-set removes the entry of the state it left
//!   at once (the same timestamp rule), so the live states' partitions,
//!   which recovery reads, hold little that is stale.

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use paceline_model::job::JobState;
use scylla::client::session::Session;

use super::{CONCURRENCY, CassandraStore, be};
use crate::error::{Result, StoreError};
use crate::types::{JobQuery, JobSummary, Page, matches};

/// Partitions per indexed value.
pub(super) const SHARDS: i32 = 8;

/// The `state` column of a job whose create has not finished: no read
/// returns such a job (`jobs.rs`).
pub(super) const CREATING: &str = "CREATING";

/// Ids read from one partition at a time: a page's worth, within bounds.
/// Ids are spread evenly over the shards, so a page of `limit` takes about
/// `limit / partitions` from each; half as much again, so that one round
/// usually fills the page (the bound keeps the answer exact either way).
fn chunk(limit: usize, partitions: usize) -> i32 {
    (limit.saturating_add(1) / partitions.max(1)).saturating_mul(3).div_ceil(2).saturating_add(8).clamp(16, 256) as i32
}

/// Which partition of a value holds `job_id`: FNV-1a, stable across
/// versions and platforms (the index outlives any one build).
pub(super) fn shard(job_id: &str) -> i32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in job_id.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    (h % SHARDS as u32) as i32
}

/// An indexed attribute and its value.
pub(super) type Attr = (&'static str, String);

/// The entries a job with this owner, pool and labels has (its state apart).
pub(super) fn config_attrs(owner: &str, pool: &str, labels: &BTreeMap<String, String>) -> Vec<Attr> {
    let mut out = vec![("owner", owner.to_string()), ("pool", pool.to_string())];
    out.extend(labels.iter().map(|(k, v)| ("label", label_value(k, v))));
    out
}

fn label_value(key: &str, value: &str) -> String {
    // Ambiguous if a key holds `=`; the check against the row keeps the
    // answer exact, at the cost of reading a candidate that does not match.
    format!("{key}={value}")
}

/// Whether `s` has the value `attr` names.
fn holds(s: &JobSummary, attr: &str, value: &str) -> bool {
    match attr {
        "state" => s.runtime.state.as_str() == value,
        "owner" => s.owner == value,
        "pool" => s.pool == value,
        "label" => s.labels.iter().any(|(k, v)| label_value(k, v) == value),
        _ => false,
    }
}

/// The index partitions a query reads, or `None` to scan every job. Live
/// states first (few jobs are live next to the history kept), then owner,
/// pool, a label, and finished states last (most jobs are finished).
pub(super) fn plan(q: &JobQuery) -> Option<Vec<Attr>> {
    let states = || q.states.iter().map(|s| ("state", s.as_str().to_string())).collect::<Vec<_>>();
    if !q.states.is_empty() && q.states.iter().all(|s| !s.is_terminal()) {
        return Some(states());
    }
    if let Some(o) = &q.owner {
        return Some(vec![("owner", o.clone())]);
    }
    if let Some(p) = &q.pool {
        return Some(vec![("pool", p.clone())]);
    }
    if let Some((k, v)) = q.labels.iter().next() {
        return Some(vec![("label", label_value(k, v))]);
    }
    (!q.states.is_empty()).then(states)
}

/// One partition's read: the attribute, value and shard, and the ids with
/// their entries' write times.
type Chunk = (&'static str, String, i32, Vec<(String, Option<i64>)>);

/// One entry as read: where it is and when it was written.
struct Entry {
    attr: &'static str,
    value: String,
    shard: i32,
    written_us: i64,
}

/// Runs `futs` at most [`CONCURRENCY`] at a time. The futures are built
/// before the stream (owned values, no closure inside it), which keeps the
/// trait's futures `Send` for every lifetime.
async fn all<T, F>(futs: Vec<F>) -> Result<Vec<T>>
where
    F: std::future::Future<Output = Result<T>>,
{
    futures::stream::iter(futs).buffer_unordered(CONCURRENCY).try_collect().await
}

impl CassandraStore {
    /// Adds the entries of `job_id` for `attrs` (idempotent), at write
    /// timestamp `ts` of the handle's clock (decision 0049): taken before
    /// the timestamp of the row write that makes them true, so that
    /// [`CassandraStore::index_remove_at`] with the row's `WRITETIME(state)`
    /// removes them, and not an entry written again later.
    pub(super) async fn index_add(&self, job_id: &str, attrs: &[Attr], ts: i64) -> Result<()> {
        let now = crate::types::now_ms() as i64;
        let mut futs = Vec::with_capacity(attrs.len());
        for (a, v) in attrs.iter().cloned() {
            let id = job_id.to_string();
            futs.push(async move {
                self.exec("job index", &self.s.ins_index, (a, v.as_str(), shard(&id), id.as_str(), now, ts)).await
            });
        }
        all(futs).await.map(drop)
    }

    /// Removes entries of `job_id` written at or before `at_us`.
    pub(super) async fn index_remove_at(&self, job_id: &str, attrs: &[Attr], at_us: i64) -> Result<()> {
        let mut futs = Vec::with_capacity(attrs.len());
        for (a, v) in attrs.iter().cloned() {
            let id = job_id.to_string();
            futs.push(async move {
                self.exec("job index", &self.s.del_index_at, (at_us, a, v.as_str(), shard(&id), id.as_str())).await
            });
        }
        all(futs).await.map(drop)
    }

    /// Removes every entry of `job_id` for `attrs` and for every state
    /// written at or before `ts` (the delete's clock).
    pub(super) async fn index_remove_all(&self, job_id: &str, attrs: &[Attr], ts: i64) -> Result<()> {
        let mut every: Vec<Attr> = attrs.to_vec();
        every.extend(JobState::ALL.iter().map(|s| ("state", s.as_str().to_string())));
        let mut futs = Vec::with_capacity(every.len());
        for (a, v) in every {
            let id = job_id.to_string();
            futs.push(async move {
                self.exec("job index", &self.s.del_index_at, (ts, a, v.as_str(), shard(&id), id.as_str())).await
            });
        }
        all(futs).await.map(drop)
    }

    /// Answers `query` from the partitions `attrs` name: candidates in id
    /// order from every shard, each checked against its row.
    pub(super) async fn query_indexed(
        &self,
        query: &JobQuery,
        attrs: &[Attr],
        limit: usize,
    ) -> Result<Page<JobSummary>> {
        let mut after = query.cursor.clone().unwrap_or_default();
        let chunk = chunk(limit, attrs.len() * SHARDS as usize);
        let mut items: Vec<JobSummary> = Vec::new();
        loop {
            // One chunk from every partition; a partition that filled its
            // chunk may hold more after its last id, so only ids up to the
            // smallest such last id are complete in this round.
            let mut reads = Vec::new();
            for (a, v) in attrs.iter().cloned() {
                for shard in 0..SHARDS {
                    let (v, after) = (v.clone(), after.clone());
                    reads.push(async move {
                        let rows: Vec<(String, Option<i64>)> = self
                            .rows("job index", &self.s.sel_index, (a, v.as_str(), shard, after.as_str(), chunk))
                            .await?;
                        Ok::<_, StoreError>((a, v, shard, rows))
                    });
                }
            }
            let chunks: Vec<Chunk> = all(reads).await?;
            let bound: Option<String> = chunks
                .iter()
                .filter(|(.., rows)| rows.len() as i32 == chunk)
                .filter_map(|(.., rows)| rows.last().map(|r| r.0.clone()))
                .min();
            let mut candidates: BTreeMap<String, Vec<Entry>> = BTreeMap::new();
            for (attr, value, shard, rows) in chunks {
                for (id, written) in rows {
                    if bound.as_ref().is_some_and(|b| id > *b) {
                        continue;
                    }
                    candidates.entry(id).or_default().push(Entry {
                        attr,
                        value: value.clone(),
                        shard,
                        written_us: written.unwrap_or(0),
                    });
                }
            }
            let mut fetches = Vec::with_capacity(candidates.len());
            for id in candidates.keys().cloned() {
                fetches.push(async move {
                    let (summary, creating) = self.job_summary_of(&id).await?;
                    Ok::<_, StoreError>((id, summary, creating))
                });
            }
            // In id order (the page is the first matches by id), and only
            // as far as the page needs: the rest are never fetched.
            let mut rows = std::pin::pin!(futures::stream::iter(fetches).buffered(CONCURRENCY));
            let mut stale: Vec<(String, Entry)> = Vec::new();
            while let Some(row) = rows.next().await {
                let (id, summary, creating) = row?;
                let entries = candidates.remove(&id).unwrap_or_default();
                if creating {
                    continue;
                }
                let Some(s) = summary else {
                    stale.extend(entries.into_iter().map(|e| (id.clone(), e)));
                    continue;
                };
                let (good, bad): (Vec<Entry>, Vec<Entry>) =
                    entries.into_iter().partition(|e| holds(&s, e.attr, &e.value));
                stale.extend(bad.into_iter().map(|e| (id.clone(), e)));
                if !good.is_empty() && matches(query, &s) {
                    items.push(s);
                    if items.len() > limit {
                        break;
                    }
                }
            }
            self.remove_stale(stale).await;
            if items.len() > limit {
                items.truncate(limit);
                let next = items.last().map(|s| s.id.clone());
                return Ok(Page { items, next });
            }
            match bound {
                Some(b) => after = b,
                None => return Ok(Page { items, next: None }),
            }
        }
    }

    /// Best effort: a stale entry left now is met and removed again later.
    async fn remove_stale(&self, stale: Vec<(String, Entry)>) {
        if stale.is_empty() {
            return;
        }
        tracing::debug!(entries = stale.len(), "cassandra: removing stale job index entries");
        let mut futs = Vec::with_capacity(stale.len());
        for (id, e) in stale {
            futs.push(async move {
                self.exec(
                    "job index",
                    &self.s.del_index_at,
                    (e.written_us, e.attr, e.value.as_str(), e.shard, id.as_str()),
                )
                .await
            });
        }
        let done = all(futs).await;
        if let Err(e) = done {
            tracing::warn!(error = %e, "cassandra: stale job index entries not removed (a later read retries)");
        }
    }
}

/// Fills the index from the jobs a store holds when the index migration
/// runs (raw statements: nothing is prepared yet). Idempotent.
pub(super) async fn backfill(session: &Session) -> Result<()> {
    let pager = session
        .query_iter("SELECT job_id, owner, pool, labels, runtime, state FROM jobs", &[])
        .await
        .map_err(|e| StoreError::Backend(format!("job index backfill: {e}")))?;
    type Row = (String, Option<String>, Option<String>, Option<String>, Option<String>, Option<String>);
    let rows: Vec<Row> = pager
        .rows_stream::<Row>()
        .map_err(be)?
        .try_collect()
        .await
        .map_err(|e| StoreError::Backend(format!("job index backfill: {e}")))?;
    // Qualified, as every prepared statement is (see `stmts`).
    let keyspace =
        session.get_keyspace().ok_or_else(|| StoreError::Backend("job index backfill: no keyspace".into()))?;
    let insert = session
        .prepare(super::stmts::qualify(
            "INSERT INTO job_index (attr, value, shard, job_id, at) VALUES (?, ?, ?, ?, ?)",
            &keyspace,
        ))
        .await
        .map_err(be)?;
    let now = crate::types::now_ms() as i64;
    let mut entries: Vec<(&'static str, String, i32, String, i64)> = Vec::new();
    for (id, owner, pool, labels, runtime, state) in rows {
        if state.as_deref() == Some(CREATING) {
            continue;
        }
        let labels: BTreeMap<String, String> =
            labels.as_deref().and_then(|l| serde_json::from_str(l).ok()).unwrap_or_default();
        let runtime_state = runtime
            .as_deref()
            .and_then(|r| serde_json::from_str::<paceline_model::job::JobRuntime>(r).ok())
            .map(|r| r.state.as_str().to_string());
        let mut attrs = config_attrs(owner.as_deref().unwrap_or(""), pool.as_deref().unwrap_or(""), &labels);
        if let Some(s) = runtime_state {
            attrs.push(("state", s));
        }
        entries.extend(attrs.into_iter().map(|(a, v)| (a, v, shard(&id), id.clone(), now)));
    }
    let count = entries.len();
    let mut futs = Vec::with_capacity(entries.len());
    for values in entries {
        let insert = &insert;
        futs.push(async move {
            session
                .execute_unpaged(insert, values)
                .await
                .map_err(|e| StoreError::Backend(format!("job index backfill: {e}")))
        });
    }
    all(futs).await?;
    tracing::info!(entries = count, "cassandra: job query index filled from the existing jobs");
    Ok(())
}

/// The index partitions of the live (not terminal) states, for recovery.
pub(super) fn live_states() -> Vec<Attr> {
    JobState::ALL.iter().filter(|s| !s.is_terminal()).map(|s| ("state", s.as_str().to_string())).collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn shards_are_stable_and_spread() {
        // Stable: the index outlives any one build, so these may never change.
        assert_eq!(shard(""), (0x811c_9dc5u32 % 8) as i32);
        let mut seen = BTreeSet::new();
        for i in 0..200 {
            seen.insert(shard(&format!("job-{i}")));
        }
        assert_eq!(seen.len(), SHARDS as usize, "200 ids reach every shard");
    }

    #[test]
    fn the_plan_prefers_live_states_then_owner_pool_label_then_finished_states() {
        let mut q = JobQuery { states: vec![JobState::Running], owner: Some("a".into()), ..Default::default() };
        assert_eq!(plan(&q), Some(vec![("state", "RUNNING".to_string())]));
        q.states = vec![JobState::Succeeded];
        assert_eq!(plan(&q), Some(vec![("owner", "a".to_string())]));
        q.owner = None;
        q.pool = Some("/p".into());
        assert_eq!(plan(&q), Some(vec![("pool", "/p".to_string())]));
        q.pool = None;
        q.labels.insert("team".into(), "ml".into());
        assert_eq!(plan(&q), Some(vec![("label", "team=ml".to_string())]));
        q.labels.clear();
        assert_eq!(plan(&q), Some(vec![("state", "SUCCEEDED".to_string())]));
        assert_eq!(plan(&JobQuery::default()), None, "no filter: a scan");
    }
}
