//! Which OS user a task runs as (decision 0047).
//!
//! An agent that runs as root gives every run a uid of its own from a
//! configured range (70000–79999 by default; gid = uid, no supplementary
//! groups). Processes of different uids cannot read each other's
//! `/proc/<pid>/environ` (that needs the same uid or ptrace rights), and the
//! run's sandbox, secret files and volume are the only things its uid owns.
//! The launch wrapper stays root (it writes the exit status into the agent's
//! private state dir and moves itself into the run's cgroup) and starts the
//! task through `setpriv`; health-check commands run as the run's uid too.
//!
//! An agent that cannot switch users (not root, no `setpriv`, a data dir
//! other users cannot reach) runs tasks as itself, as before, and says so: a
//! WARN line at start and the host attribute `task_user=same-as-agent`.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// First uid of the default range.
pub const DEFAULT_FIRST_UID: u32 = 70_000;
/// Last uid of the default range.
pub const DEFAULT_LAST_UID: u32 = 79_999;

/// The host attribute that reports how tasks are separated from the agent.
pub const ATTRIBUTE: &str = "task_user";

/// What the operator asks for (`task_user` in the agent's config).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskUserChoice {
    /// A uid of its own per run where the agent can switch users; else the
    /// agent's own user, with a warning.
    #[default]
    Auto,
    /// A uid of its own per run; the agent refuses to start if it cannot.
    PerRun,
    /// The agent's own user (every task can read every other task's
    /// environment and files, and the agent's key), with a warning.
    Agent,
}

/// The users tasks run as on this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskUsers {
    /// Each run gets a uid of `first..=last` that no live run holds.
    PerRun {
        /// First uid of the range.
        first: u32,
        /// Last uid of the range (inclusive).
        last: u32,
        /// The `setpriv` the launch wrapper starts tasks through.
        setpriv: PathBuf,
        /// The host-wide uid locks ([`LOCK_DIR`]).
        locks: PathBuf,
    },
    /// Tasks run as the agent's own user.
    Agent {
        /// Why (asked for, or what kept the agent from switching users).
        why: String,
    },
}

impl TaskUsers {
    /// The value of the host attribute [`ATTRIBUTE`].
    pub fn attribute(&self) -> &'static str {
        match self {
            TaskUsers::PerRun { .. } => "per-run-uid",
            TaskUsers::Agent { .. } => "same-as-agent",
        }
    }

    /// Whether runs get uids of their own.
    pub fn per_run(&self) -> bool {
        matches!(self, TaskUsers::PerRun { .. })
    }

    /// What this agent can do for `choice`; an error only when `per-run`
    /// was asked for and cannot be had (the reason).
    pub fn detect(choice: TaskUserChoice, first: u32, last: u32, data_dir: &Path) -> Result<TaskUsers, String> {
        if choice == TaskUserChoice::Agent {
            return Ok(TaskUsers::Agent { why: "task_user: agent in the agent's configuration".to_owned() });
        }
        match per_run_obstacle(first, last, data_dir) {
            Ok((setpriv, locks)) => Ok(TaskUsers::PerRun { first, last, setpriv, locks }),
            Err(why) if choice == TaskUserChoice::PerRun => Err(format!("task_user: per-run: {why}")),
            Err(why) => Ok(TaskUsers::Agent { why }),
        }
    }
}

/// `setpriv`'s path and the uid lock directory when runs can get uids of
/// their own, else why not.
fn per_run_obstacle(first: u32, last: u32, data_dir: &Path) -> Result<(PathBuf, PathBuf), String> {
    // The launch wrapper is a separate program: it must be root to keep the
    // right to switch users across exec (capabilities would not survive it).
    if !nix::unistd::geteuid().is_root() {
        return Err(format!("the agent runs as uid {}, not root, so it cannot switch users", nix::unistd::geteuid()));
    }
    if first == 0 || first > last || last > i32::MAX as u32 {
        return Err(format!("the uid range {first}-{last} is not a range of ordinary uids (1 to {})", i32::MAX));
    }
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv", "/usr/sbin/setpriv", "/sbin/setpriv"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
        .ok_or("no setpriv (util-linux) in /usr/bin or /bin to start tasks under their own uid")?;
    // Tasks reach their sandbox, volume and secrets by absolute path
    // (PACELINE_SANDBOX, …): every directory above the data dir must let
    // other users through.
    let dir = std::fs::canonicalize(data_dir).map_err(|e| format!("{}: {e}", data_dir.display()))?;
    for ancestor in dir.ancestors().skip(1) {
        let mode = ancestor.metadata().map_err(|e| format!("{}: {e}", ancestor.display()))?.permissions().mode();
        if mode & 0o001 == 0 {
            return Err(format!(
                "{} (above the data dir) is mode {:04o}: tasks under other uids could not reach their sandboxes (make it o+x, or move the data dir)",
                ancestor.display(),
                mode & 0o7777
            ));
        }
    }
    let locks = PathBuf::from(LOCK_DIR);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&locks)
        .map_err(|e| format!("creating the uid lock directory {}: {e}", locks.display()))?;
    Ok((setpriv, locks))
}

