//! Fault injection for the deposed-leader test (issue 47): a task runtime
//! write (`cas_tasks`) held between its fence read and its send, as the
//! write of a leader paused at that point (SIGSTOP, a long GC) and resumed
//! after a newer leader claimed. Off unless [`HOLD_RUNTIME_WRITES_ENV`] is
//! set; never set in production. Unset, a write pays one `Option` check.
//!
//! A real write paused there is on the wire as soon as the process runs
//! again. A held write needs a few scheduler turns after the resume, and a
//! resumed leader exits on its own as soon as it sees its lease ran out, so
//! the exit paths call [`let_held_writes_go`] first: without it, whether the
//! late write reaches the database would be a race, and a test of the fence
//! would pass by chance.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// When this variable names a file, every task runtime write (`cas_tasks`)
/// of this process that has passed its fence read waits while the file
/// exists. (Job runtime writes are not held: a job create waits for one.) The
/// store logs a warning at each hold.
pub const HOLD_RUNTIME_WRITES_ENV: &str = "PACELINE_FAULT_HOLD_RUNTIME_WRITES";

/// Writes held or released but not finished yet.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// The file named by [`HOLD_RUNTIME_WRITES_ENV`], if set.
pub(super) fn hold_file_from_env() -> Option<PathBuf> {
    std::env::var_os(HOLD_RUNTIME_WRITES_ENV).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// One write that was held: counted until it is dropped, after the write
/// (and the fence read after it) finished, whatever the outcome.
#[derive(Debug)]
pub(super) struct HeldWrite(bool);

impl Drop for HeldWrite {
    fn drop(&mut self) {
        if self.0 {
            HELD.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Waits while `file` exists, if it does; the returned guard is held until
/// the write is done.
pub(super) async fn hold_while_exists(file: Option<&Path>) -> HeldWrite {
    let Some(file) = file.filter(|f| f.exists()) else {
        return HeldWrite(false);
    };
    HELD.fetch_add(1, Ordering::AcqRel);
    tracing::warn!(
        file = %file.display(),
        "fault injection: a task runtime write past its fence read is held until the file is removed"
    );
    while file.exists() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    HeldWrite(true)
}

/// Blocks the calling thread (an exit path's own) until every held write
/// finished, at most `max`. Returns at once when none was held, that is
/// always outside the fault injection.
pub fn let_held_writes_go(max: Duration) {
    let until = Instant::now() + max;
    while HELD.load(Ordering::Acquire) > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
}
