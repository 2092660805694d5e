//! The life of one run: sandbox, process start, waiting, kill with grace,
//! health checks, and the terminal update.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use paceline_proto::agent::v1 as pb;
use tokio::sync::mpsc;

use paceline_model::gpu;

use super::{Gate, Outcome, Supervisor, Waiter, launch_failed, lock, now_ms, sub};
use crate::health::probe_once;
use crate::isolation::{self, Isolation};
use crate::launch_log;
use crate::process::{self, SpawnSpec};
use crate::record::{self, Phase, RunRecord};
use crate::spec::HealthSpec;
use crate::task_user::{self, TaskUsers};
use paceline_model::task_secret::{LaunchSecret, SecretTarget};

impl Supervisor {
    /// Prepares the sandbox, starts the process and supervises it.
    pub(super) async fn start_and_supervise(
        self,
        run_id: String,
        mut kill_rx: mpsc::UnboundedReceiver<Option<u32>>,
        gate: Arc<tokio::sync::Mutex<Gate>>,
    ) {
        let Some(rec) = self.record(&run_id) else {
            return;
        };
        let state_dir = self.state_dir(&run_id);
        if let Err(e) = rec.save(&state_dir) {
            let outcome = launch_failed(format!("saving the run record: {e}"));
            return self.finish(&run_id, &gate, outcome).await;
        }
        self.emit_progress(&run_id, &gate, pb::RunState::Starting, "LAUNCHED").await;
        if kill_rx.try_recv().is_ok() {
            self.update_record(&run_id, |r| r.kill_requested = true);
            let outcome = Outcome {
                state: pb::RunState::Killed,
                exit_code: None,
                signal: None,
                reason: "KILLED_BY_REQUEST",
                message: "killed before its process started".to_owned(),
            };
            return self.finish(&run_id, &gate, outcome).await;
        }
        let child = match self.start_process(&rec, &state_dir) {
            Ok(child) => child,
            Err(message) => return self.finish(&run_id, &gate, launch_failed(message)).await,
        };
        self.supervise(run_id, Waiter::Child(child), kill_rx, gate).await;
    }

