//! Starting a task process and watching it: the `sh` launch wrapper,
//! process-group signals, and `/proc` reads that tell a re-adopted
//! process from a new one that reused its pid.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

/// The launch wrapper. It stays the task's parent so that the exit status
/// reaches `exit_file` even when the agent is not there to `wait()` (it
/// restarted). Arguments: exit file, cgroup.procs path or "", address-space
/// limit in KiB or "", stop file, then the command and its arguments.
///
/// The `trap` keeps the wrapper alive through the stop signal sent to the
/// whole group (SIGTERM, or the task's `stop_signal`: every name of
/// `paceline_model::task::STOP_SIGNALS`) so it can record the task's status;
/// handlers (unlike ignored signals) reset to default in the task, so the
/// task still sees the signal.
///
/// A stop signal that comes after the `trap` and before the task's process
/// has its default handlers back is taken by the handler and never reaches
/// the task, which would then run until the grace's SIGKILL. So the agent
/// writes the signal's name into the stop file before it signals, and the
/// task's process (a subshell until its `exec`) puts the default handlers
/// back first and then reads the stop file: a signal it missed was written
/// down before it was sent, so the read sees it and the process sends it to
/// the group itself (the wrapper's trap takes its copy).
const WRAPPER: &str = r#"exit_file=$1; cg=$2; as_kib=$3; stop_file=$4; shift 4
if [ -n "$cg" ]; then echo $$ > "$cg" || exit 125; fi
if [ -n "$as_kib" ]; then ulimit -v "$as_kib" || exit 125; fi
trap ':' TERM INT HUP QUIT USR1 USR2 PWR WINCH
(
  trap - TERM INT HUP QUIT USR1 USR2 PWR WINCH
  if [ -s "$stop_file" ]; then read -r sig < "$stop_file"; kill -s "$sig" 0; fi
  exec "$@"
)
code=$?
echo "$code" > "$exit_file"
exit "$code""#;

/// What to start.
#[derive(Debug)]
pub(crate) struct SpawnSpec<'a> {
    pub(crate) program: &'a Path,
    pub(crate) args: &'a [String],
    pub(crate) env: &'a BTreeMap<String, String>,
    pub(crate) cwd: &'a Path,
    pub(crate) stdout: &'a Path,
    pub(crate) stderr: &'a Path,
    pub(crate) exit_file: &'a Path,
    /// Where the agent writes a stop signal's name before sending it (see
    /// `WRAPPER`).
    pub(crate) stop_file: &'a Path,
    pub(crate) cgroup_procs: Option<&'a Path>,
    pub(crate) address_space_kib: Option<u64>,
    /// The run's own uid and the `setpriv` that switches to it; `None`:
    /// the task runs as the agent.
    pub(crate) user: Option<(&'a crate::task_user::Ids, &'a Path)>,
}

/// Starts the wrapper in its own process group (pgid = its pid).
pub(crate) fn spawn(spec: &SpawnSpec<'_>) -> std::io::Result<Child> {
    let stdout = File::options().create(true).append(true).open(spec.stdout)?;
    let stderr = File::options().create(true).append(true).open(spec.stderr)?;
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(WRAPPER)
        // `sh -c` takes the first argument after the script as `$0`.
        .arg("paceline-run")
        .arg(spec.exit_file)
        .arg(spec.cgroup_procs.map(Path::as_os_str).unwrap_or_default())
        .arg(spec.address_space_kib.map(|k| k.to_string()).unwrap_or_default())
        .arg(spec.stop_file);
    // The wrapper stays the agent's user (it writes the exit status into
    // the agent's state dir and joins the cgroup); only the task switches.
    if let Some((ids, setpriv)) = spec.user {
        cmd.arg(setpriv).args(crate::task_user::ids_args(ids)).arg("--");
    }
    cmd.arg(spec.program)
        .args(spec.args)
        // The task's environment is exactly `spec.env` (the supervisor
        // chose what of the agent's own it gets).
        .env_clear()
        .envs(spec.env)
        .current_dir(spec.cwd)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        // The agent may restart; its tasks must not die with it.
        .kill_on_drop(false);
    cmd.spawn()
}

