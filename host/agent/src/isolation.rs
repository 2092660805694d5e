//! How the agent enforces a run's limits: a cgroup v2 child per run when the
//! agent's own cgroup is delegated to it, else rlimits set by the launch
//! wrapper. Chosen once at start and reported in `Register`.
//!
//! Under cgroup v2 the agent moves itself into a leaf `agent/` of its
//! cgroup (the "no internal processes" rule forbids enabling controllers on
//! a cgroup that holds processes) and creates `runs/<run_id>/` per run. The
//! launch wrapper writes its own pid into the run's `cgroup.procs` before it
//! starts the task, so no `pre_exec` (and no unsafe code) is needed.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Which enforcement the operator asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IsolationChoice {
    /// cgroup v2 when usable, else rlimits.
    #[default]
    Auto,
    /// rlimits even when cgroups would work.
    Rlimits,
}

/// The enforcement in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// A child cgroup per run under `runs` (memory.max, cpu.max, oom_kill
    /// from memory.events).
    CgroupV2 {
        /// The directory holding one cgroup per run.
        runs: PathBuf,
    },
    /// `ulimit -v` (address space) from the run's memory; CPU is not capped
    /// and exceeding memory shows up as allocation failures in the task.
    Rlimits,
}

impl Isolation {
    /// The attribute value the agent reports (`isolation=…`).
    pub fn name(&self) -> &'static str {
        match self {
            Isolation::CgroupV2 { .. } => "cgroup-v2",
            Isolation::Rlimits => "rlimits",
        }
    }

    /// Protocol enum value.
    pub fn proto(&self) -> paceline_proto::agent::v1::IsolationMode {
        match self {
            Isolation::CgroupV2 { .. } => paceline_proto::agent::v1::IsolationMode::CgroupV2,
            Isolation::Rlimits => paceline_proto::agent::v1::IsolationMode::Rlimits,
        }
    }

    /// Detects what this host allows; falls back to rlimits (with a log
    /// line saying why) on any obstacle.
    pub fn detect(choice: IsolationChoice) -> Isolation {
        if choice == IsolationChoice::Rlimits {
            return Isolation::Rlimits;
        }
        match setup_cgroup_v2() {
            Ok(runs) => {
                tracing::info!(runs = %runs.display(), "isolation: cgroup v2");
                Isolation::CgroupV2 { runs }
            }
            Err(why) => {
                tracing::info!(%why, "isolation: rlimits (cgroup v2 not usable)");
                Isolation::Rlimits
            }
        }
    }
}

/// The mount point of the cgroup2 hierarchy, from /proc/self/mountinfo.
fn cgroup2_mount() -> Option<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        if right.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        left.split_whitespace().nth(4).map(PathBuf::from)
    })
}

fn setup_cgroup_v2() -> Result<PathBuf, String> {
    let mount = cgroup2_mount().ok_or("no cgroup2 mount")?;
    let own = fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    let rel = own.lines().find_map(|l| l.strip_prefix("0::")).ok_or("process is not in a cgroup v2 hierarchy")?;
    let dir = mount.join(rel.trim_start_matches('/'));
    let controllers = fs::read_to_string(dir.join("cgroup.controllers"))
        .map_err(|e| format!("{}: {e}", dir.join("cgroup.controllers").display()))?;
    for needed in ["cpu", "memory"] {
        if !controllers.split_whitespace().any(|c| c == needed) {
            return Err(format!("controller `{needed}` not delegated to {} (have: {controllers:?})", dir.display()));
        }
    }
    let write = |path: &Path, value: &str| fs::write(path, value).map_err(|e| format!("{}: {e}", path.display()));
    let mkdir = |path: &Path| match fs::create_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    };
    // Already set up by an earlier agent in this cgroup (we restarted).
    let runs = dir.join("runs");
    if dir.file_name().is_some_and(|n| n == "agent") {
        let parent = dir.parent().ok_or("cgroup has no parent")?;
        let runs = parent.join("runs");
        mkdir(&runs)?;
        write(&runs.join("cgroup.subtree_control"), "+cpu +memory")?;
        return Ok(runs);
    }
    let leaf = dir.join("agent");
    mkdir(&leaf)?;
    let procs = fs::read_to_string(dir.join("cgroup.procs")).map_err(|e| format!("cgroup.procs: {e}"))?;
    for pid in procs.split_whitespace() {
        // Processes may have exited since the read; only the agent itself matters.
        if let Err(e) = fs::write(leaf.join("cgroup.procs"), pid) {
            tracing::debug!(pid, error = %e, "moving a process into the agent leaf cgroup");
        }
    }
    write(&dir.join("cgroup.subtree_control"), "+cpu +memory")?;
    mkdir(&runs)?;
    write(&runs.join("cgroup.subtree_control"), "+cpu +memory")?;
    Ok(runs)
}

/// Creates the cgroup of one run with its limits; returns its directory.
pub(crate) fn create_run_cgroup(
    runs: &Path,
    run_id: &str,
    cpu_millis: u64,
    memory_mib: u64,
) -> std::io::Result<PathBuf> {
    let dir = runs.join(run_id);
    match fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    if memory_mib > 0 {
        fs::write(dir.join("memory.max"), (memory_mib * 1024 * 1024).to_string())?;
        // Without this the kernel swaps instead of enforcing the limit.
        let _ = fs::write(dir.join("memory.swap.max"), "0");
    }
    if cpu_millis > 0 {
        // cpu.max is "<quota> <period>" in microseconds; 1000 millis = one full period.
        fs::write(dir.join("cpu.max"), format!("{} 100000", cpu_millis * 100))?;
    }
    Ok(dir)
}

/// Whether the kernel's OOM killer struck inside the run's cgroup.
pub(crate) fn oom_killed(cgroup: &Path) -> bool {
    fs::read_to_string(cgroup.join("memory.events")).ok().is_some_and(|events| {
        events
            .lines()
            .any(|l| l.strip_prefix("oom_kill ").and_then(|n| n.trim().parse::<u64>().ok()).is_some_and(|n| n > 0))
    })
}

/// Removes a run's cgroup (after its processes are gone).
pub(crate) fn remove_run_cgroup(cgroup: &Path) {
    if let Err(e) = fs::remove_dir(cgroup)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(cgroup = %cgroup.display(), error = %e, "removing a run cgroup");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_cgroup_files_carry_the_limits_and_oom_kills_are_read() {
        // A plain directory stands in for cgroupfs: the files are the API.
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let cg = create_run_cgroup(dir.path(), "r-1", 1500, 64).unwrap_or_else(|e| panic!("{e}"));
        let read = |f: &str| fs::read_to_string(cg.join(f)).unwrap_or_default();
        assert_eq!(read("memory.max"), (64u64 << 20).to_string());
        assert_eq!(read("cpu.max"), "150000 100000");
        assert!(!oom_killed(&cg));
        fs::write(cg.join("memory.events"), "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n").unwrap_or_default();
        assert!(oom_killed(&cg));
    }
}
