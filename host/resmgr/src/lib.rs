//! Placeholder: this crate is being written (see its issue).
