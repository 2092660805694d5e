//! Security issue 44 item 4 through the binary: how an agent runs tasks
//! (a uid per run, or the agent's own user) is decided at start, said in
//! its log and reported as the host attribute `task_user`, which `paceline
//! host get` shows. The isolation itself is tested in `paceline-agent`'s
//! `task_users` tests.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

mod common;

use common::{Dev, eventually, free_port};

const BIN: &str = env!("CARGO_BIN_EXE_paceline");

fn detect(data_dir: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(["agent", "--detect", "--hostname", "probe", "--data-dir"])
        .arg(data_dir)
        .args(extra)
        .output()
        .expect("paceline agent --detect runs")
}

#[test]
fn an_agent_reports_which_user_its_tasks_run_as() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Under a 0700 directory (a tempdir) another uid could not reach the
    // sandboxes: `auto` falls back to the agent's user and says why.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let hidden = dir.path().join("hidden");
    let out = detect(&hidden, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("\"task_user\": \"same-as-agent\""), "{text}");
    // `per-run` refuses to start without it, naming what is in the way.
    let out = detect(&hidden, &["--task-user", "per-run"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "per-run started anyway: {}", String::from_utf8_lossy(&out.stdout));
    assert!(err.contains("task_user: per-run"), "{err}");
    if nix::unistd::geteuid().is_root() {
        // A data dir others can pass through, and root: a uid per run.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
        let out = detect(&dir.path().join("open"), &["--task-uids", "72000-72099"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("\"task_user\": \"per-run-uid\""), "{text}");
        assert!(text.contains("first: 72000") && text.contains("last: 72099"), "{text}");
        let out = detect(&dir.path().join("open"), &["--task-user", "agent"]);
        assert!(String::from_utf8_lossy(&out.stdout).contains("\"task_user\": \"same-as-agent\""));
    }
}

#[test]
fn dev_runs_tasks_as_its_user_and_its_hosts_say_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = free_port();
    let data = dir.path().join("dev");
    let _dev = Dev::spawn(
        &[
            "dev",
            "--agents",
            "1",
            "--data-dir",
            data.to_str().expect("utf-8"),
            "--api-listen",
            &format!("127.0.0.1:{api}"),
        ],
        "API on",
    );
    let mut host = serde_json::Value::Null;
    eventually(30, "dev-1 registered", || {
        let out = common::cli(api, &["host", "get", "dev-1", "-o", "json"]);
        if !out.status.success() {
            return false;
        }
        host = serde_json::from_slice(&out.stdout).unwrap_or_default();
        true
    });
    assert_eq!(host["attributes"]["task_user"], "same-as-agent", "{host:#}");
    let log = std::fs::read_to_string(data.join("agents/dev-1/agent.log")).unwrap_or_default();
    assert!(
        log.contains("WARN") && log.contains("task isolation: same user as the agent"),
        "no warning in the agent log:\n{log}"
    );
}

/// A `paceline agent`, stopped on drop with what it left running.
struct Agent(std::process::Child, std::path::PathBuf);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
        common::kill_processes_working_under(&self.1);
    }
}

/// The CLI as the holder of `token`.
fn cli_as(api: u16, token: &str, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .env("PACELINE_SERVER", format!("http://127.0.0.1:{api}"))
        .env("PACELINE_TOKEN", token)
        .output()
        .expect("cli runs")
}

/// `paceline auth token` for one principal: its token and its tokens-file entry.
fn new_token(args: &[&str]) -> (String, String) {
    let out = common::ok(Command::new(BIN).args(["auth", "token"]).args(args).output().expect("runs"));
    let token = out.lines().find_map(|l| l.strip_prefix("token: ")).expect("a token line").to_string();
    let entry: String = out.lines().filter(|l| l.starts_with("  ")).map(|l| format!("{l}\n")).collect();
    (token, entry)
}

fn refused(out: &std::process::Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "must be refused: {}", String::from_utf8_lossy(&out.stdout));
    for needle in needles {
        assert!(err.contains(needle), "the refusal says `{needle}`: {err}");
    }
}

