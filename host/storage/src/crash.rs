//! Crash points for tests that kill a writer between two of its writes.
//!
//! A store calls [`point`] at the places where a crash matters (between
//! the writes of one logical change). When the environment variable
//! `PACELINE_CRASH_POINT` names that place, the process ends at once, as a
//! SIGKILL would end it: no destructor, no flush, no commit. Unset (always,
//! outside tests), a call costs one load of a cached value.

use std::sync::OnceLock;

/// The variable that arms a crash point.
pub const CRASH_POINT_VAR: &str = "PACELINE_CRASH_POINT";

fn armed() -> Option<&'static str> {
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    ARMED.get_or_init(|| std::env::var(CRASH_POINT_VAR).ok().filter(|v| !v.is_empty())).as_deref()
}

/// Ends the process here if `PACELINE_CRASH_POINT` is `name`.
pub fn point(name: &str) {
    if armed() == Some(name) {
        tracing::error!(point = name, "crash point reached: ending the process");
        // abort, not exit: nothing after this line runs, no buffered
        // write reaches the database.
        std::process::abort();
    }
}
