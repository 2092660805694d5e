//! A Cassandra node lost mid-run (issue 47): the real `paceline server` on
//! the three-node cluster of `deploy/cassandra/cassandra.sh start-cluster`
//! (replication factor 3, QUORUM), real agents, jobs submitted through the
//! API by the CLI, while a random node is SIGKILLed and started again twice;
//! then two nodes SIGKILLed (no quorum) and one started again. The run is
//! `scripts/torture`, which holds the machinery and the checks: 0
//! acknowledged jobs lost, 0 (task, run) launched twice (the agents' launch
//! logs), each pool's allocation equal to its running tasks, the server
//! never exits by itself (no server is killed here, so any exit fails), a
//! create without a quorum fails with an error within 60 s instead of
//! hanging, and creates work again once a node is back.
//!
//! Ignored by default: it takes minutes and needs the cluster.
//!
//! ```sh
//! deploy/cassandra/cassandra.sh start-cluster /tmp/paceline-cassandra-cluster 3
//! CASSANDRA_DIR=/tmp/paceline-cassandra-cluster \
//!   cargo test --workspace --test cassandra_node_loss -- --ignored --nocapture
//! deploy/cassandra/cassandra.sh stop /tmp/paceline-cassandra-cluster
//! ```

use std::path::Path;
use std::process::Command;

#[test]
#[ignore = "minutes, and a three-node Cassandra cluster (CASSANDRA_DIR, cassandra.sh start-cluster)"]
fn a_cassandra_node_lost_mid_run_loses_no_job_and_launches_nothing_twice() {
    let dir = std::env::var("CASSANDRA_DIR").unwrap_or_else(|_| "/tmp/paceline-cassandra-cluster".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("python3")
        .arg(root.join("scripts/torture"))
        .args(["--backend", "cassandra", "--jobs", "400", "--kills", "0", "--agent-kills", "0"])
        .args(["--cassandra-node-kills", "2", "--quorum-loss", "--binary", env!("CARGO_BIN_EXE_paceline")])
        .env("CASSANDRA_DIR", &dir)
        .output()
        .expect("python3 scripts/torture");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "torture against the cluster in {dir} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("acknowledged jobs lost   0"), "{stdout}");
    assert!(stdout.contains("launched twice: 0"), "{stdout}");
}
