//! Key/value labels on hosts (attributes such as `zone`) and tasks.

use std::collections::BTreeMap;

/// Ordered key/value labels. Ordered so that anything built from them
/// (plugin requests, hashes) is deterministic.
pub type Labels = BTreeMap<String, String>;
