//! Security issue 44 item 4 (decision 0047): tasks of two tenants on one
//! agent run under uids of their own, so one cannot read the other's
//! `/proc/<pid>/environ`, its secret files or the agent's key.
//!
//! Needs root (CI and the development machines run tests as root); as
//! another user the agent cannot switch users and the test says so and
//! returns.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;

use paceline_agent::session::Agent;
use paceline_agent::spec::VolumeRef;
use paceline_agent::{AgentConfig, TaskUserChoice};
use paceline_model::secret::Secret;
use paceline_model::task_secret::{LaunchSecret, SecretTarget};
use paceline_proto::agent::v1 as pb;

use crate::common::*;

const ENV_SECRET: &str = "team-b-env-secret-5f1c";
const FILE_SECRET: &str = "team-b-file-secret-9d2e";
const KEY_MARKER: &str = "AGENT-PRIVATE-KEY-3a7b";

/// An agent's configuration that runs each task under a uid of its own,
/// taken from `first..=last`, on a port range of its own.
fn per_run_config(data_dir: std::path::PathBuf, hostname: &str, first: u32, last: u32) -> AgentConfig {
    let range = port_range();
    AgentConfig {
        data_dir,
        hostname: Some(hostname.to_owned()),
        task_user: TaskUserChoice::PerRun,
        task_uid_first: first,
        task_uid_last: last,
        port_range_first: range.0,
        port_range_last: range.1,
        ..AgentConfig::default()
    }
}

fn value(log: &str, key: &str) -> String {
    log.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no `{key}=` in the log:\n{log}"))
        .trim()
        .to_owned()
}

