//! Resources in integer units: cpu in millicores, memory and disk in MiB,
//! GPUs as whole devices, ports as a count. All arithmetic saturates.
//!
//! The type is the plugin contract's (`paceline_plugin_sdk::types::Resources`),
//! re-exported so that the scheduler and plugins agree to the unit.

pub use paceline_plugin_sdk::resources::ScoreScale;
pub use paceline_plugin_sdk::types::Resources;