    fn task_env(&self, rec: &RunRecord) -> BTreeMap<String, String> {
        let spec = &rec.spec;
        let mut env = inherited_env();
        if rec.task_uid.is_some() {
            // The agent's home is not the task's (it could not write there)
            // and its user name is not the task's either.
            env.insert("HOME".to_owned(), rec.sandbox.display().to_string());
            env.remove("USER");
            env.remove("LOGNAME");
        }
        env.extend(spec.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        for (name, port) in &rec.ports {
            env.insert(format!("PORT_{}", name.to_ascii_uppercase()), port.to_string());
        }
        env.insert("PACELINE_RUN_ID".to_owned(), spec.run_id.clone());
        env.insert("PACELINE_TASK_ID".to_owned(), spec.task_id.clone());
        env.insert("PACELINE_SANDBOX".to_owned(), rec.sandbox.display().to_string());
        if let Some(volume) = &spec.volume {
            let dir = self.volume_dir(&spec.task_id, &volume.name);
            env.insert("PACELINE_VOLUME".to_owned(), dir.display().to_string());
        }
        if spec.gang.is_some() {
            let file = rec.sandbox.join(paceline_model::gang::PEERS_FILE);
            env.insert("PACELINE_GANG_PEERS_FILE".to_owned(), file.display().to_string());
        }
        if !spec.secrets.is_empty() {
            env.insert("PACELINE_SECRETS_DIR".to_owned(), rec.sandbox.join(SECRETS_DIR).display().to_string());
        }
        for s in &spec.secrets {
            if let SecretTarget::Env(name) = &s.target {
                env.insert(name.clone(), s.value.expose().to_owned());
            }
        }
        if self.inner.cfg.total.gpu_milli > 0 {
            // Also set when empty: a task without GPUs must not see any.
            // Positions in the device list become the devices' indices.
            let devices = gpu::devices_of(&self.inner.cfg.total, &self.inner.cfg.gpu_devices, None);
            let list = rec.gpu_grant().visible_devices(&devices);
            env.insert("CUDA_VISIBLE_DEVICES".to_owned(), list.clone());
            env.insert("NVIDIA_VISIBLE_DEVICES".to_owned(), if list.is_empty() { "none".to_owned() } else { list });
            if !rec.gpus.is_empty() {
                // The share of each device the run may use (1000: whole);
                // the workload honours it (e.g. a memory fraction).
                let grant = rec.gpu_grant();
                env.insert("PACELINE_GPU_MILLI".to_owned(), grant.milli_each.to_string());
                env.extend(mps_limits(&grant, &devices, &self.inner.cfg.gpu_memory_mib));
            }
        }
        env
    }

    fn volume_dir(&self, task_id: &str, name: &str) -> PathBuf {
        self.inner.cfg.data_dir.join("volumes").join(task_id).join(name)
    }

    /// Creates the sandbox (and volume, and cgroup) and starts the wrapper.
    fn start_process(&self, rec: &RunRecord, state_dir: &Path) -> Result<tokio::process::Child, String> {
        let spec = &rec.spec;
        std::fs::create_dir_all(&rec.sandbox)
            .map_err(|e| format!("creating sandbox {}: {e}", rec.sandbox.display()))?;
        // The sandbox is the only thing the run's uid owns (with its secret
        // files and its volume): no other run can enter it.
        if let Some(uid) = rec.task_uid {
            task_user::give(&rec.sandbox, uid, 0o700)
                .map_err(|e| format!("giving sandbox {} to uid {uid}: {e}", rec.sandbox.display()))?;
        }
        if let Some(volume) = &spec.volume {
            let dir = self.volume_dir(&spec.task_id, &volume.name);
            std::fs::create_dir_all(&dir).map_err(|e| format!("creating volume {}: {e}", dir.display()))?;
            if let (Some(uid), TaskUsers::PerRun { first, last, .. }) = (rec.task_uid, &self.inner.cfg.task_users) {
                // Earlier runs of the task had other uids; what they left is this run's now.
                task_user::give_volume(&dir, uid, (*first, *last))
                    .map_err(|e| format!("giving volume {} to uid {uid}: {e}", dir.display()))?;
            }
        }
        write_secret_files(&rec.sandbox, &spec.secrets, rec.task_uid)?;
        if let Some(gang) = &spec.gang {
            write_peers_file(&rec.sandbox, &gang.peers_json, rec.task_uid)?;
        }
        let exit_file = state_dir.join(record::EXIT_FILE);
        let _ = std::fs::remove_file(&exit_file);
        let stop_file = state_dir.join(record::STOP_FILE);
        let _ = std::fs::remove_file(&stop_file);
        let env = self.task_env(rec);
        let program = process::resolve_command(&spec.command, env.get("PATH").map(String::as_str), &rec.sandbox)
            .ok_or_else(|| format!("command: `{}` is not an executable file (looked up in PATH)", spec.command))?;
        let ids = rec.task_ids();
        if let Some(why) = ids.as_ref().and_then(|ids| task_user::unreachable_for(&program, ids)) {
            return Err(format!("command: {why} (tasks run under uids of their own: docs/hosts.md)"));
        }
        let user = match (&self.inner.cfg.task_users, &ids) {
            (TaskUsers::PerRun { setpriv, .. }, Some(ids)) => Some((ids, setpriv.as_path())),
            _ => None,
        };
        let (cgroup, address_space_kib) = match &self.inner.cfg.isolation {
            Isolation::CgroupV2 { runs } => {
                let dir = isolation::create_run_cgroup(
                    runs,
                    &spec.run_id,
                    spec.resources.cpu_millis,
                    spec.resources.memory_mib,
                )
                .map_err(|e| format!("creating the run's cgroup: {e}"))?;
                (Some(dir), None)
            }
            // CUDA maps device and host memory into one address space and
            // reserves far more of it than any memory request, so under
            // `ulimit -v` a GPU run could not start CUDA at all: a run with
            // GPUs gets no address-space cap (docs/hosts.md; cgroup v2 caps
            // its memory properly).
            Isolation::Rlimits if spec.resources.gpu_milli > 0 => (None, None),
            Isolation::Rlimits => (None, (spec.resources.memory_mib > 0).then_some(spec.resources.memory_mib * 1024)),
        };
        let procs = cgroup.as_ref().map(|c| c.join("cgroup.procs"));
        if let Err(e) = launch_log::append(&self.inner.cfg.data_dir, now_ms(), &spec.task_id, &spec.run_id) {
            // The log is evidence for checks, not state: the launch goes on.
            tracing::warn!(run_id = spec.run_id, error = %e, "appending to the launch log");
        }
        let child = process::spawn(&SpawnSpec {
            program: &program,
            args: &spec.args,
            env: &env,
            cwd: &rec.sandbox,
            stdout: &rec.sandbox.join("stdout"),
            stderr: &rec.sandbox.join("stderr"),
            exit_file: &exit_file,
            stop_file: &stop_file,
            cgroup_procs: procs.as_deref(),
            address_space_kib,
            user,
        })
        .map_err(|e| format!("starting `{}`: {e}", program.display()))?;
        let pid = child.id().ok_or("the process exited before its pid was read")?;
        let start_time = process::proc_stat(pid).map(|(_, start)| start);
        let updated = self.update_record(&spec.run_id, |r| {
            r.pid = Some(pid);
            r.start_time = start_time;
            r.cgroup = cgroup;
            r.phase = Phase::Running;
        });
        if let Some(updated) = updated
            && let Err(e) = updated.save(state_dir)
        {
            // The process runs; only re-adoption after a restart is at risk.
            tracing::error!(run_id = spec.run_id, error = %e, "saving the run record after start");
        }
        Ok(child)
    }

    /// Reports RUNNING, runs health checks, handles kills, and finishes the
    /// run when its process is gone.
    pub(super) async fn supervise(
        self,
        run_id: String,
        mut waiter: Waiter,
        mut kill_rx: mpsc::UnboundedReceiver<Option<u32>>,
        gate: Arc<tokio::sync::Mutex<Gate>>,
    ) {
        let Some(rec) = self.record(&run_id) else {
            return;
        };
        let Some(pid) = rec.pid else { return };
        let adopted = matches!(waiter, Waiter::Adopted { .. });
        if !adopted {
            self.emit_progress(&run_id, &gate, pb::RunState::Running, "STARTED").await;
        }
        let health = rec.spec.health_check.clone().map(|hc| {
            let sup = self.clone();
            let gate = gate.clone();
            let rec = rec.clone();
            tokio::spawn(async move { sup.health_loop(rec, hc, gate).await })
        });
        let launch_grace = match rec.spec.kill_grace_period_secs {
            0 => self.inner.cfg.default_kill_grace,
            s => Duration::from_secs(u64::from(s)),
        };
        let mut kill_deadline: Option<tokio::time::Instant> = None;
        let mut sent_kill = false;
        if rec.kill_requested && self.leader_is_ours(&waiter) {
            // Re-adopted while being killed: finish the job right away.
            process::signal_group(pid, Signal::SIGKILL);
            sent_kill = true;
        }
        let status = loop {
            tokio::select! {
                status = waiter.wait() => break status,
                Some(grace) = kill_rx.recv(), if kill_deadline.is_none() => {
                    let grace = grace.map(|s| Duration::from_secs(u64::from(s))).unwrap_or(launch_grace);
                    if let Some(updated) = self.update_record(&run_id, |r| r.kill_requested = true)
                        && let Err(e) = updated.save(&self.state_dir(&run_id)) {
                        tracing::warn!(run_id, error = %e, "persisting the kill request");
                    }
                    // Checked at launch; a record from an older agent has none.
                    let first = process::stop_signal(&rec.spec.stop_signal).unwrap_or(Signal::SIGTERM);
                    tracing::info!(run_id, pid, grace_ms = grace.as_millis() as u64, signal = %first, "killing run");
                    if self.leader_is_ours(&waiter) {
                        // Written before the signal, for a task process not
                        // yet past the wrapper's trap (`process::WRAPPER`).
                        let stop_file = self.state_dir(&run_id).join(record::STOP_FILE);
                        let name = first.as_str().trim_start_matches("SIG");
                        if let Err(e) = std::fs::write(&stop_file, format!("{name}\n")) {
                            tracing::warn!(run_id, error = %e, "writing the stop file");
                        }
                        process::signal_group(pid, first);
                    }
                    kill_deadline = Some(tokio::time::Instant::now() + grace);
                }
                _ = async { if let Some(d) = kill_deadline { tokio::time::sleep_until(d).await } }, if kill_deadline.is_some() && !sent_kill => {
                    tracing::info!(run_id, pid, "grace period over: SIGKILL");
                    if self.leader_is_ours(&waiter) {
                        process::signal_group(pid, Signal::SIGKILL);
                    }
                    sent_kill = true;
                }
            }
        };
        // Whatever the task left behind in its group goes with it. Only for
        // our own child: after an adopted leader is gone, its pid (= pgid)
        // might already name someone else's group.
        if !adopted {
            process::signal_group(pid, Signal::SIGKILL);
        }
        if let Some(h) = health {
            h.abort();
        }
        let status = match status {
            Some(s) => Some(s),
            None => record::read_exit_file(&self.state_dir(&run_id)).map(Ok),
        };
        let rec = self.record(&run_id).unwrap_or(rec);
        let mut outcome = self.outcome_from(&rec, status);
        if outcome.state == pb::RunState::Killed && outcome.signal.is_none() && status.is_none() && sent_kill {
            outcome.signal = Some(Signal::SIGKILL as i32);
        }
        self.finish(&run_id, &gate, outcome).await;
    }

    /// Whether signalling the run's process group reaches the run: always
    /// for our child (not reaped yet, so its pid cannot be reused); for an
    /// adopted process only while `/proc` still shows the same start time.
    fn leader_is_ours(&self, waiter: &Waiter) -> bool {
        match waiter {
            Waiter::Child(_) => true,
            Waiter::Adopted { pid, start_time, .. } => process::still_running(*pid, *start_time),
        }
    }

    /// Reads the end of a process: the wrapper's code or signal, the kill
    /// request and the cgroup's OOM counter.
    pub(super) fn outcome_from(&self, rec: &RunRecord, status: Option<Result<i32, i32>>) -> Outcome {
        let (exit_code, signal) = match status {
            Some(Ok(code)) => process::decode_wrapper_code(code),
            Some(Err(sig)) => (None, Some(sig)),
            None => (None, None),
        };
        let describe = match (exit_code, signal) {
            (Some(c), _) => format!("exited with status {c}"),
            (None, Some(s)) => {
                format!("ended by signal {s} ({})", Signal::try_from(s).map(|s| s.as_str()).unwrap_or("unknown"))
            }
            (None, None) => "ended with an unknown status".to_owned(),
        };
        let oom = rec.cgroup.as_deref().is_some_and(isolation::oom_killed);
        let (state, reason, message) = if rec.kill_requested {
            (pb::RunState::Killed, "KILLED_BY_REQUEST", format!("killed on request; {describe}"))
        } else if oom {
            (
                pb::RunState::Failed,
                "MEMORY_LIMIT",
                format!(
                    "exceeded its memory limit of {} MiB (cgroup oom_kill); {describe}",
                    rec.spec.resources.memory_mib
                ),
            )
        } else if status.is_none() {
            (
                pb::RunState::Lost,
                "AGENT_RESTARTED",
                "the process ended while the agent could not wait for it and left no status".to_owned(),
            )
        } else if exit_code == Some(0) {
            (pb::RunState::Succeeded, "EXITED", describe)
        } else if exit_code == Some(125) && rec.pid.is_some() && self.wrapper_setup_failed(rec) {
            (pb::RunState::Failed, "LAUNCH_FAILED", "the launch wrapper could not apply the run's limits".to_owned())
        } else if signal.is_some() {
            (pb::RunState::Failed, "SIGNALED", describe)
        } else {
            let hint = self.memory_hint(rec);
            (pb::RunState::Failed, "EXITED", format!("{describe}{hint}"))
        };
        Outcome { state, exit_code, signal, reason, message }
    }

    fn wrapper_setup_failed(&self, rec: &RunRecord) -> bool {
        read_head(&rec.sandbox.join("stderr"), 4096)
            .lines()
            .next()
            .is_some_and(|l| l.contains("ulimit") || l.contains("cgroup.procs"))
    }

    /// Under rlimits, a task that ran into its address-space limit fails an
    /// allocation rather than being killed; say so when its stderr shows it.
    fn memory_hint(&self, rec: &RunRecord) -> &'static str {
        if !matches!(self.inner.cfg.isolation, Isolation::Rlimits) || rec.spec.resources.memory_mib == 0 {
            return "";
        }
        let tail = read_tail(&rec.sandbox.join("stderr"), 4096);
        let needles = ["MemoryError", "Cannot allocate memory", "out of memory", "bad_alloc", "memory allocation"];
        if needles.iter().any(|n| tail.contains(n)) {
            " (its stderr shows an allocation failure: likely over its memory limit, enforced as an address-space rlimit)"
        } else {
            ""
        }
    }