/// The uid a launch's `user` (a name or a uid its job's pool allowed) is
/// on this host, or why this agent will not run the task as it: it cannot
/// switch users, the name is unknown here, or the uid is root, the agent's
/// own or one of its per-run range (which other runs get). The task is
/// never run as anyone else instead.
pub(crate) fn named_uid(user: &str, users: &TaskUsers) -> Result<u32, String> {
    let range = match users {
        TaskUsers::PerRun { first, last, .. } => (*first, *last),
        TaskUsers::Agent { why } => {
            return Err(format!(
                "this agent cannot run tasks as `{user}` ({why}); it refuses rather than run the task as itself"
            ));
        }
    };
    let uid = match user.parse::<u32>() {
        Ok(uid) => uid,
        Err(_) => match nix::unistd::User::from_name(user) {
            Ok(Some(u)) => u.uid.as_raw(),
            Ok(None) => return Err(format!("there is no user `{user}` on this host")),
            Err(e) => return Err(format!("looking up user `{user}`: {e}")),
        },
    };
    if uid == 0 {
        return Err(format!("`{user}` is uid 0 (root): tasks never run as root"));
    }
    if uid == nix::unistd::geteuid().as_raw() {
        return Err(format!("`{user}` is the agent's own uid {uid}: tasks never run as the agent"));
    }
    if (range.0..=range.1).contains(&uid) {
        return Err(format!(
            "`{user}` is uid {uid}, in this agent's per-run uid range {}-{}: it would share a uid with other runs",
            range.0, range.1
        ));
    }
    Ok(uid)
}

/// Where agents of one host lock the uids their runs hold (one file per
/// uid, `flock`ed from when a run gets the uid until its leftovers are
/// killed), so that two agents on one host never hand out the same uid at
/// once, even with overlapping ranges.
pub const LOCK_DIR: &str = "/run/paceline/task-uids";

/// Hands out the uids of a range: a uid no live run holds, the one after
/// the last handed out first, so that a uid comes back as late as possible.
#[derive(Debug)]
pub(crate) struct UidPool {
    first: u32,
    last: u32,
    next: u32,
    /// The uids live runs hold, with the lock on each (see [`LOCK_DIR`]).
    held: BTreeMap<u32, Option<std::fs::File>>,
    locks: Option<PathBuf>,
}

impl UidPool {
    /// `locks`: the directory of the host-wide uid locks (`None`: none).
    pub(crate) fn new(first: u32, last: u32, locks: Option<PathBuf>) -> Self {
        Self { first, last, next: first, held: BTreeMap::new(), locks }
    }

