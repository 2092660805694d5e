//! Importers of public traces nobody here wrote. Each reads the published
//! CSV schema, maps what the trace format can express, and says in the
//! header's `notes` (and in its [`Imported::summary`]) what it mapped and
//! what it dropped, with counts.
//!
//! - [`openb`]: Alibaba `cluster-trace-gpu-v2023` (`openb_node_list_*.csv`,
//!   `openb_pod_list_*.csv`).
//! - [`alibaba2018`]: Alibaba `cluster-trace-v2018` batch workloads
//!   (`machine_meta.csv`, `batch_task.csv`).

pub mod alibaba2018;
pub mod openb;

use std::io::BufRead;

use crate::trace::{Header, Timed};

/// A CSV input that cannot be read, with where.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// Reading failed.
    #[error("{file}: {source}")]
    Io {
        /// Which input.
        file: String,
        /// Why.
        source: std::io::Error,
    },
    /// A row is wrong.
    #[error("{file}, line {line}, column `{column}`: {message}")]
    Row {
        /// Which input.
        file: String,
        /// 1-based line.
        line: u64,
        /// The column's name in the published schema.
        column: String,
        /// What is wrong.
        message: String,
    },
}

/// What an importer produced.
#[derive(Clone, Debug, PartialEq)]
pub struct Imported {
    /// The header (its notes list what was mapped and dropped).
    pub header: Header,
    /// The events, in time order.
    pub events: Vec<Timed>,
    /// One line per mapping decision with its count, for the terminal.
    pub summary: Vec<String>,
}

/// One CSV row with its line number.
#[derive(Debug)]
pub(crate) struct Row {
    pub line: u64,
    pub fields: Vec<String>,
}

/// Splits CSV text into rows: commas, double-quoted fields (`""` inside is
/// a quote), blank lines skipped. Enough for the published traces, which
/// quote nothing.
pub(crate) fn rows(file: &str, input: impl BufRead) -> impl Iterator<Item = Result<Row, ImportError>> {
    let file = file.to_string();
    input.lines().enumerate().filter_map(move |(i, line)| {
        let line_no = i as u64 + 1;
        match line {
            Err(source) => Some(Err(ImportError::Io { file: file.clone(), source })),
            Ok(text) if text.trim().is_empty() => None,
            Ok(text) => Some(Ok(Row { line: line_no, fields: split(text.trim_end_matches('\r')) })),
        }
    })
}

fn split(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            (c, _) => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// Reads the typed value of a column, with the error naming it.
pub(crate) fn field<T: std::str::FromStr>(file: &str, row: &Row, index: usize, column: &str) -> Result<T, ImportError>
where
    T::Err: std::fmt::Display,
{
    let raw = row.fields.get(index).map(|s| s.trim()).ok_or_else(|| ImportError::Row {
        file: file.to_string(),
        line: row.line,
        column: column.to_string(),
        message: format!("missing: the row has {} columns", row.fields.len()),
    })?;
    raw.parse::<T>().map_err(|e| ImportError::Row {
        file: file.to_string(),
        line: row.line,
        column: column.to_string(),
        message: format!("`{raw}`: {e}"),
    })
}

/// A float column, with the same error.
pub(crate) fn float(file: &str, row: &Row, index: usize, column: &str) -> Result<f64, ImportError> {
    let v: f64 = field(file, row, index, column)?;
    if !v.is_finite() {
        return Err(ImportError::Row {
            file: file.to_string(),
            line: row.line,
            column: column.to_string(),
            message: "not a finite number".into(),
        });
    }
    Ok(v)
}

/// A text column (empty when absent).
pub(crate) fn text(row: &Row, index: usize) -> &str {
    row.fields.get(index).map_or("", |s| s.trim())
}
