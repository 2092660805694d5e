//! # paceline-sim
//!
//! The policy workbench's library half: everything about a replay that does
//! not need a cluster. The runner that drives the real roles on a virtual
//! clock is the crate `paceline-sim-runner` (`host/sim-runner`), which
//! needs the assembled roles of `paceline-server`; this crate must not
//! depend on either.
//!
//! ```text
//!  public traces (CSV) ──import──┐
//!  seeded generator ─────────────┼──▶ trace (JSON lines, v1) ──parse──▶ runner (sim-runner)
//!  live cluster (paceline trace record) ┘                                  │ observes
//!                                                                          ▼
//!                    terminal table / JSON / HTML+SVG ◀──render── Report ◀── Observed
//! ```
//!
//! - **Owns**: the trace format and its one reader ([`trace`], [`parse`]:
//!   every error names the line and the field), the generators
//!   ([`generate`]), the importers ([`import`]), the report ([`report`]:
//!   figures from observations, deterministic) and its renderings
//!   ([`render`]).
//! - **Receives**: bytes (traces, CSV), generator settings, and a runner's
//!   [`report::Observed`].
//! - **Hands on**: trace events in time order, reports.
//! - **Must not**: run or reach a cluster, read the wall clock or a random
//!   source other than its own seeded [`rng`], or depend on tokio, wasmtime,
//!   the runner or the binary crate.
//!
//! # Layout
//! - [`trace`]: the format's types and its writer.
//! - [`parse`]: the streaming reader and its errors.
//! - [`rng`]: SplitMix64, fixed by this crate.
//! - [`generate`]: seeded synthetic traces.
//! - [`import`]: Alibaba GPU 2023 (openb) and Alibaba 2018 batch.
//! - [`record`]: a live cluster's records → a trace.
//! - [`report`]: observations → figures.
//! - [`render`]: figures → table, HTML with SVG charts, comparisons.
#![forbid(unsafe_code)]

pub mod generate;
pub mod import;
pub mod parse;
pub mod record;
pub mod render;
pub mod report;
pub mod rng;
pub mod trace;

pub use parse::{Reader, TraceError};
pub use report::{Observed, Report};
pub use trace::{Event, Header, Timed};
