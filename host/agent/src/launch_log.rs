//! The launch log: `launches.log` in the agent's data dir, one line per
//! process start, appended and never rewritten or garbage-collected.
//!
//! The run records under `state/` are removed by [`Supervisor::gc`] once a
//! run is old, so they cannot prove after the fact that a run id was started
//! only once. This log can: `scripts/torture` reads it from every agent and
//! fails if a (task, run) pair appears twice.
//!
//! A line is `<ms since the epoch> <task id> <run id>`, written with one
//! `write` on a file opened for appending, so lines from concurrent launches
//! never interleave. It is written just before the process is spawned: an
//! agent killed in between leaves a line for a start that did not happen
//! (harmless: that run id is reported LOST and never started again) rather
//! than a start without a line. It is not fsynced: a killed agent loses
//! nothing (the kernel holds the write); only a host crash could, and the
//! run record of that launch is fsynced anyway.
//!
//! [`Supervisor::gc`]: crate::Supervisor::gc

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

/// File name of the launch log inside the data dir.
pub const LAUNCH_LOG_FILE: &str = "launches.log";

/// One parsed line of the launch log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchLine {
    /// When the agent started the process (its clock, ms since the epoch).
    pub at_ms: u64,
    /// The task the run belongs to.
    pub task_id: String,
    /// The run id the manager chose for this start.
    pub run_id: String,
}

/// The launch log's path under a data dir.
pub fn launch_log_path(data_dir: &Path) -> PathBuf {
    data_dir.join(LAUNCH_LOG_FILE)
}

/// Appends one launch. Ids are validated launch fields (no whitespace, see
/// `RunSpec::validated`), so the line splits back unambiguously.
pub(crate) fn append(data_dir: &Path, at_ms: u64, task_id: &str, run_id: &str) -> std::io::Result<()> {
    let line = format!("{at_ms} {task_id} {run_id}\n");
    // The agent's alone: it names every tenant's runs (decision 0047).
    let mut file = std::os::unix::fs::OpenOptionsExt::mode(OpenOptions::new().create(true).append(true), 0o600)
        .open(launch_log_path(data_dir))?;
    file.write_all(line.as_bytes())
}

/// Parses a launch log's text; lines that do not have the three fields (a
/// torn last line after a host crash) are skipped.
pub fn parse(text: &str) -> Vec<LaunchLine> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let at_ms = fields.next()?.parse().ok()?;
            let task_id = fields.next()?.to_owned();
            let run_id = fields.next()?.to_owned();
            if fields.next().is_some() || task_id.is_empty() || run_id.is_empty() {
                return None;
            }
            Some(LaunchLine { at_ms, task_id, run_id })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appended_lines_parse_back_and_torn_lines_are_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        append(dir.path(), 1, "job-1-0", "job-1-0-1").expect("append");
        append(dir.path(), 2, "job-1-0", "job-1-0-2").expect("append");
        let mut text = std::fs::read_to_string(launch_log_path(dir.path())).expect("read");
        text.push_str("3 job-1-1");
        let lines = parse(&text);
        assert_eq!(
            lines,
            vec![
                LaunchLine { at_ms: 1, task_id: "job-1-0".into(), run_id: "job-1-0-1".into() },
                LaunchLine { at_ms: 2, task_id: "job-1-0".into(), run_id: "job-1-0-2".into() },
            ]
        );
    }
}