async fn wait_log(sup: &paceline_agent::Supervisor, run_id: &str, needle: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let out = stdout(sup, run_id);
        if out.contains(needle) {
            return out;
        }
        assert!(tokio::time::Instant::now() < deadline, "{run_id} never printed {needle:?}; stdout: {out}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_task_cannot_read_another_tenants_environment_secret_files_or_the_agents_key() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: per-run task uids need the agent to run as root");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // Tasks reach their sandboxes by path: the directories above the data
    // dir must let other users through (a tempdir is 0700).
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let data = tmp.path().join("data");
    // A key left by an agent before this change, in a directory anyone could enter.
    let identity = data.join("identity");
    std::fs::create_dir_all(&identity).unwrap();
    std::fs::set_permissions(&identity, std::fs::Permissions::from_mode(0o755)).unwrap();
    let key = identity.join("agent.key");
    std::fs::write(&key, KEY_MARKER).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    // Where team B's task publishes its pid and its secret file's path, as
    // a task that leaks them would: knowing them must not be enough.
    let shared = tmp.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();

    // Uids of its own, so the uids asserted below are this agent's (agents
    // of one host also lock the uids they hand out).
    let config = per_run_config(data.clone(), "tenants", 71_000, 71_099);
    let agent = Agent::start(config).await.expect("an agent running tasks under uids of their own");
    assert_eq!(agent.host().attributes.get("task_user").map(String::as_str), Some("per-run-uid"));
    let sup = agent.supervisor().clone();
    let mut events = sup.subscribe();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o711, "the data dir: through, not list");
    assert_eq!(mode(&identity), 0o700, "the identity dir is the agent's alone");
    assert_eq!(mode(&data.join("state")), 0o700);

    // Team B: an env secret, a file secret and a volume; publishes what an
    // attacker would want and waits.
    let mut b = sh(
        "team-b-db-0-1",
        &format!(
            "echo $$ > {s}/b.pid; echo $PACELINE_SECRETS_DIR/token > {s}/b.path; \
             cat $PACELINE_SECRETS_DIR/token >/dev/null; echo own_secret=$?; \
             echo kept > $PACELINE_VOLUME/f; echo volume=$?; echo uid=$(id -u); echo ready; sleep 60",
            s = shared.display()
        ),
    );
    b.secrets = vec![
        LaunchSecret {
            name: "db-password".to_owned(),
            target: SecretTarget::Env("DB_PASSWORD".to_owned()),
            value: Secret::new(ENV_SECRET),
        },
        LaunchSecret {
            name: "token".to_owned(),
            target: SecretTarget::File("token".to_owned()),
            value: Secret::new(FILE_SECRET),
        },
    ];
    b.volume = Some(VolumeRef { name: "db".to_owned(), size_mib: 1 });
    sup.launch_spec(b).unwrap();
    let b_log = wait_log(&sup, "team-b-db-0-1", "ready").await;
    assert_eq!(value(&b_log, "own_secret"), "0", "a task reads its own secret file");
    assert_eq!(value(&b_log, "volume"), "0", "a task writes its own volume");

    // Team A: tries the other tenant's environment, secret file and the agent's key.
    let mut a = sh(
        "team-a-web-0-1",
        &format!(
            "pid=$(cat {s}/b.pid); cat /proc/$pid/environ > environ; r=$?; tr '\\0' '\\n' < environ; \
             echo; echo environ=$r; cat $(cat {s}/b.path); r=$?; echo; echo secret=$r; \
             cat {key}; r=$?; echo; echo key=$r; ls {runs}; echo list_runs=$?; echo uid=$(id -u)",
            s = shared.display(),
            key = key.display(),
            runs = data.join("runs").display(),
        ),
    );
    a.resources.memory_mib = 0;
    sup.launch_spec(a).unwrap();
    let ended = wait_terminal(&mut events, "team-a-web-0-1", Duration::from_secs(20)).await;
    assert_eq!(state(ended.last().unwrap()), paceline_proto::agent::v1::RunState::Succeeded, "{ended:#?}");
    let a_log = stdout(&sup, "team-a-web-0-1");
    for (what, key) in [
        ("team B's /proc/<pid>/environ", "environ"),
        ("team B's secret file", "secret"),
        ("the agent's key", "key"),
        ("the list of runs", "list_runs"),
    ] {
        assert_ne!(value(&a_log, key), "0", "team A's task read {what}:\n{a_log}");
    }
    for marker in [ENV_SECRET, FILE_SECRET, KEY_MARKER] {
        assert!(!a_log.contains(marker), "team A's task got {marker}:\n{a_log}");
    }
    let (uid_a, uid_b): (u32, u32) = (value(&a_log, "uid").parse().unwrap(), value(&b_log, "uid").parse().unwrap());
    assert_ne!(uid_a, 0, "team A's task runs as the agent's user");
    assert_ne!(uid_b, 0, "team B's task runs as the agent's user");
    assert_ne!(uid_a, uid_b, "two runs share a uid");
    assert!((71_000..=71_099).contains(&uid_a) && (71_000..=71_099).contains(&uid_b), "{uid_a} {uid_b}");

    // What B's uid owns: its sandbox, its secrets (0500 / 0400), its volume.
    let sandbox = data.join("runs/team-b-db-0-1");
    let meta = |p: &std::path::Path| std::fs::symlink_metadata(p).unwrap();
    assert_eq!((meta(&sandbox).uid(), mode(&sandbox)), (uid_b, 0o700));
    assert_eq!((meta(&sandbox.join("secrets")).uid(), mode(&sandbox.join("secrets"))), (uid_b, 0o500));
    assert_eq!((meta(&sandbox.join("secrets/token")).uid(), mode(&sandbox.join("secrets/token"))), (uid_b, 0o400));
    let volume = data.join("volumes/team-b-db-0/db");
    assert_eq!(meta(&volume).uid(), uid_b);

    sup.kill("team-b-db-0-1", Some(1)).unwrap();
    wait_terminal(&mut events, "team-b-db-0-1", Duration::from_secs(20)).await;
    // Once the run ended its uid owns nothing a later run of that uid could enter.
    let me = nix::unistd::geteuid().as_raw();
    assert_eq!((meta(&sandbox).uid(), mode(&sandbox)), (me, 0o700));
    assert_eq!(meta(&volume).uid(), me);

    // The next run of the task gets its volume, with what the last one left.
    let mut again = sh("team-b-db-0-2", "cat $PACELINE_VOLUME/f && echo more >> $PACELINE_VOLUME/f && echo wrote=$?");
    again.volume = Some(VolumeRef { name: "db".to_owned(), size_mib: 1 });
    sup.launch_spec(again).unwrap();
    let ended = wait_terminal(&mut events, "team-b-db-0-2", Duration::from_secs(20)).await;
    let log = stdout(&sup, "team-b-db-0-2");
    assert_eq!(state(ended.last().unwrap()), paceline_proto::agent::v1::RunState::Succeeded, "{ended:#?} {log}");
    assert!(log.contains("kept") && log.contains("wrote=0"), "{log}");
}