    /// Emits the terminal update (once) and releases what the run held.
    /// The in-memory state changes first, so whoever sees the update also
    /// sees the run ended and its resources free.
    pub(super) async fn finish(&self, run_id: &str, gate: &tokio::sync::Mutex<Gate>, outcome: Outcome) {
        let mut g = gate.lock().await;
        if g.ended {
            return;
        }
        g.ended = true;
        let ended_as = outcome.state.as_str_name().trim_start_matches("RUN_STATE_").to_owned();
        let rec = {
            let mut st = lock(&self.inner.state);
            let Some(entry) = st.runs.get_mut(run_id) else {
                return;
            };
            entry.record.phase = Phase::Ended;
            entry.record.ended_as = Some(ended_as);
            entry.record.ended_at_ms = Some(now_ms());
            entry.kill_tx = None;
            let rec = entry.record.clone();
            st.ports.release(rec.ports.values().map(|p| u32::from(*p)));
            gpu::apply(&mut st.gpus, &rec.gpu_grant(), true);
            sub(&mut st.used, &rec.spec.resources);
            rec
        };
        if let Some(uid) = rec.task_uid {
            // Before the end is told: nothing of the run may outlive it under
            // its uid, and a later run that gets the same uid must not enter
            // its directories.
            let setpriv = match &self.inner.cfg.task_users {
                TaskUsers::PerRun { setpriv, .. } => setpriv.clone(),
                TaskUsers::Agent { .. } => PathBuf::from("/usr/bin/setpriv"),
            };
            // A named user (`user:`) may have other runs and processes on
            // this host: `kill -1` as it would reach them too, so only this
            // run's processes are killed (its cgroup, or its tag).
            // A per-run uid whose lock another agent of the host holds now
            // (this run ended while its agent was down, and the uid went to
            // that agent's run since) is not this run's any more: `kill -1`
            // as it would kill the other agent's task.
            let ours = lock(&self.inner.state).uids.as_ref().is_none_or(|uids| uids.is_ours(uid));
            match (&rec.spec.user, ours) {
                (None, true) => task_user::kill_leftovers(uid, &setpriv).await,
                (None, false) => {
                    tracing::warn!(
                        run_id,
                        uid,
                        "the run's uid is another agent's now: nothing running as it is killed"
                    );
                }
                (Some(_), _) => task_user::kill_run_leftovers(uid, &rec.spec.run_id, rec.cgroup.as_deref()).await,
            }
            task_user::take_back(&rec.sandbox);
            if let Some(volume) = &rec.spec.volume {
                task_user::take_back(&self.volume_dir(&rec.spec.task_id, &volume.name));
            }
            if let (Some(uids), None) = (lock(&self.inner.state).uids.as_mut(), &rec.spec.user) {
                uids.release(uid);
            }
        }
        self.emit(&rec, &g, outcome.state, Some(&outcome), outcome.reason, &outcome.message);
        if let Err(e) = rec.save(&self.state_dir(run_id)) {
            tracing::error!(run_id, error = %e, "saving the ended run record");
        }
        if let Some(cgroup) = &rec.cgroup {
            isolation::remove_run_cgroup(cgroup);
        }
        // Secret files live no longer than their run; the sandbox (logs)
        // stays for garbage collection. Also after a restart, when the
        // record no longer knows which secrets the run had.
        let secrets = rec.sandbox.join(SECRETS_DIR);
        if secrets.exists()
            && let Err(e) = std::fs::remove_dir_all(&secrets)
        {
            tracing::error!(run_id, error = %e, "removing the run's secret files");
        }
    }

