//! The audit log end to end, with the real binary: changes made with the
//! CLI (a job created and killed, a plugin deploy the server refuses; an
//! owner-lease renewal is left out) are
//! recorded with their principal, target and outcome, `paceline audit`
//! filters them, a `user` reads only their own records, refused calls are
//! recorded, and `paceline server --audit-max-rows` bounds the log.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{BIN, Dev, eventually, free_port, ok};

fn cli(api: u16, token: Option<&str>, args: &[&str]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args).env("PACELINE_SERVER", format!("http://127.0.0.1:{api}")).env_remove("PACELINE_TOKEN");
    if let Some(t) = token {
        c.env("PACELINE_TOKEN", t);
    }
    c.output().expect("cli runs")
}

/// `paceline audit <args> --json`.
fn audit(api: u16, token: Option<&str>, args: &[&str]) -> Vec<serde_json::Value> {
    let mut all = vec!["audit", "--json"];
    all.extend(args);
    let v: serde_json::Value = serde_json::from_str(&ok(cli(api, token, &all))).expect("json");
    v.as_array().cloned().expect("an array of records")
}

fn methods(records: &[serde_json::Value]) -> Vec<String> {
    records
        .iter()
        .map(|r| r["method"].as_str().unwrap_or_default().rsplit('/').next().unwrap_or_default().to_string())
        .collect()
}

fn find<'a>(records: &'a [serde_json::Value], method: &str) -> &'a serde_json::Value {
    records
        .iter()
        .find(|r| r["method"].as_str().is_some_and(|m| m.ends_with(method)))
        .unwrap_or_else(|| panic!("no {method} record in {records:#?}"))
}

#[test]
fn changes_are_recorded_with_principal_target_and_outcome_and_filtered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let api = free_port();
    let _dev = Dev::start(dir, api, 2, &[]);
    // A job with an owner lease that runs until killed: its renewals are not audited.
    let leased = dir.join("hello-leased.yaml");
    std::fs::write(
        &leased,
        "name: hello\npool: /default\nkind: batch\ninstance_count: 1\nowner_lease_secs: 600\ndefault_task:\n  \
         command: sh\n  args: [\"-c\", \"echo hello; sleep 300\"]\n  \
         resources: {cpu_millis: 100, memory_mib: 32, disk_mib: 10}\n",
    )
    .expect("write");
    let created = ok(cli(api, None, &["job", "create", leased.to_str().expect("utf-8"), "-o", "json"]));
    let id = serde_json::from_str::<serde_json::Value>(&created).expect("json")["id"].as_str().expect("id").to_string();
    let renewed = ok(cli(api, None, &["job", "renew-lease", &id]));
    assert_eq!(renewed, format!("{id}: owner lease renewed for 600 s"));
    ok(cli(api, None, &["job", "kill", &id]));
    ok(cli(api, None, &["job", "get", &id])); // a read: not audited
    let late = cli(api, None, &["job", "renew-lease", &id]);
    let why = String::from_utf8_lossy(&late.stderr).to_string();
    assert!(!late.status.success() && why.contains("kill requested"), "a killed job's lease is not renewed: {why}");
    // A component with a valid header and nothing valid after it: the
    // client sends it, the server refuses it.
    let broken = dir.join("broken.wasm");
    std::fs::write(&broken, b"\0asm\x0d\0\x01\0this is not a component").expect("write");
    let refused =
        cli(api, None, &["plugin", "deploy", "placement/batch", "broken", "1", broken.to_str().expect("utf-8")]);
    assert!(!refused.status.success(), "the server refuses the component");
    let reason = String::from_utf8_lossy(&refused.stderr).to_string();

    eventually(30, "three audit records", || audit(api, None, &[]).len() >= 3);
    let all = audit(api, None, &[]);
    assert_eq!(
        methods(&all),
        ["DeployPlugin", "KillJob", "CreateJob"],
        "newest first, reads and lease renewals left out: {all:#?}"
    );
    let create = find(&all, "/paceline.v1.JobService/CreateJob");
    assert_eq!((create["principal"].as_str(), create["role"].as_str()), (Some("anonymous"), Some("admin")));
    assert_eq!((create["target"].as_str(), create["job_id"].as_str()), (Some(id.as_str()), Some(id.as_str())));
    assert_eq!(create["code"], "OK");
    assert!(
        create["summary"].as_str().is_some_and(|s| s.contains("name=hello") && s.contains("pool=/default")),
        "{create}"
    );
    assert!(!create.to_string().contains("echo hello"), "no spec body in the record: {create}");
    let kill = find(&all, "KillJob");
    assert_eq!((kill["target"].as_str(), kill["code"].as_str()), (Some(id.as_str()), Some("OK")));
    let deploy = find(&all, "DeployPlugin");
    assert_eq!(deploy["target"], "placement/batch broken@1");
    assert_eq!(deploy["code"], "InvalidArgument");
    let message = deploy["message"].as_str().expect("message");
    assert!(
        !message.is_empty() && reason.contains(message),
        "the refusal's reason, as the client saw it: {message} / {reason}"
    );

    // Filters.
    assert_eq!(methods(&audit(api, None, &["--job", &id])), ["KillJob", "CreateJob"]);
    assert_eq!(methods(&audit(api, None, &["--method", "DeployPlugin"])), ["DeployPlugin"]);
    assert_eq!(methods(&audit(api, None, &["--method", "/paceline.v1.JobService/KillJob"])), ["KillJob"]);
    assert_eq!(audit(api, None, &["--user", "anonymous", "--since", "1h"]).len(), 3);
    assert!(audit(api, None, &["--user", "somebody-else"]).is_empty());
    assert!(audit(api, None, &["--until", "2000-01-01T00:00:00Z"]).is_empty());
    assert_eq!(methods(&audit(api, None, &["--limit", "1"])), ["DeployPlugin"]);
    // The table names each change.
    let table = ok(cli(api, None, &["audit"]));
    assert!(
        table.contains("JobService/KillJob") && table.contains(&id) && table.contains("InvalidArgument"),
        "{table}"
    );
    // Bad filters are refused before anything is sent.
    let bad = cli(api, None, &["audit", "--since", "yesterday"]);
    assert_eq!(bad.status.code(), Some(2), "{}", String::from_utf8_lossy(&bad.stderr));
}