#[tokio::test]
async fn a_symlink_a_task_puts_in_place_of_its_log_is_not_followed_by_the_agent() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: per-run task uids need the agent to run as root");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(data.join("identity")).unwrap();
    let key = data.join("identity/agent.key");
    std::fs::write(&key, KEY_MARKER).unwrap();
    let config = per_run_config(data.clone(), "tenants", 71_100, 71_199);
    let agent = Agent::start(config).await.expect("agent");
    let sup = agent.supervisor().clone();
    let mut events = sup.subscribe();
    // The task owns its sandbox, so it can swap its stdout for a link to
    // the agent's key: a log read must not serve the key.
    let run = sh("swap-0-1", &format!("rm -f stdout; ln -s {} stdout; echo swapped >&2", key.display()));
    sup.launch_spec(run).unwrap();
    wait_terminal(&mut events, "swap-0-1", Duration::from_secs(20)).await;
    let read = sup.read_log("swap-0-1", "stdout", 0, 0);
    let served = read.as_ref().map(|d| String::from_utf8_lossy(&d.data).into_owned()).unwrap_or_default();
    assert!(!served.contains(KEY_MARKER), "the agent served its key as a task log: {read:?}");
}

#[tokio::test]
async fn a_run_re_adopted_after_a_restart_keeps_its_uid_to_itself() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: per-run task uids need the agent to run as root");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let data = tmp.path().join("data");
    let config = per_run_config(data.clone(), "tenants", 71_200, 71_201);
    let first = Agent::start(config.clone()).await.expect("agent");
    first.supervisor().launch_spec(sh("kept-0-1", "echo uid=$(id -u); echo ready; sleep 60")).unwrap();
    let kept = value(&wait_log(first.supervisor(), "kept-0-1", "ready").await, "uid");
    // The agent restarts; the run goes on and is re-adopted.
    first.supervisor().detach();
    drop(first);
    let agent = Agent::start(config).await.expect("agent again");
    let sup = agent.supervisor().clone();
    let mut events = sup.subscribe();
    // The other uid of the range, never the adopted run's.
    sup.launch_spec(sh("next-0-1", "echo uid=$(id -u)")).unwrap();
    wait_terminal(&mut events, "next-0-1", Duration::from_secs(20)).await;
    let next = value(&stdout(&sup, "next-0-1"), "uid");
    assert_ne!(next, kept, "a new run got the uid of a run that still runs");
    sup.kill("kept-0-1", Some(1)).unwrap();
    wait_terminal(&mut events, "kept-0-1", Duration::from_secs(20)).await;
    let sandbox = data.join("runs/kept-0-1");
    assert_eq!(std::fs::metadata(&sandbox).unwrap().uid(), nix::unistd::geteuid().as_raw());
}

/// Whether some process runs as `uid` (real, effective or saved).
fn runs_as(uid: u32) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read_to_string(e.path().join("status")).is_ok_and(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .is_some_and(|ids| ids.split_whitespace().take(3).any(|id| id == uid.to_string()))
        })
    })
}

/// Two agents of one host share the per-run uid range (the default). A run
/// of agent A ends while A is down, which lets go of its uid; agent B gives
/// the uid to a run of its own. When A comes back and finishes its run, the
/// `kill -1` as the uid that ends a run must not reach B's task (it did:
/// CI saw a task of another agent end by SIGKILL).
#[tokio::test]
async fn a_restarted_agent_leaves_alone_the_uid_another_agent_gave_out_while_it_was_down() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: per-run task uids need the agent to run as root");
        return;
    }
    const UID: u32 = 71_300;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let (data_a, data_b) = (tmp.path().join("a"), tmp.path().join("b"));
    let config_a = per_run_config(data_a.clone(), "host-a", UID, UID);
    let a = Agent::start(config_a.clone()).await.expect("agent a");
    a.supervisor().launch_spec(sh("gone-0-1", "echo uid=$(id -u); echo ready; sleep 1")).unwrap();
    let gone = value(&wait_log(a.supervisor(), "gone-0-1", "ready").await, "uid");
    assert_eq!(gone, UID.to_string());
    // Agent a goes down; its run ends meanwhile.
    a.supervisor().detach();
    drop(a);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while runs_as(UID) {
        assert!(tokio::time::Instant::now() < deadline, "agent a's run never ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let b = Agent::start(per_run_config(data_b, "host-b", UID, UID)).await.expect("agent b");
    let sup_b = b.supervisor().clone();
    let mut events_b = sup_b.subscribe();
    sup_b.launch_spec(sh("other-0-1", "echo uid=$(id -u); echo ready; sleep 60")).unwrap();
    let other = value(&wait_log(&sup_b, "other-0-1", "ready").await, "uid");
    assert_eq!(other, UID.to_string(), "agent b gave out the uid agent a's ended run had");

    // Agent a comes back: it finds its run ended and finishes it as it starts.
    let a = Agent::start(config_a).await.expect("agent a again");
    assert_eq!(a.supervisor().outbox().last_state("gone-0-1"), Some(pb::RunState::Succeeded));
    // Agent a takes its sandbox back from the uid all the same: b's run must
    // not read it.
    assert_eq!(std::fs::metadata(data_a.join("runs/gone-0-1")).unwrap().uid(), 0);
    // b's task still runs: it ends only when b kills it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    while let Ok(u) = events_b.try_recv() {
        assert!(!is_terminal(&u), "agent a's restart ended agent b's task: {u:#?}");
    }
    sup_b.kill("other-0-1", Some(1)).unwrap();
    let ended = wait_terminal(&mut events_b, "other-0-1", Duration::from_secs(20)).await;
    assert_eq!(states(&ended).last(), Some(&pb::RunState::Killed), "{ended:#?}");
}

