//! The persisted record of one run: what a restarted agent needs to find
//! and re-adopt its process. Written atomically (temp file, fsync, rename).

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{AgentError, io_ctx};
use crate::spec::RunSpec;

/// File name of the record inside the run's state directory.
pub(crate) const RECORD_FILE: &str = "record.json";
/// File the launch wrapper writes the task's exit status to.
pub(crate) const EXIT_FILE: &str = "exit";
/// The stop signal's name, written before the signal is sent (the launch
/// wrapper reads it: `process::WRAPPER`).
pub(crate) const STOP_FILE: &str = "stop-signal";

/// Where the run is in its life, as far as the record knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Phase {
    /// Accepted; the process may not exist yet.
    Starting,
    /// The process was started (`pid` is set).
    Running,
    /// A terminal status was emitted; the record is a tombstone that makes a
    /// second launch of the run id a rejection.
    Ended,
}

impl RunRecord {
    /// Who the task runs as; `None`: the agent's own user.
    pub(crate) fn task_ids(&self) -> Option<crate::task_user::Ids> {
        let uid = self.task_uid?;
        Some(match &self.task_groups {
            Some((gid, groups)) => crate::task_user::Ids { uid, gid: *gid, groups: groups.clone() },
            None => crate::task_user::Ids::own(uid),
        })
    }

    /// The devices the run holds, as a grant.
    pub(crate) fn gpu_grant(&self) -> paceline_model::gpu::GpuGrant {
        let each = if self.gpu_milli_each == 0 { 1000 } else { self.gpu_milli_each };
        paceline_model::gpu::GpuGrant {
            devices: self.gpus.clone(),
            milli_each: if self.gpus.is_empty() { 0 } else { each },
        }
    }
}

/// One run's persisted record.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct RunRecord {
    pub(crate) spec: RunSpec,
    pub(crate) phase: Phase,
    pub(crate) ports: BTreeMap<String, u16>,
    /// Positions of the GPU devices the run holds.
    pub(crate) gpus: Vec<u32>,
    /// Milli-GPUs held on each; 0 in records written before GPU shares,
    /// whose devices were whole.
    #[serde(default)]
    pub(crate) gpu_milli_each: u32,
    pub(crate) sandbox: PathBuf,
    /// The wrapper's pid, which is also the process group id.
    pub(crate) pid: Option<u32>,
    /// `/proc/<pid>/stat` start time, so a reused pid is not mistaken for ours.
    pub(crate) start_time: Option<u64>,
    pub(crate) cgroup: Option<PathBuf>,
    /// Set once a kill was requested: the run then ends KILLED.
    pub(crate) kill_requested: bool,
    /// The terminal state name once ended (for the rejection message).
    #[serde(default)]
    pub(crate) ended_as: Option<String>,
    /// When it ended (agent clock, ms since the epoch), for garbage collection.
    #[serde(default)]
    pub(crate) ended_at_ms: Option<u64>,
    /// The uid the task runs as (decision 0047); `None`: the agent's own
    /// (and records written before per-run uids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) task_uid: Option<u32>,
    /// A named user's (`user:`) primary gid and supplementary groups, from
    /// the user database at launch; `None`: gid = uid, no groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) task_groups: Option<(u32, Vec<u32>)>,
}

impl RunRecord {
    pub(crate) fn save(&self, state_dir: &Path) -> Result<(), AgentError> {
        fs::create_dir_all(state_dir).map_err(io_ctx(format!("creating {}", state_dir.display())))?;
        let path = state_dir.join(RECORD_FILE);
        let tmp = state_dir.join(format!("{RECORD_FILE}.tmp"));
        let bytes =
            serde_json::to_vec(self).map_err(|e| AgentError::Corrupt { path: path.clone(), message: e.to_string() })?;
        let ctx = || format!("writing {}", tmp.display());
        let mut file = fs::File::create(&tmp).map_err(io_ctx(ctx()))?;
        file.write_all(&bytes).map_err(io_ctx(ctx()))?;
        file.sync_data().map_err(io_ctx(ctx()))?;
        fs::rename(&tmp, &path).map_err(io_ctx(format!("renaming to {}", path.display())))?;
        Ok(())
    }

    pub(crate) fn load(state_dir: &Path) -> Result<Option<Self>, AgentError> {
        let path = state_dir.join(RECORD_FILE);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_ctx(format!("reading {}", path.display()))(e)),
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| AgentError::Corrupt { path, message: e.to_string() })
    }
}

/// The exit status the wrapper recorded, if it got to.
pub(crate) fn read_exit_file(state_dir: &Path) -> Option<i32> {
    fs::read_to_string(state_dir.join(EXIT_FILE)).ok()?.trim().parse().ok()
}