/// A tokens file with several principals: (name, role, pools) → their tokens.
fn tokens(dir: &Path, principals: &[(&str, &str, &[&str])]) -> (String, Vec<String>) {
    let mut entries = String::new();
    let mut tokens = Vec::new();
    for (name, role, pools) in principals {
        let mut args = vec!["auth", "token", "--name", name, "--role", role];
        for p in *pools {
            args.extend(["--pool", p]);
        }
        let out = Command::new(BIN).args(&args).output().expect("runs");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        tokens.push(text.lines().find_map(|l| l.strip_prefix("token: ")).expect("a token line").to_string());
        entries.extend(text.lines().filter(|l| l.starts_with("  ")).map(|l| format!("{l}\n")));
    }
    let path = dir.join("tokens.yaml");
    std::fs::write(&path, format!("version: 1\nprincipals:\n{entries}")).expect("write");
    (path.to_str().expect("utf-8").to_string(), tokens)
}

#[test]
fn users_read_only_their_own_records_and_refused_calls_are_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let (file, t) = tokens(dir, &[("root", "admin", &[]), ("alice", "user", &["/team-a"])]);
    let (root, alice) = (Some(t[0].as_str()), Some(t[1].as_str()));
    let api = free_port();
    let _dev = Dev::start(dir, api, 1, &["--tokens-file", &file]);
    let pool = dir.join("pool.yaml");
    std::fs::write(&pool, "reservation: {cpu: 1000, memory: 1024, disk: 100}\n").expect("write");
    ok(cli(api, root, &["pool", "create", "/team-a", pool.to_str().expect("utf-8")]));
    // Refused by role (a user may not create pools) and for want of a token.
    assert!(!cli(api, alice, &["pool", "create", "/mine", pool.to_str().expect("utf-8")]).status.success());
    assert!(!cli(api, None, &["job", "kill", "someone-elses-job"]).status.success());
    // Refused by a handler: alice's job kill of a job that does not exist.
    assert!(!cli(api, alice, &["job", "kill", "no-such-job"]).status.success());

    eventually(30, "four audit records", || audit(api, root, &[]).len() >= 4);
    let all = audit(api, root, &[]);
    let denied = find(&all, "CreatePool");
    assert!(all.iter().any(|r| r["principal"] == "root" && r["code"] == "OK" && r["target"] == "/team-a"), "{all:#?}");
    let by_alice: Vec<_> = all.iter().filter(|r| r["principal"] == "alice").collect();
    assert_eq!(by_alice.len(), 2, "{all:#?}");
    assert!(by_alice.iter().any(|r| r["code"] == "PermissionDenied" && r["role"] == "user"), "{denied}");
    assert!(by_alice.iter().any(|r| r["code"] == "NotFound" && r["target"] == "no-such-job"), "{by_alice:#?}");
    let anonymous = find(&all, "KillJob");
    let unauthenticated: Vec<_> = all.iter().filter(|r| r["principal"] == "(unauthenticated)").collect();
    assert_eq!(unauthenticated.len(), 1, "{anonymous}");
    assert_eq!(unauthenticated[0]["code"], "Unauthenticated");

    // Alice reads her own records, only hers, and may not ask for root's.
    let hers = audit(api, alice, &[]);
    assert_eq!(hers.len(), 2, "{hers:#?}");
    assert!(hers.iter().all(|r| r["principal"] == "alice"));
    let refused = cli(api, alice, &["audit", "--user", "root"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("permission denied"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    // Without a token nothing is read.
    assert!(!cli(api, None, &["audit"]).status.success());
}

#[test]
fn the_server_keeps_at_most_audit_max_rows_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let data = data.to_str().expect("utf-8");
    let api = free_port();
    let listen = format!("127.0.0.1:{api}");
    let start = |rows: &str| {
        Dev::spawn(
            &[
                "server",
                "--data-dir",
                data,
                "--api-listen",
                &listen,
                "--agent-listen",
                "127.0.0.1:0",
                "--audit-max-rows",
                rows,
            ],
            "API on",
        )
    };
    let server = start("100");
    for i in 0..5 {
        // Five refused kills: each is a change attempt, so each is recorded.
        assert!(!cli(api, None, &["job", "kill", &format!("job-{i}")]).status.success());
    }
    eventually(30, "five records", || audit(api, None, &[]).len() == 5);
    drop(server);
    // Restarted with a bound of 2: the log is pruned to its newest two at start.
    let _server = start("2");
    eventually(30, "two records left", || audit(api, None, &["--method", "KillJob"]).len() == 2);
    let left: Vec<_> =
        audit(api, None, &[]).iter().map(|r| r["target"].as_str().unwrap_or_default().to_string()).collect();
    assert_eq!(left, ["job-4", "job-3"], "the newest are kept");
}