    async fn health_loop(self, rec: RunRecord, hc: HealthSpec, gate: Arc<tokio::sync::Mutex<Gate>>) {
        let env = self.task_env(&rec);
        let ids = rec.task_ids();
        tokio::time::sleep(Duration::from_secs(u64::from(hc.initial_delay_secs))).await;
        let timeout = Duration::from_secs(u64::from(hc.timeout_secs));
        let interval = Duration::from_secs(u64::from(hc.interval_secs));
        let mut failures = 0u32;
        loop {
            let result = probe_once(&hc.probe, &rec.ports, &rec.sandbox, &env, ids.as_ref(), timeout).await;
            let verdict = match &result {
                Ok(()) => {
                    failures = 0;
                    Some(true)
                }
                Err(_) => {
                    failures += 1;
                    (failures >= hc.max_consecutive_failures).then_some(false)
                }
            };
            if let Some(healthy) = verdict {
                let mut g = gate.lock().await;
                if g.ended {
                    return;
                }
                if g.healthy != Some(healthy) {
                    g.healthy = Some(healthy);
                    let message = match &result {
                        Ok(()) => "health check passed".to_owned(),
                        Err(why) => {
                            format!("{failures} consecutive health check failures; last: {why}")
                        }
                    };
                    let current = self.record(&rec.spec.run_id).unwrap_or_else(|| rec.clone());
                    self.emit(&current, &g, pb::RunState::Running, None, "HEALTH_CHANGED", &message);
                }
            }
            tokio::time::sleep(interval).await;
        }
    }
}