/// `key=value` of a task's log.
fn logged(log: &str, key: &str) -> String {
    log.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no `{key}=` in the log:\n{log}"))
        .trim()
        .to_owned()
}

/// Security issue 44 through a real server: two teams, each limited to its
/// pool by its token, whose jobs land on one agent (running as root). Team
/// A's task tries team B's `/proc/<pid>/environ`, its secret file and the
/// agent's key, and gets none; team B's pool allows the user `nobody`, so
/// its task runs as that user, which no other pool may name.
#[test]
fn two_teams_on_one_agent_through_the_server_cannot_read_each_other_and_a_pool_picks_its_user() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: tasks under other users need the agent to run as root");
        return;
    }
    let Ok(Some(nobody)) = nix::unistd::User::from_name("nobody") else {
        eprintln!("skipped: no user `nobody` on this host");
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    // Tasks reach their sandboxes by path: others may pass through.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
    let (alice, alice_entry) = new_token(&["--name", "alice", "--role", "user", "--pool", "/team-a"]);
    let (bob, bob_entry) = new_token(&["--name", "bob", "--role", "user", "--pool", "/team-b"]);
    let (admin, admin_entry) = new_token(&["--name", "ops", "--role", "admin"]);
    let tokens = dir.path().join("tokens.yaml");
    std::fs::write(&tokens, format!("version: 1\nprincipals:\n{alice_entry}{bob_entry}{admin_entry}")).expect("write");
    let (api, agents) = (free_port(), free_port());
    let config = dir.path().join("server.yaml");
    std::fs::write(
        &config,
        format!(
            "data_dir: {}\napi_listen: 127.0.0.1:{api}\nagent_listen: 127.0.0.1:{agents}\ndefault_pool: false\ntokens_file: {}\n",
            dir.path().join("server").display(),
            tokens.display()
        ),
    )
    .expect("config");
    let _server = Dev::spawn(&["server", "--config", config.to_str().expect("utf-8")], "API on");
    let agent_dir = dir.path().join("agent");
    let join = common::join_args(&dir.path().join("server").join("pki"));
    let agent = Command::new(BIN)
        .args(["agent", "--manager", &format!("http://127.0.0.1:{agents}"), "--hostname", "shared"])
        .args(["--port-range", "25000-25099", "--task-uids", "73000-73099", "--task-user", "per-run"])
        .args(["--cpu-millis", "4000", "--memory-mib", "4096", "--data-dir", agent_dir.to_str().expect("utf-8")])
        .args(&join)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("agent");
    let _agent = Agent(agent, agent_dir.clone());
    eventually(30, "the agent registered", || {
        let out = cli_as(api, &admin, &["host", "list", "-o", "json"]);
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .is_ok_and(|h| h.as_array().is_some_and(|h| h.len() == 1))
    });
    let key = agent_dir.join("identity/agent.key");
    assert!(key.is_file(), "the agent's key is at {}", key.display());

    // The admin makes the pools; only /team-b allows a user.
    let pool = |name: &str, text: &str| {
        let file = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&file, text).expect("pool file");
        cli_as(api, &admin, &["pool", "create", &format!("/{name}"), file.to_str().expect("utf-8")])
    };
    common::ok(pool("team-a", "reservation: {cpu: 1000, memory: 1024}\n"));
    common::ok(pool("team-b", "reservation: {cpu: 1000, memory: 1024}\ntask_users: [nobody]\n"));
    refused(&pool("team-c", "task_users: [root]\n"), &["task_users[0]", "root"]);
    let shown = cli_as(api, &admin, &["pool", "get", "/team-b", "-o", "json"]);
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("pool json");
    assert_eq!(shown["spec"]["task_users"], serde_json::json!(["nobody"]), "{shown:#}");

    // Bob's secret, in his pool.
    let secret = format!("team-b-secret-{}", std::process::id());
    let put = Command::new(BIN)
        .args(["secret", "put", "--pool", "/team-b", "db-password", "--from-env", "PW"])
        .env("PACELINE_SERVER", format!("http://127.0.0.1:{api}"))
        .env("PACELINE_TOKEN", &bob)
        .env("PW", &secret)
        .output()
        .expect("cli runs");
    common::ok(put);
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let job = |name: &str, pool: &str, user: Option<&str>, script: &str, secrets: bool| {
        let mut text = format!(
            "name: {name}\npool: {pool}\nkind: batch\ninstance_count: 1\ndefault_task:\n  command: sh\n  args: [\"-c\", {script:?}]\n  resources: {{cpu_millis: 100, memory_mib: 64}}\n  kill_grace_period_secs: 1\n"
        );
        if secrets {
            text.push_str(
                "  secrets:\n    - {name: db-password, env: DB_PASSWORD}\n    - {name: db-password, file: token}\n",
            );
        }
        if let Some(user) = user {
            text.push_str(&format!("user: {user}\n"));
        }
        let file = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&file, text).expect("job file");
        file.to_str().expect("utf-8").to_owned()
    };

    // A pool that allows no user refuses one, naming the field and the list;
    // root is refused everywhere.
    let sneaky = job("sneaky", "/team-a", Some("nobody"), "id", false);
    refused(&cli_as(api, &alice, &["job", "create", &sneaky]), &["spec.user", "/team-a", "task_users: none"]);
    let as_root = job("as-root", "/team-b", Some("root"), "id", false);
    refused(&cli_as(api, &bob, &["job", "create", &as_root]), &["`user`", "tasks never run as root"]);

    // Team B, as `nobody`: publishes what an attacker wants, and waits.
    let b_script = format!(
        "echo $$ > {s}/b.pid; echo $PACELINE_SECRETS_DIR/token > {s}/b.path; echo uid=$(id -u); echo ready; sleep 120",
        s = shared.display()
    );
    let b =
        common::ok(cli_as(api, &bob, &["job", "create", &job("keeper", "/team-b", Some("nobody"), &b_script, true)]));
    let mut b_log = String::new();
    eventually(60, "team B's task started", || {
        b_log = String::from_utf8_lossy(&cli_as(api, &bob, &["task", "logs", &b, "0"]).stdout).into_owned();
        b_log.contains("ready")
    });
    assert_eq!(logged(&b_log, "uid"), nobody.uid.as_raw().to_string(), "team B's pool chose `nobody`");

    // Team A, under a uid of its own, tries the environment, the secret file and the key.
    let a_script = format!(
        "pid=$(cat {s}/b.pid); cat /proc/$pid/environ; r=$?; echo; echo environ=$r; \
         cat $(cat {s}/b.path); r=$?; echo; echo secret=$r; cat {key}; r=$?; echo; echo key=$r; echo uid=$(id -u)",
        s = shared.display(),
        key = key.display(),
    );
    let a = common::ok(cli_as(api, &alice, &["job", "create", &job("prober", "/team-a", None, &a_script, false)]));
    let mut a_log = String::new();
    eventually(60, "team A's task ran", || {
        a_log = String::from_utf8_lossy(&cli_as(api, &alice, &["task", "logs", &a, "0"]).stdout).into_owned();
        a_log.contains("uid=")
    });
    for (what, k) in
        [("team B's /proc/<pid>/environ", "environ"), ("team B's secret file", "secret"), ("the agent's key", "key")]
    {
        assert_ne!(logged(&a_log, k), "0", "team A's task read {what}:\n{a_log}");
    }
    assert!(!a_log.contains(&secret), "team A's task got team B's secret:\n{a_log}");
    assert!(!a_log.contains("PRIVATE KEY"), "team A's task got the agent's key:\n{a_log}");
    let uid_a: u32 = logged(&a_log, "uid").parse().expect("a uid");
    assert!((73_000..=73_099).contains(&uid_a), "team A's task ran as {uid_a}, not a uid of its own");
    // Alice cannot read Bob's task's log either.
    refused(&cli_as(api, &alice, &["task", "logs", &b, "0"]), &["permission denied"]);
    common::ok(cli_as(api, &bob, &["job", "kill", &b]));
}
