//! # paceline-storage
//!
//! The storage gateway: everything Paceline must not lose — jobs (config
//! versions and runtime), task runtimes (run id, version), task events,
//! update workflows, resource pools, plugin versions and their bytes, the
//! host inventory, provider ids — behind one domain-level [`Store`] trait,
//! with two backends that pass one conformance suite.
//!
//! - **Receives** domain records from the role crates (jobmgr, resmgr,
//!   hostmgr, the plugin registry) and the `storage:` section of the config.
//! - **Hands on** the records as stored, with versions for compare-and-set;
//!   a write returns only once durable.
//! - **Must not**: interpret what it stores beyond what queries need (pool
//!   specs are opaque bytes; state machines are the callers'); hold a
//!   compare-and-set only in memory; let any other crate reach its tables.
//!
//! # Layout
//! - [`store`]: the [`Store`] trait.
//! - [`audit`]: the audit log's records and queries (`docs/operations.md`, "Audit log").
//! - [`types`]: queries, pages, plugin version records, size [`limits`].
//! - [`error`]: [`StoreError`], one error type for both backends.
//! - [`config`]: `storage: {sqlite: …}` / `storage: {cassandra: …}` and [`open`].
//! - [`sqlite`]: the embedded backend (WAL, one writer thread, group commit).
//! - [`memory`]: in ordered maps, not durable: the simulator's store.
//! - [`metered`]: any store wrapped so that every call is timed and its errors
//!   counted by backend and operation (the servers' `store_*` metrics).
//! - [`cassandra`]: the production backend (scylla driver, LWT, bucketed partitions).
//! - [`secrets`]: task secrets sealed at rest (AES-256-GCM) and the server's key.
//! - [`bench`]: the `paceline bench storage` figures.
//! - [`bench_queries`]: the `paceline bench job-queries` figures (many jobs, the query index).
//! - [`crash`]: crash points that tests arm to kill a writer between two writes.
//! - [`snapshot`]: the whole store as one checksummed file: export, verify, restore (decision 0030).
//! - `validate` (private): input checks shared by both backends.
//! - `job_events` (private): the folding and retention rules of job events (decision 0025).
//! - `event_rows` (private): a call's task events as stored rows, one per run of a task (decision 0072).
#![forbid(unsafe_code)]

pub mod audit;
pub mod bench;
pub mod bench_queries;
pub mod cassandra;
pub mod config;
pub mod crash;
pub mod error;
mod event_rows;
pub mod fence;
mod job_events;
pub mod memory;
pub mod metered;
pub mod secrets;
pub mod snapshot;
pub mod sqlite;
pub mod store;
pub mod types;
mod validate;

pub use audit::{AuditQuery, AuditRecord};
pub use config::{CassandraConfig, CassandraTls, ConsistencyLevel, SqliteConfig, StorageConfig, open};
pub use error::{Result, StoreError};
pub use store::Store;
pub use types::{JobQuery, JobSummary, Page, PluginVersion, TaskCas, TaskRecord, limits};
