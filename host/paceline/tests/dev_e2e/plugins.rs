//! Plugins through the CLI: deploy, placement changes, rollback, built-ins by name.

use super::*;

#[test]
fn a_plugin_deployed_through_the_cli_changes_placement_and_rollback_restores_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = free_port();
    let _dev = dev(dir.path(), api);
    eventually(30, "two agents up", || json(api, &["host", "list"]).as_array().is_some_and(|h| h.len() == 2));
    let hosts_of = |id: &str| -> std::collections::BTreeSet<String> {
        tasks(api, id).iter().filter_map(|t| t["host"].as_str().filter(|h| !h.is_empty()).map(str::to_string)).collect()
    };
    let placed = |id: &str| {
        let ts = tasks(api, id);
        ts.len() == 4 && ts.iter().all(|t| t["host"].as_str().is_some_and(|h| !h.is_empty()))
    };
    // A long batch job of 4 small instances: binpack (the default) packs them on one host.
    let spec = std::fs::read_to_string(example("hello.yaml"))
        .expect("example")
        .replace("instance_count: 3", "instance_count: 4")
        .replace("echo hello from instance $PACELINE_TASK_ID", "sleep 30");
    let file = dir.path().join("packed.yaml");
    std::fs::write(&file, &spec).expect("spec");
    let packed = ok(cli(api, &["job", "create", file.to_str().expect("utf-8")]));
    eventually(30, "placed", || placed(&packed));
    assert_eq!(hosts_of(&packed).len(), 1, "binpack packs");

    ok(cli(api, &["plugin", "deploy", "placement/batch", "spread", "9", paceline_plugin_artifacts::SPREAD_PATH]));
    ok(cli(api, &["plugin", "activate", "placement/batch", "spread@9"]));
    let spread = ok(cli(api, &["job", "create", file.to_str().expect("utf-8")]));
    eventually(30, "placed", || placed(&spread));
    assert_eq!(hosts_of(&spread).len(), 2, "spread spreads from the next round on");

    ok(cli(api, &["plugin", "rollback", "placement/batch"]));
    ok(cli(api, &["job", "kill", &packed]));
    ok(cli(api, &["job", "kill", &spread]));
    eventually(30, "killed", || {
        [&packed, &spread]
            .iter()
            .all(|id| tasks(api, id).iter().all(|t| t["state"].as_str().is_some_and(|s| s.ends_with("KILLED"))))
    });
    let again = ok(cli(api, &["job", "create", file.to_str().expect("utf-8")]));
    eventually(30, "placed", || placed(&again));
    assert_eq!(hosts_of(&again).len(), 1, "rolled back to binpack");
}

/// Issue 43: the built-in policies could not be named in `plugin deploy` or
/// `plugin shadow` (`spread@builtin-0.1.0` was "not found" in placement/batch,
/// whose default is binpack); their only files were under target/. They are
/// in the binary: `--builtin NAME`, `builtin:NAME`, `NAME@builtin-<version>`.
#[test]
fn built_in_policies_can_be_deployed_and_shadowed_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = free_port();
    let data = dir.path().join("dev");
    let _dev = start(
        &[
            "dev",
            "--sim-hosts",
            "1",
            "--data-dir",
            data.to_str().expect("utf-8"),
            "--api-listen",
            &format!("127.0.0.1:{api}"),
        ],
        "API on",
    );
    let version = format!("builtin-{}", env!("CARGO_PKG_VERSION"));
    let list = ok(cli(api, &["plugin", "list"]));
    assert!(list.contains("built-in policies") && list.contains("binpack, spread"), "{list}");

    // Shadowing spread in placement/batch deploys it there first.
    let shadow = ok(cli(api, &["plugin", "shadow", "placement/batch", &format!("spread@{version}")]));
    assert!(shadow.contains(&format!("spread@{version} in placement/batch")), "{shadow}");
    let slots = json(api, &["plugin", "list"]);
    let batch = slots.as_array().and_then(|s| s.iter().find(|s| s["slot"] == "placement/batch")).cloned();
    let ids: Vec<String> = batch
        .and_then(|b| b["versions"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v["id"].as_str().map(str::to_string))
        .collect();
    assert!(ids.contains(&format!("spread@{version}")), "{ids:?}");
    ok(cli(api, &["plugin", "shadow", "placement/batch", "builtin:spread", "--stop"]));

    // deploy --builtin, and builtin:NAME where the file goes.
    let deployed = ok(cli(api, &["plugin", "deploy", "placement/stateful", "--builtin", "spread"]));
    assert!(deployed.contains(&format!("spread@{version}")), "{deployed}");
    ok(cli(api, &["plugin", "deploy", "placement/stateful", "gang", "1", "builtin:gang-gpu"]));
    let unknown = cli(api, &["plugin", "deploy", "placement/stateful", "--builtin", "nope"]);
    assert!(!unknown.status.success());
    let why = String::from_utf8_lossy(&unknown.stderr);
    assert!(why.contains("not a built-in policy") && why.contains("binpack, spread"), "{why}");
}