/// The signal named by a task's `stop_signal` (empty: SIGTERM); `None` for
/// a name outside `paceline_model::task::STOP_SIGNALS`.
pub(crate) fn stop_signal(name: &str) -> Option<Signal> {
    if name.is_empty() {
        return Some(Signal::SIGTERM);
    }
    if !paceline_model::task::STOP_SIGNALS.contains(&name) {
        return None;
    }
    name.parse::<Signal>().ok()
}

/// Sends `signal` to the process group led by `pgid`; false when the group
/// is gone.
pub(crate) fn signal_group(pgid: u32, signal: Signal) -> bool {
    let Ok(pgid) = i32::try_from(pgid) else {
        return false;
    };
    if pgid <= 1 {
        // Never signal group 0/1: that would hit the agent or init.
        return false;
    }
    killpg(Pid::from_raw(pgid), signal).is_ok()
}

/// State letter and start time (clock ticks since boot) of a process.
pub(crate) fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses; fields resume
    // after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // After the state come fields 4..; starttime is field 22, i.e. the 19th after state.
    let start: u64 = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Whether the process `pid` that started at `start_time` still runs
/// (a zombie or a different process with the same pid does not count).
pub(crate) fn still_running(pid: u32, start_time: u64) -> bool {
    matches!(proc_stat(pid), Some((state, start)) if start == start_time && state != 'Z' && state != 'X')
}

/// Looks `command` up like `execvp` would; paths with a `/` are taken
/// relative to `cwd`.
pub(crate) fn resolve_command(command: &str, path_var: Option<&str>, cwd: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if command.contains('/') {
        let p = cwd.join(command);
        return executable(&p).then_some(p);
    }
    let path_var = path_var.map(str::to_owned).or_else(|| std::env::var("PATH").ok())?;
    path_var.split(':').filter(|d| !d.is_empty()).map(|d| Path::new(d).join(command)).find(|p| executable(p))
}

/// How the wrapper's exit status reads: `(exit_code, signal)`. The shell
/// reports a task killed by signal N as 128+N; that convention is the only
/// way to tell, so a task that itself exits 129..=192 reads as signalled.
pub(crate) fn decode_wrapper_code(code: i32) -> (Option<i32>, Option<i32>) {
    if (129..=128 + 64).contains(&code) { (None, Some(code - 128)) } else { (Some(code), None) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_start_time() {
        let (state, start) = proc_stat(std::process::id()).unwrap_or(('?', 0));
        assert!(state == 'R' || state == 'S');
        assert!(start > 0);
        assert!(still_running(std::process::id(), start));
        assert!(!still_running(std::process::id(), start + 1));
    }

    /// A stop signal the task's process missed (sent before its default
    /// handlers were back) is in the stop file: the process sends it to
    /// itself before the task starts, so the task does not run until the
    /// grace's SIGKILL. Here the file is written before the launch, the
    /// latest a missed signal's name can be written.
    #[tokio::test]
    async fn a_stop_signal_written_before_the_task_starts_stops_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stop_file = dir.path().join("stop-signal");
        std::fs::write(&stop_file, "TERM\n").expect("stop file");
        let exit_file = dir.path().join("exit");
        let args = vec!["30".to_string()];
        let env = BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
        let mut child = spawn(&SpawnSpec {
            program: Path::new("/bin/sleep"),
            args: &args,
            env: &env,
            cwd: dir.path(),
            stdout: &dir.path().join("stdout"),
            stderr: &dir.path().join("stderr"),
            exit_file: &exit_file,
            stop_file: &stop_file,
            cgroup_procs: None,
            address_space_kib: None,
            user: None,
        })
        .expect("spawn");
        let status = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait())
            .await
            .expect("the task stopped, not left to run its 30 s")
            .expect("wait");
        assert_eq!(status.code(), Some(143), "{status:?}");
        let code = std::fs::read_to_string(&exit_file).expect("exit file");
        assert_eq!(decode_wrapper_code(code.trim().parse().expect("a code")), (None, Some(15)));
    }

    #[test]
    fn decodes_shell_signal_convention() {
        assert_eq!(decode_wrapper_code(3), (Some(3), None));
        assert_eq!(decode_wrapper_code(137), (None, Some(9)));
    }
}
