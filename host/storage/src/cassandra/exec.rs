//! How statements run: one statement with retries (`exec`, `rows`), paged
//! scans, unlogged batches grouped by partition and bounded in size, and
//! conditional writes (lightweight transactions) whose unknown outcome is
//! resolved by reading the row back at serial consistency, never by
//! guessing. Every other module runs its statements through these.

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use scylla::deserialize::row::DeserializeRow;
use scylla::response::query_result::QueryResult;
use scylla::serialize::row::SerializeRow;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::value::{CqlValue, Row};

use super::retry::{Class, backoff, classify, retrying};
use super::{CONCURRENCY, CassandraStore, be};
use crate::error::{Result, StoreError};

/// Largest total body of one batch: Cassandra fails batches over 50 KiB
/// (`batch_size_fail_threshold`) by default.
const MAX_BATCH_BYTES: usize = 32 * 1024;
/// Most statements of one batch.
const MAX_BATCH_STATEMENTS: usize = 100;

/// What a conditional write answered.
pub(super) enum Lwt {
    Applied,
    /// Not applied; the row's current version, `None` if the row is absent.
    NotApplied(Option<u64>),
}

impl CassandraStore {
    pub(super) async fn exec(
        &self,
        what: &str,
        st: &PreparedStatement,
        values: impl SerializeRow,
    ) -> Result<QueryResult> {
        let bound = st.clone().bind(&values).map_err(be)?;
        retrying(what, self.tries, || self.session.execute_bound_unpaged(&bound)).await
    }

    pub(super) async fn rows<R>(&self, what: &str, st: &PreparedStatement, values: impl SerializeRow) -> Result<Vec<R>>
    where
        R: for<'f, 'm> DeserializeRow<'f, 'm>,
    {
        let qr = self.exec(what, st, values).await?;
        let rows = qr.into_rows_result().map_err(be)?;
        let mut out = Vec::with_capacity(rows.rows_num());
        for r in rows.rows::<R>().map_err(|e| StoreError::Corrupt { what: what.into(), reason: e.to_string() })? {
            out.push(r.map_err(|e| StoreError::Corrupt { what: what.into(), reason: e.to_string() })?);
        }
        Ok(out)
    }