fn read_tail(path: &Path, bytes: u64) -> String {
    let Ok(mut file) = open_task_file(path) else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(bytes)));
    let mut buf = Vec::new();
    let _ = file.take(bytes).read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// The first `bytes` of a file the task could have replaced.
fn read_head(path: &Path, bytes: u64) -> String {
    let mut buf = Vec::new();
    if let Ok(file) = open_task_file(path) {
        let _ = file.take(bytes).read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// Opens, for reading, a file in a sandbox the task owns: the task may have
/// replaced it with a symlink (to the agent's key, say) or a FIFO (to stall
/// the agent), so links are not followed and only a regular file is read.
pub(super) fn open_task_file(path: &Path) -> std::io::Result<std::fs::File> {
    use nix::fcntl::OFlag;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits())
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"));
    }
    Ok(file)
}

/// The directory of a run's secret files, inside its sandbox.
const SECRETS_DIR: &str = "secrets";

/// Writes a run's file secrets into `<sandbox>/secrets/` (mode 0700), each
/// file mode 0400; under a uid of the run's own, both are the uid's and the
/// directory is 0500. Errors name the secret, never its value.
/// Writes a gang member's peers file (`PACELINE_GANG_PEERS_FILE`) into the
/// sandbox: readable by the run, written by nobody (the list is the
/// manager's, and a run that rewrote it would mislead only itself, but a
/// read-only file says so).
fn write_peers_file(sandbox: &Path, peers_json: &str, uid: Option<u32>) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = sandbox.join(paceline_model::gang::PEERS_FILE);
    // A run restarted in the same sandbox (never: run ids are unique) or a
    // leftover would make create_new fail; the file is the launch's.
    let _ = std::fs::remove_file(&path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(&path)
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    f.write_all(peers_json.as_bytes()).map_err(|e| format!("writing {}: {e}", path.display()))?;
    if let Some(uid) = uid {
        std::os::unix::fs::fchown(&f, Some(uid), Some(uid)).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}

fn write_secret_files(sandbox: &Path, secrets: &[LaunchSecret], uid: Option<u32>) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if secrets.iter().all(|s| !matches!(s.target, SecretTarget::File(_))) {
        return Ok(());
    }
    let dir = sandbox.join(SECRETS_DIR);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("creating {}: {e}", dir.display()))?;
    for s in secrets {
        let SecretTarget::File(name) = &s.target else { continue };
        let path = dir.join(name);
        let _ = std::fs::remove_file(&path);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o400)
            .open(&path)
            .map_err(|e| format!("writing secret {}: {e}", s.name))?;
        f.write_all(s.value.expose().as_bytes()).map_err(|e| format!("writing secret {}: {e}", s.name))?;
        if let Some(uid) = uid {
            std::os::unix::fs::fchown(&f, Some(uid), Some(uid))
                .map_err(|e| format!("writing secret {}: {e}", s.name))?;
        }
    }
    if let Some(uid) = uid {
        task_user::give(&dir, uid, 0o500).map_err(|e| format!("giving {} to uid {uid}: {e}", dir.display()))?;
    }
    Ok(())
}

