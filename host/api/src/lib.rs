//! # paceline-api
//!
//! The public gRPC API (`paceline.v1`): conversions between wire messages
//! and the domain model, with validation at the edge, and (as the pipeline
//! lands) the tonic services over the managers.
//!
//! It owns the wire shape only. It must not hold scheduling state or reach
//! into storage: services call the managers' public methods.
//!
//! - [`convert`]: wire ↔ model, with errors that name the offending field.

pub mod convert;
