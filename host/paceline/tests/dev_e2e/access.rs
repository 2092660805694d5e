//! Who may call: tokens and roles, a broken tokens file, the API over TLS.

use super::*;

#[test]
fn tokens_decide_who_may_do_what_and_a_refused_call_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (alice, alice_entry) = new_token(&["--name", "alice", "--role", "user", "--pool", "/team-a"]);
    let (ops, ops_entry) = new_token(&["--name", "ops", "--role", "operator"]);
    let (root, root_entry) = new_token(&["--name", "root", "--role", "admin"]);
    assert_ne!(alice, ops, "tokens are random");
    let tokens = dir.path().join("tokens.yaml");
    std::fs::write(&tokens, format!("version: 1\nprincipals:\n{alice_entry}{ops_entry}{root_entry}")).expect("write");
    assert!(!std::fs::read_to_string(&tokens).expect("read").contains(&alice), "the file holds hashes, not tokens");

    let api = free_port();
    let data = dir.path().join("dev");
    let _dev = start(
        &[
            "dev",
            "--sim-hosts",
            "4",
            "--data-dir",
            data.to_str().expect("utf-8"),
            "--api-listen",
            &format!("127.0.0.1:{api}"),
            "--tokens-file",
            tokens.to_str().expect("utf-8"),
        ],
        "API on",
    );

    // No token, or a wrong one: unauthenticated, even for reads.
    refused(&cli(api, &["job", "list"]), "unauthenticated");
    refused(&cli_as(api, "not-a-token", &["job", "list"]), "not known");

    // Pools are the admin's; an operator and a user are refused by role.
    let pool_file = dir.path().join("pool.yaml");
    std::fs::write(&pool_file, "reservation: {cpu: 2000, memory: 4096}\n").expect("write");
    let pool_file = pool_file.to_str().expect("utf-8");
    refused(&cli_as(api, &ops, &["pool", "create", "/team-a", pool_file]), "needs role admin");
    refused(&cli_as(api, &alice, &["pool", "create", "/team-a", pool_file]), "permission denied");
    ok(cli_as(api, &root, &["pool", "create", "/team-a", pool_file]));

    // Alice may run jobs in /team-a only.
    let hello = std::fs::read_to_string(example("hello.yaml")).expect("example");
    let in_team_a = dir.path().join("team-a.yaml");
    std::fs::write(&in_team_a, hello.replace("pool: /default", "pool: /team-a")).expect("write");
    let created = ok(cli_as(api, &alice, &["job", "create", in_team_a.to_str().expect("utf-8"), "-o", "json"]));
    let created: serde_json::Value = serde_json::from_str(&created).expect("json");
    assert_eq!(created["owner"], "alice", "a spec without an owner is the token's principal's");
    let id = created["id"].as_str().expect("id").to_string();
    refused(&cli_as(api, &alice, &["job", "create", &example("hello.yaml")]), "may not change jobs in pool /default");
    let listed = ok(cli_as(api, &alice, &["job", "list", "-o", "json"]));
    let listed: serde_json::Value = serde_json::from_str(&listed).expect("json");
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "the refused job was not created: {listed}");

    // A job root created in /default is beyond alice's reach; an operator may kill it.
    let other = ok(cli_as(api, &root, &["job", "create", &example("hello.yaml"), "-o", "json"]));
    let other =
        serde_json::from_str::<serde_json::Value>(&other).expect("json")["id"].as_str().expect("id").to_string();
    refused(&cli_as(api, &alice, &["job", "kill", &other]), "permission denied");
    refused(&cli_as(api, &alice, &["task", "restart", &other, "0"]), "permission denied");
    ok(cli_as(api, &ops, &["job", "kill", &other]));
    ok(cli_as(api, &alice, &["job", "kill", &id]));

    // Hosts and plugins need an operator.
    let hosts = ok(cli_as(api, &alice, &["host", "list", "-o", "json"]));
    let host = serde_json::from_str::<serde_json::Value>(&hosts).expect("json")[0]["hostname"]
        .as_str()
        .expect("a host")
        .to_string();
    refused(&cli_as(api, &alice, &["host", "drain", &host]), "needs role operator");
    refused(&cli_as(api, &alice, &["plugin", "rollback", "placement/batch"]), "needs role operator");
    ok(cli_as(api, &ops, &["host", "drain", &host]));
}

#[test]
fn a_broken_tokens_file_stops_the_server_before_it_listens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens.yaml");
    std::fs::write(&tokens, "version: 1\nprincipals:\n  - {name: a, role: user, token_sha256: short}\n")
        .expect("write");
    let out = Command::new(BIN)
        .args(["dev", "--sim-hosts", "1", "--api-listen", &format!("127.0.0.1:{}", free_port()), "--tokens-file"])
        .arg(&tokens)
        .arg("--data-dir")
        .arg(dir.path().join("dev"))
        .output()
        .expect("runs");
    assert!(!out.status.success(), "the server must not start");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("principals[0].token_sha256"), "the error names the entry: {err}");
}

#[test]
fn the_api_over_tls_serves_clients_that_trust_its_authority_and_no_others() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = test_certificates(dir.path());
    let api = free_port();
    let config = dir.path().join("server.yaml");
    std::fs::write(
        &config,
        format!(
            "data_dir: {}\napi_listen: 127.0.0.1:{api}\nagent_listen: 127.0.0.1:0\nhosts: {{provider: sim, hosts: 2, resources: {{cpu_millis: 4000, memory_mib: 8192, disk_mib: 10000, gpus: 0}}, zones: 1}}\ntls: {{cert_file: {cert}, key_file: {key}}}\n",
            dir.path().join("data").display()
        ),
    )
    .expect("write");
    let _server = start(&["server", "--config", config.to_str().expect("utf-8")], "API on https://");
    let https = format!("https://localhost:{api}");
    let run = |args: &[&str], ca: Option<&str>| {
        let mut c = Command::new(BIN);
        c.args(args).env("PACELINE_SERVER", &https).env_remove("PACELINE_CA_CERT");
        if let Some(ca) = ca {
            c.env("PACELINE_CA_CERT", ca);
        }
        c.output().expect("cli runs")
    };
    // Trusting the authority: the whole API works.
    let created = ok(run(&["job", "create", &example("hello.yaml"), "-o", "json"], Some(&ca)));
    let id = serde_json::from_str::<serde_json::Value>(&created).expect("json")["id"].as_str().expect("id").to_string();
    eventually(60, "the job runs over TLS", || {
        let out = run(&["job", "get", &id, "-o", "json"], Some(&ca));
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("\"state\"")
    });
    // No authority given, or the wrong one, or plain HTTP: refused with a clear error.
    refused(&run(&["job", "list"], None), "--ca-cert");
    let (other_ca, _, _) = test_certificates(&{
        let d = dir.path().join("other");
        std::fs::create_dir_all(&d).expect("mkdir");
        d
    });
    refused(&run(&["job", "list"], Some(&other_ca)), "cannot connect");
    let plain = Command::new(BIN)
        .args(["job", "list"])
        .env("PACELINE_SERVER", format!("http://127.0.0.1:{api}"))
        .output()
        .expect("runs");
    assert!(!plain.status.success(), "plain HTTP/2 is not served on a TLS port");
}