#[tokio::test]
async fn a_launch_naming_a_user_runs_as_it_and_an_agent_that_cannot_switch_users_refuses_it() {
    // Without root, or with `task_user: agent`, the agent runs tasks as
    // itself: a launch naming a user is refused, never run as the agent.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let range = port_range();
    let base = AgentConfig {
        data_dir: tmp.path().join("same"),
        hostname: Some("same".to_owned()),
        task_user: TaskUserChoice::Agent,
        port_range_first: range.0,
        port_range_last: range.0 + 4,
        ..AgentConfig::default()
    };
    let agent = Agent::start(base.clone()).await.expect("agent");
    let mut run = sh("named-0-1", "id -u");
    run.user = Some("nobody".to_owned());
    let err = agent.supervisor().launch_spec(run).expect_err("an agent that cannot switch users");
    assert_eq!(err.field, "user", "{err}");
    assert!(err.message.contains("cannot run tasks as `nobody`") && err.message.contains("task_user: agent"), "{err}");
    drop(agent);

    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped the rest: running a task as a named user needs the agent to run as root");
        return;
    }
    let Ok(Some(nobody)) = nix::unistd::User::from_name("nobody") else {
        eprintln!("skipped the rest: no user `nobody` on this host");
        return;
    };
    let config = AgentConfig {
        port_range_first: range.0 + 5,
        port_range_last: range.1,
        ..per_run_config(tmp.path().join("data"), "named", 71_300, 71_309)
    };
    let agent = Agent::start(config).await.expect("agent");
    let sup = agent.supervisor().clone();
    let mut events = sup.subscribe();
    let mut run = sh("named-0-1", "echo uid=$(id -u) gid=$(id -g); echo ready; sleep 60");
    run.user = Some("nobody".to_owned());
    sup.launch_spec(run).unwrap();
    let log = wait_log(&sup, "named-0-1", "ready").await;
    assert_eq!(value(&log, "uid").split_whitespace().next(), Some(nobody.uid.as_raw().to_string().as_str()), "{log}");
    let sandbox = tmp.path().join("data/runs/named-0-1");
    assert_eq!(std::fs::metadata(&sandbox).unwrap().uid(), nobody.uid.as_raw(), "the sandbox is the user's");
    // Root, the agent's own uid, a uid of the per-run range and an unknown
    // name are refused at launch, naming `user`.
    for (user, why) in [
        ("0", "root"),
        ("71305", "per-run uid range"),
        ("no-such-user-4b1d", "no user `no-such-user-4b1d`"),
        ("root", "root"),
    ] {
        let mut run = sh(&format!("refused-{}-1", user.len()), "true");
        run.user = Some(user.to_owned());
        let err = sup.launch_spec(run).expect_err(user);
        assert_eq!(err.field, "user", "{user}: {err}");
        assert!(err.message.contains(why), "{user}: {err}");
    }
    // Two runs of one named user: the end of one leaves the other running
    // (no `kill -1` as a user other runs share).
    let mut second = sh("named-1-1", "echo done");
    second.user = Some("nobody".to_owned());
    sup.launch_spec(second).unwrap();
    wait_terminal(&mut events, "named-1-1", Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(sup.running().iter().any(|r| r.run_id == "named-0-1"), "the other run of `nobody` was killed");
    sup.kill("named-0-1", Some(1)).unwrap();
    wait_terminal(&mut events, "named-0-1", Duration::from_secs(20)).await;
    assert_eq!(std::fs::metadata(&sandbox).unwrap().uid(), nix::unistd::geteuid().as_raw(), "taken back");
}