    /// The lock of `uid`, if no one else holds it; `Some(None)` without a
    /// lock directory.
    fn lock(&self, uid: u32) -> Option<Option<std::fs::File>> {
        let Some(dir) = &self.locks else { return Some(None) };
        let path = dir.join(uid.to_string());
        let file = match std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "opening a task uid lock");
                return None;
            }
        };
        file.try_lock().ok().map(|()| Some(file))
    }

    /// Marks `uid` held (a run re-adopted after a restart).
    pub(crate) fn hold(&mut self, uid: u32) {
        let lock = self.lock(uid).unwrap_or_else(|| {
            tracing::warn!(uid, "a re-adopted run's uid is locked by another agent of this host");
            None
        });
        self.held.insert(uid, lock);
        if (self.first..=self.last).contains(&uid) && uid >= self.next {
            self.next = if uid == self.last { self.first } else { uid + 1 };
        }
    }

    /// A free uid, or `None` when every uid of the range is held. `busy`:
    /// uids some process runs as (another agent's task, a user's process
    /// where the range was badly chosen): skipped too.
    pub(crate) fn take(&mut self, busy: &BTreeSet<u32>) -> Option<u32> {
        let size = u64::from(self.last - self.first) + 1;
        let mut uid = self.next;
        for _ in 0..size {
            let after = if uid >= self.last { self.first } else { uid + 1 };
            if !self.held.contains_key(&uid)
                && !busy.contains(&uid)
                && let Some(lock) = self.lock(uid)
            {
                self.held.insert(uid, lock);
                self.next = after;
                return Some(uid);
            }
            uid = after;
        }
        None
    }

    /// Whether the processes running as `uid` can only be this agent's
    /// runs': it holds the uid's host-wide lock, or there are no locks.
    /// False for a uid [`hold`](Self::hold) found locked by another agent:
    /// a run that ended while this agent was down let go of its lock, and
    /// another agent of the host may have given the uid to a run of its own
    /// since (it could only when nothing ran as the uid any more).
    pub(crate) fn is_ours(&self, uid: u32) -> bool {
        self.locks.is_none() || matches!(self.held.get(&uid), Some(Some(_)))
    }

    /// Gives `uid` back.
    pub(crate) fn release(&mut self, uid: u32) {
        self.held.remove(&uid);
    }

    /// How many uids the range has.
    pub(crate) fn size(&self) -> u64 {
        u64::from(self.last - self.first) + 1
    }
}

/// Gives `path` (not following a symlink) to `uid` (gid = uid) with `mode`.
pub(crate) fn give(path: &Path, uid: u32, mode: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Gives a volume to the run's `uid`: its top directory (mode 0700) and,
/// below it, every entry a task uid of `range` owns (earlier runs of the
/// task had other uids). Symlinks are changed, never followed; entries of
/// other owners (a hard link to a file of root's, say) and regular files
/// with several links are left alone, so a task cannot get a file it does
/// not own by planting a link to it in its volume.
pub(crate) fn give_volume(dir: &Path, uid: u32, range: (u32, u32)) -> std::io::Result<()> {
    give(dir, uid, 0o700)?;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let path = entry?.path();
            let meta = std::fs::symlink_metadata(&path)?;
            let owned_by_a_task = (range.0..=range.1).contains(&meta.uid());
            if meta.is_dir() {
                stack.push(path.clone());
            }
            if owned_by_a_task && meta.uid() != uid && !(meta.is_file() && meta.nlink() > 1) {
                std::os::unix::fs::lchown(&path, Some(uid), Some(uid))?;
            }
        }
    }
    Ok(())
}

/// Takes `path` back for the agent (mode 0700), so that a later run that
/// gets the same uid cannot enter it. A missing path is fine.
pub(crate) fn take_back(path: &Path) {
    let (uid, gid) = (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw());
    let result = std::os::unix::fs::lchown(path, Some(uid), Some(gid))
        .and_then(|()| std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)));
    if let Err(e) = result
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "taking a run's directory back from its uid");
    }
}

/// Each process's real, effective and saved uids, from `/proc`.
fn process_uids() -> Vec<(u32, Vec<u32>)> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let ids = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
            Some((pid, ids.split_whitespace().take(3).filter_map(|n| n.parse::<u32>().ok()).collect()))
        })
        .collect()
}

/// Pids of processes whose real, effective or saved uid is `uid`.
pub(crate) fn processes_of(uid: u32) -> Vec<u32> {
    process_uids().into_iter().filter(|(_, ids)| ids.contains(&uid)).map(|(pid, _)| pid).collect()
}

/// The uids of `first..=last` some process runs as now.
pub(crate) fn busy_uids(first: u32, last: u32) -> BTreeSet<u32> {
    process_uids().into_iter().flat_map(|(_, ids)| ids).filter(|u| (first..=last).contains(u)).collect()
}

