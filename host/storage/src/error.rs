//! The one error type every backend returns, so callers handle conflicts,
//! missing records and bad input the same way whatever the database.

/// Result of a store operation.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Why a store operation failed. Every variant says whether anything was
/// written: only [`StoreError::Backend`] and [`StoreError::Unavailable`] may
/// leave the outcome of a write unknown; the rest write nothing.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Compare-and-set lost: the record's version is not the expected one.
    /// Nothing was written; re-read and retry.
    #[error("conflict on {what}: expected version {expected}, found {}", found.map_or("none".to_string(), |v| v.to_string()))]
    Conflict {
        /// The record, e.g. `task job-1/7`.
        what: String,
        /// The version the caller expected.
        expected: u64,
        /// The version in the database, if the driver reported it.
        found: Option<u64>,
    },
    /// The record does not exist.
    #[error("{kind} {id} not found")]
    NotFound {
        /// Kind of record (`job`, `task`, `update`, …).
        kind: &'static str,
        /// Its id.
        id: String,
    },
    /// A record to be created exists already. Nothing was written.
    #[error("{kind} {id} already exists")]
    AlreadyExists {
        /// Kind of record.
        kind: &'static str,
        /// Its id.
        id: String,
    },
    /// A value is larger than the store accepts. Nothing was written.
    #[error("{what} is {size} bytes, more than the limit of {max}")]
    TooLarge {
        /// The value.
        what: String,
        /// Its serialized size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The input is malformed (empty id, bad version, …). Nothing was written.
    #[error("invalid input: {0}")]
    Invalid(String),
    /// The database was written by a newer Paceline (schema version above
    /// what this build knows). Upgrade Paceline; nothing was changed.
    #[error(
        "the {backend} database has schema version {found}, newer than {supported} which this build supports; upgrade Paceline (nothing was changed)"
    )]
    SchemaTooNew {
        /// `sqlite` or `cassandra`.
        backend: &'static str,
        /// Version found in the database.
        found: u32,
        /// Newest version this build knows.
        supported: u32,
    },
    /// A stored record could not be decoded.
    #[error("corrupt record {what}: {reason}")]
    Corrupt {
        /// The record.
        what: String,
        /// Decoder's message.
        reason: String,
    },
    /// The database did not answer in time, even after retries. A write's
    /// outcome is unknown; re-read before retrying.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// Any other database error.
    #[error("storage backend error: {0}")]
    Backend(String),
    /// Another server claimed leadership with a larger epoch: this handle
    /// writes nothing more (see [`crate::Store::claim_leadership`]).
    #[error(
        "fenced: another server leads (the store's leader epoch is {current}, this server's {mine}); nothing was written"
    )]
    Fenced {
        /// The epoch this handle claimed.
        mine: u64,
        /// The larger epoch found in the store.
        current: u64,
    },
}

impl StoreError {
    /// True for a lost compare-and-set.
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Conflict { .. })
    }

    /// True when a later leader has fenced this store handle.
    pub fn is_fenced(&self) -> bool {
        matches!(self, StoreError::Fenced { .. })
    }

    /// True for a missing record.
    pub fn is_not_found(&self) -> bool {
        matches!(self, StoreError::NotFound { .. })
    }

    pub(crate) fn not_found(kind: &'static str, id: impl std::fmt::Display) -> Self {
        StoreError::NotFound { kind, id: id.to_string() }
    }

    pub(crate) fn exists(kind: &'static str, id: impl std::fmt::Display) -> Self {
        StoreError::AlreadyExists { kind, id: id.to_string() }
    }

    pub(crate) fn conflict(what: impl Into<String>, expected: u64, found: Option<u64>) -> Self {
        StoreError::Conflict { what: what.into(), expected, found }
    }
}

impl From<paceline_model::task::SpecError> for StoreError {
    fn from(e: paceline_model::task::SpecError) -> Self {
        StoreError::Invalid(e.to_string())
    }
}