/// A user with a primary group of its own (not gid = uid) and one
/// supplementary group, made with `groupadd`/`useradd` when missing. Left
/// in place for later runs (a nologin user without a home); `None` where
/// the tools are missing or fail.
fn grouped_user() -> Option<nix::unistd::User> {
    const USER: &str = "paceline-t44";
    let run = |args: &[&str]| std::process::Command::new(args[0]).args(&args[1..]).status().is_ok_and(|s| s.success());
    if nix::unistd::User::from_name(USER).ok().flatten().is_none() {
        for group in ["paceline-t44-main", "paceline-t44-extra"] {
            if nix::unistd::Group::from_name(group).ok().flatten().is_none() {
                run(&["groupadd", group]);
            }
        }
        // A uid unlike the primary gid, so that gid = uid cannot pass for it.
        let main = nix::unistd::Group::from_name("paceline-t44-main").ok().flatten()?.gid.as_raw();
        let uid = (61_000..61_100)
            .find(|&u| {
                u != main && nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(u)).ok().flatten().is_none()
            })?
            .to_string();
        let args = ["useradd", "-M", "-N", "-u", &uid, "-g", "paceline-t44-main", "-G", "paceline-t44-extra"];
        run(&[&args[..], &["-s", "/usr/sbin/nologin", USER]].concat());
    }
    nix::unistd::User::from_name(USER).ok().flatten()
}

/// Issue 44, named users: a task gets its user's primary group and
/// supplementary groups from the user database (not gid = uid), and what it
/// leaves running outside its process group (a double fork with `setsid`)
/// is killed when its run ends, though other runs may share the user.
#[tokio::test]
async fn a_named_users_task_gets_its_groups_and_leaves_nothing_running() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: running a task as a named user needs the agent to run as root");
        return;
    }
    let Some(user) = grouped_user() else {
        eprintln!("skipped: could not make a user with groups (groupadd/useradd)");
        return;
    };
    let extra = nix::unistd::Group::from_name("paceline-t44-extra").ok().flatten().expect("the extra group");
    assert_ne!(user.uid.as_raw(), user.gid.as_raw(), "the test user's primary gid differs from its uid");
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let config = per_run_config(tmp.path().join("data"), "grouped", 71_400, 71_409);
    let agent = Agent::start(config).await.expect("agent");
    let sup = agent.supervisor().clone();
    let mut events = sup.subscribe();
    // The grandchild leaves the task's session and process group, writes
    // its pid and sleeps; the task ends at once.
    let script = "echo gid=$(id -g); echo groups=$(id -G); \
                  ( setsid sh -c 'echo $$ > \"$HOME/escaped.pid\"; exec sleep 300' & ); \
                  while [ ! -s \"$HOME/escaped.pid\" ]; do sleep 0.05; done; echo ready";
    let mut run = sh("grouped-0-1", script);
    run.user = Some(user.name.clone());
    sup.launch_spec(run).unwrap();
    let log = wait_log(&sup, "grouped-0-1", "ready").await;
    assert_eq!(value(&log, "gid"), user.gid.as_raw().to_string(), "the primary group from passwd: {log}");
    let groups: Vec<u32> = value(&log, "groups").split_whitespace().filter_map(|g| g.parse().ok()).collect();
    assert!(groups.contains(&extra.gid.as_raw()), "the supplementary group {}: {log}", extra.gid);
    wait_terminal(&mut events, "grouped-0-1", Duration::from_secs(20)).await;
    let pid_file = tmp.path().join("data/runs/grouped-0-1/escaped.pid");
    let pid: u32 = std::fs::read_to_string(&pid_file).expect("pid file").trim().parse().expect("a pid");
    // Dead, or a zombie nobody reaped yet (its parent is the host's init).
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while alive() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if alive() {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
        panic!("the escaped process {pid} of the named user's run survived its run");
    }
}