/// Kills whatever still runs as `uid` (a task that left its process group)
/// before the uid goes back to the pool: `kill -KILL -1` as that uid
/// reaches every process of it at once, however fast they fork.
pub(crate) async fn kill_leftovers(uid: u32, setpriv: &Path) {
    for _ in 0..3 {
        let left = processes_of(uid);
        if left.is_empty() {
            return;
        }
        tracing::info!(uid, processes = left.len(), "killing what a run left running under its uid");
        let status = tokio::process::Command::new(setpriv)
            .args(ids_args(&Ids::own(uid)))
            .args(["/bin/sh", "-c", "kill -KILL -1"])
            .env_clear()
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .await;
        if let Err(e) = status {
            tracing::warn!(uid, error = %e, "killing a run's leftover processes");
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let left = processes_of(uid).len();
    if left > 0 {
        tracing::warn!(uid, processes = left, "processes of a run's uid survived kill -1");
    }
}

/// Kills what a run of a named user (`user:`) left running after its
/// process group ended: a task that double-forked or called `setsid`.
/// `kill -1` as the user would reach that user's other runs and its own
/// processes on the host, so only the run's processes are chosen: every
/// process of the run's cgroup when it has one (the kernel keeps forks in
/// it), else every process running as `uid` whose environment still
/// carries the run's `PACELINE_RUN_ID` (what a double fork or `setsid`
/// keeps; a process that execs with an environment of its own escapes).
/// Repeated a few times for processes forked during a pass.
pub(crate) async fn kill_run_leftovers(uid: u32, run_id: &str, cgroup: Option<&Path>) {
    let tag = format!("PACELINE_RUN_ID={run_id}");
    let find = || -> Vec<u32> {
        if let Some(procs) = cgroup.map(|c| c.join("cgroup.procs"))
            && let Ok(text) = std::fs::read_to_string(procs)
        {
            return text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        }
        processes_of(uid)
            .into_iter()
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == tag.as_bytes()))
            })
            .collect()
    };
    for _ in 0..5 {
        let left = find();
        if left.is_empty() {
            return;
        }
        tracing::info!(uid, run_id, processes = left.len(), "killing what a named user's run left running");
        for pid in left {
            // Only pids that fit (a pid above i32::MAX is no process).
            if let Ok(pid) = i32::try_from(pid) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let left = find().len();
    if left > 0 {
        tracing::warn!(uid, run_id, processes = left, "processes of a named user's run survived the kill");
    }
}

/// Who a task runs as: a per-run uid (gid = uid, no supplementary groups)
/// or a named user (`user:`) with the primary gid and the supplementary
/// groups its user database entry gives it, as a login would
/// (`initgroups`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ids {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// Supplementary groups (the primary gid among them, as `getgrouplist`
    /// gives them).
    pub(crate) groups: Vec<u32>,
}

impl Ids {
    /// A per-run uid: gid = uid, no groups.
    pub(crate) fn own(uid: u32) -> Ids {
        Ids { uid, gid: uid, groups: Vec::new() }
    }

    /// A named user's ids: its passwd entry's primary gid and its groups
    /// (`getgrouplist`). A uid without an entry gets gid = uid and no
    /// groups, as a per-run uid does.
    pub(crate) fn of_user(uid: u32) -> Result<Ids, String> {
        let user = match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
            Ok(Some(user)) => user,
            Ok(None) => return Ok(Ids::own(uid)),
            Err(e) => return Err(format!("looking up uid {uid}: {e}")),
        };
        let name = std::ffi::CString::new(user.name.as_bytes())
            .map_err(|_| format!("user name of uid {uid} holds a NUL byte"))?;
        let groups = nix::unistd::getgrouplist(&name, user.gid)
            .map_err(|e| format!("looking up the groups of `{}`: {e}", user.name))?;
        let mut groups: Vec<u32> = groups.into_iter().map(|g| g.as_raw()).collect();
        groups.sort_unstable();
        groups.dedup();
        Ok(Ids { uid, gid: user.gid.as_raw(), groups })
    }

    fn in_group(&self, gid: u32) -> bool {
        gid == self.gid || self.groups.contains(&gid)
    }
}

/// `setpriv`'s arguments that switch to `ids`.
pub(crate) fn ids_args(ids: &Ids) -> Vec<String> {
    let groups = if ids.groups.is_empty() {
        "--clear-groups".to_owned()
    } else {
        let list: Vec<String> = ids.groups.iter().map(u32::to_string).collect();
        format!("--groups={}", list.join(","))
    };
    vec![format!("--reuid={}", ids.uid), format!("--regid={}", ids.gid), groups]
}