/// What a task gets of the agent's own environment: where programs are and
/// the locale, nothing else. The rest (an agent's token file location, its
/// proxy credentials, whatever its service manager set) stays with the agent.
const INHERITED: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TZ", "TMPDIR"];

/// `PATH` when the agent has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

fn inherited_env() -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> =
        INHERITED.iter().filter_map(|k| std::env::var(k).ok().map(|v| ((*k).to_owned(), v))).collect();
    env.entry("PATH".to_owned()).or_insert_with(|| DEFAULT_PATH.to_owned());
    env
}

/// NVIDIA MPS limits for a share of one device: the compute share in
/// percent, rounded up (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`), and, when the
/// device's memory is known, its part of it (`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`,
/// `<device index>=<MiB>M`, rounded down so shares never add up to more than
/// the device). They take effect only when the process is a client of an
/// MPS control daemon; without one CUDA ignores them. Whole devices get
/// none (nothing to share).
pub(crate) fn mps_limits(
    grant: &gpu::GpuGrant,
    devices: &[gpu::GpuDevice],
    memory_mib: &[u64],
) -> Vec<(String, String)> {
    let [position] = grant.devices[..] else { return Vec::new() };
    let milli = u64::from(grant.milli_each);
    if milli == 0 || milli >= paceline_model::resources::GPU_MILLI {
        return Vec::new();
    }
    let mut out = vec![("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_owned(), milli.div_ceil(10).to_string())];
    let memory = memory_mib.get(position as usize).copied().unwrap_or(0);
    if let (Some(device), true) = (devices.get(position as usize), memory > 0) {
        let share = memory.saturating_mul(milli) / paceline_model::resources::GPU_MILLI;
        out.push(("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_owned(), format!("{}={share}M", device.index)));
    }
    out
}