    /// All pages of a query (scans of small tables, the jobs table).
    pub(super) async fn scan<R>(
        &self,
        what: &str,
        st: &PreparedStatement,
        values: impl SerializeRow + Clone,
    ) -> Result<Vec<R>>
    where
        R: for<'f, 'm> DeserializeRow<'f, 'm>,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result: std::result::Result<Vec<R>, String> = async {
                let pager = self.session.execute_iter(st.clone(), values.clone()).await.map_err(|e| e.to_string())?;
                let stream = pager.rows_stream::<R>().map_err(|e| e.to_string())?;
                stream.try_collect::<Vec<R>>().await.map_err(|e| e.to_string())
            }
            .await;
            match result {
                Ok(v) => return Ok(v),
                Err(e) if attempt < self.tries => {
                    tracing::warn!(what, attempt, error = %e, "cassandra: scan failed, retrying");
                    tokio::time::sleep(backoff(attempt)).await;
                }
                Err(e) => return Err(StoreError::Unavailable(format!("{what}: {e}"))),
            }
        }
    }

    /// Rows of a paged query, fed to `take` one at a time until it answers
    /// `false`: only the pages needed are read (a listing's first page
    /// does not read the whole table). Not retried part way: an error
    /// after the first page is returned.
    pub(super) async fn scan_until<R>(
        &self,
        what: &str,
        st: &PreparedStatement,
        values: impl SerializeRow,
        mut take: impl FnMut(R) -> Result<bool>,
    ) -> Result<()>
    where
        R: for<'f, 'm> DeserializeRow<'f, 'm>,
    {
        let unavailable = |e: &dyn std::fmt::Display| StoreError::Unavailable(format!("{what}: {e}"));
        let pager = self.session.execute_iter(st.clone(), values).await.map_err(|e| unavailable(&e))?;
        let mut stream = pager.rows_stream::<R>().map_err(|e| unavailable(&e))?;
        while let Some(row) = stream.next().await {
            if !take(row.map_err(|e| unavailable(&e))?)? {
                break;
            }
        }
        Ok(())
    }

    /// Writes `rows` with `st` in unlogged batches of bounded size, grouped
    /// by partition (`key(row)`) so each batch touches one partition.
    pub(super) async fn batched<V, K>(&self, what: &str, st: &PreparedStatement, rows: Vec<(K, usize, V)>) -> Result<()>
    where
        V: SerializeRow + Send + Sync,
        K: Ord,
    {
        let mut groups: BTreeMap<K, Vec<(usize, V)>> = BTreeMap::new();
        for (k, size, v) in rows {
            groups.entry(k).or_default().push((size, v));
        }
        let mut batches: Vec<Vec<V>> = Vec::new();
        for (_, group) in groups {
            let mut cur = Vec::new();
            let mut bytes = 0;
            for (size, v) in group {
                if !cur.is_empty() && (bytes + size > MAX_BATCH_BYTES || cur.len() >= MAX_BATCH_STATEMENTS) {
                    batches.push(std::mem::take(&mut cur));
                    bytes = 0;
                }
                bytes += size;
                cur.push(v);
            }
            if !cur.is_empty() {
                batches.push(cur);
            }
        }
        futures::stream::iter(batches)
            .map(|values| async move {
                let mut batch = Batch::new(BatchType::Unlogged);
                for _ in 0..values.len() {
                    batch.append_statement(st.clone());
                }
                batch.set_consistency(self.consistency);
                batch.set_is_idempotent(true);
                retrying(what, self.tries, || self.session.batch(&batch, &values)).await.map(|_| ())
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    pub(super) async fn lwt_once(
        &self,
        what: &str,
        st: &PreparedStatement,
        values: &impl SerializeRow,
    ) -> std::result::Result<Lwt, (Class, StoreError)> {
        let bound = st.clone().bind(values).map_err(|e| (Class::Fatal, be(e)))?;
        let qr = self
            .session
            .execute_bound_unpaged(&bound)
            .await
            .map_err(|e| (classify(&e), StoreError::Backend(format!("{what}: {e}"))))?;
        let rows = qr.into_rows_result().map_err(|e| (Class::Fatal, be(e)))?;
        let version_col = rows.column_specs().get_by_name("version").map(|(i, _)| i);
        let row: Row = rows.first_row::<Row>().map_err(|e| (Class::Fatal, be(e)))?;
        let applied = matches!(row.columns.first(), Some(Some(CqlValue::Boolean(true))));
        if applied {
            return Ok(Lwt::Applied);
        }
        let version = version_col.and_then(|i| match row.columns.get(i) {
            Some(Some(CqlValue::BigInt(v))) => Some(*v as u64),
            _ => None,
        });
        // A row that exists always has a version; an absent row answers
        // with `[applied]` alone (or null columns).
        let exists = row.columns.len() > 1 && row.columns.iter().skip(1).any(Option::is_some);
        Ok(Lwt::NotApplied(if exists { version.or(Some(0)) } else { None }))
    }

    /// A compare-and-set: the LWT `st` with `values`; on an unknown outcome
    /// (timeout) reads the row back at serial consistency with `read` /
    /// `key` and decides from what is there.
    // The arguments are the statement pair and the values each needs; a
    // struct to carry them would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn cas<V, KV>(
        &self,
        what: &str,
        st: &PreparedStatement,
        values: V,
        read: &PreparedStatement,
        key: KV,
        expected: u64,
        body: &str,
    ) -> Result<()>
    where
        V: SerializeRow,
        KV: SerializeRow + Clone,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let err = match self.lwt_once(what, st, &values).await {
                Ok(Lwt::Applied) => return Ok(()),
                Ok(Lwt::NotApplied(None)) => return Err(StoreError::NotFound { kind: "record", id: what.to_string() }),
                Ok(Lwt::NotApplied(Some(v))) => return Err(StoreError::conflict(what, expected, Some(v))),
                Err((Class::Fatal, e)) => return Err(e),
                Err((_, e)) => e,
            };
            tracing::warn!(what, attempt, error = %err, "cassandra: conditional write outcome unknown, reading back");
            tokio::time::sleep(backoff(attempt)).await;
            let current: Vec<(i64, String)> = self.rows(what, read, key.clone()).await?;
            match current.first() {
                None => return Err(StoreError::NotFound { kind: "record", id: what.to_string() }),
                Some((v, b)) if *v as u64 == expected + 1 && b == body => return Ok(()),
                Some((v, _)) if *v as u64 == expected && attempt < self.tries => continue,
                Some((v, _)) if *v as u64 == expected => return Err(err),
                Some((v, _)) => return Err(StoreError::conflict(what, expected, Some(*v as u64))),
            }
        }
    }

    /// Runs a lightweight transaction once and says whether it applied.
    pub(super) async fn applied(&self, what: &str, st: &PreparedStatement, values: impl SerializeRow) -> Result<bool> {
        let bound = st.clone().bind(&values).map_err(be)?;
        let qr = self
            .session
            .execute_bound_unpaged(&bound)
            .await
            .map_err(|e| StoreError::Unavailable(format!("{what}: {e}")))?;
        let rows = qr.into_rows_result().map_err(be)?;
        let row: Row = rows.first_row::<Row>().map_err(be)?;
        Ok(matches!(row.columns.first(), Some(Some(CqlValue::Boolean(true)))))
    }
}