/// Why `ids` cannot execute `program`: the first directory on its path it
/// cannot search, or the file itself. `None`: it can.
pub(crate) fn unreachable_for(program: &Path, ids: &Ids) -> Option<String> {
    let uid = ids.uid;
    let allowed = |meta: &std::fs::Metadata, bit: u32| {
        let mode = meta.permissions().mode();
        if meta.uid() == uid {
            mode & (bit << 6) != 0
        } else if ids.in_group(meta.gid()) {
            mode & (bit << 3) != 0
        } else {
            mode & bit != 0
        }
    };
    for dir in program.ancestors().skip(1) {
        let Ok(meta) = dir.metadata() else { continue };
        if !allowed(&meta, 0o1) {
            return Some(format!(
                "{} is mode {:04o} (owner uid {}): the task's uid {uid} cannot reach `{}`",
                dir.display(),
                meta.permissions().mode() & 0o7777,
                meta.uid(),
                program.display()
            ));
        }
    }
    let meta = program.metadata().ok()?;
    (!allowed(&meta, 0o1)).then(|| {
        format!(
            "`{}` is mode {:04o} (owner uid {}): the task's uid {uid} cannot execute it",
            program.display(),
            meta.permissions().mode() & 0o7777,
            meta.uid()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_are_handed_out_in_turn_and_never_twice_at_once() {
        let none = BTreeSet::new();
        let mut pool = UidPool::new(10, 12, None);
        assert_eq!(pool.take(&none), Some(10));
        assert_eq!(pool.take(&none), Some(11));
        pool.release(10);
        // The one after the last handed out comes first, not the freed one.
        assert_eq!(pool.take(&none), Some(12));
        assert_eq!(pool.take(&none), Some(10));
        assert_eq!(pool.take(&none), None, "every uid is held");
        pool.release(11);
        assert_eq!(pool.take(&none), Some(11));
        let mut adopted = UidPool::new(10, 12, None);
        adopted.hold(11);
        assert_eq!(adopted.take(&none), Some(12));
        // A uid some process runs as is skipped.
        assert_eq!(adopted.take(&BTreeSet::from([10])), None);
        assert_eq!(adopted.take(&none), Some(10));
        assert_eq!(adopted.size(), 3);
    }

    #[test]
    fn two_pools_sharing_a_lock_directory_never_hand_out_the_same_uid() {
        let dir = tempfile::tempdir().expect("tempdir");
        let none = BTreeSet::new();
        let mut a = UidPool::new(10, 11, Some(dir.path().to_owned()));
        let mut b = UidPool::new(10, 11, Some(dir.path().to_owned()));
        assert_eq!(a.take(&none), Some(10));
        assert_eq!(b.take(&none), Some(11), "10 is a's");
        assert_eq!(a.take(&none), None, "11 is b's");
        a.release(10);
        assert_eq!(b.take(&none), Some(10), "released: the lock is gone");
    }

    #[test]
    fn a_named_user_is_refused_where_it_would_not_be_separate() {
        let agent = TaskUsers::Agent { why: "task_user: agent in the agent's configuration".into() };
        let err = named_uid("nobody", &agent).expect_err("an agent that cannot switch users");
        assert!(err.contains("cannot run tasks as `nobody`") && err.contains("task_user: agent"), "{err}");
        let per_run =
            TaskUsers::PerRun { first: 70_000, last: 70_009, setpriv: "/usr/bin/setpriv".into(), locks: "/x".into() };
        assert_eq!(named_uid("1500", &per_run), Ok(1500));
        assert!(named_uid("0", &per_run).is_err_and(|e| e.contains("root")));
        assert!(named_uid("70005", &per_run).is_err_and(|e| e.contains("per-run uid range")));
        let me = nix::unistd::geteuid().as_raw();
        assert!(named_uid(&me.to_string(), &per_run).is_err());
        assert!(named_uid("no-such-user-4b1d", &per_run).is_err_and(|e| e.contains("no user `no-such-user-4b1d`")));
        if nix::unistd::User::from_name("nobody").ok().flatten().is_some() {
            assert_eq!(named_uid("nobody", &per_run).map(|u| u > 0), Ok(true));
        }
    }

    #[test]
    fn agent_is_the_agents_own_user_and_says_why() {
        let dir = tempfile::tempdir().expect("tempdir");
        let users = TaskUsers::detect(TaskUserChoice::Agent, 70_000, 79_999, dir.path()).expect("agent");
        assert_eq!(users.attribute(), "same-as-agent");
        // Under a 0700 directory per-run uids could not reach a sandbox.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let data = dir.path().join("data");
        std::fs::create_dir(&data).expect("data dir");
        let refused = TaskUsers::detect(TaskUserChoice::PerRun, 70_000, 79_999, &data);
        assert!(refused.is_err(), "{refused:?}");
    }
}
