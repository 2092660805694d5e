//! Fuzz target `agent` (scripts/fuzz): what the agent parses from the host
//! manager, `ManagerMessage`s as they follow each other on the session
//! stream (length-delimited protobuf).
//!
//! Properties, whatever the bytes: nothing panics; a `Launch` the agent
//! accepts (`RunSpec::from_launch`) turns back into a `Launch` that gives
//! the same spec (what a restarted agent re-reads is what it was told);
//! `Kill`, `Ack` and `ReadLog` with any run id, seq, stream or offset get
//! an answer or an error from a real supervisor that has one finished run.
//! Launches are checked, not started: generated commands are not run.
//! Every file in `fuzz/corpus/agent-launch` is replayed first;
//! `--ignored write_seeds` rewrites the seed there.

use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use paceline_agent::{Isolation, IsolationChoice, RunSpec, Supervisor, SupervisorConfig};
use paceline_model::Resources;
use paceline_proto::agent::v1 as pb;
use proptest::prelude::*;
use prost::Message;

struct Agent {
    _rt: tokio::runtime::Runtime,
    sup: Supervisor,
    _dir: tempfile::TempDir,
}

/// One supervisor for every case, with one run that ran `true` and ended.
static AGENT: LazyLock<Agent> = LazyLock::new(|| {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let sup = rt.block_on(async {
        let sup = Supervisor::open(SupervisorConfig {
            data_dir: dir.path().to_owned(),
            total: Resources { cpu_millis: 1000, memory_mib: 1024, disk_mib: 1000, gpu_milli: 0, ports: 0 },
            port_range: (45100, 45109),
            isolation: Isolation::detect(IsolationChoice::Auto),
            default_kill_grace: Duration::from_secs(1),
            gpu_devices: Vec::new(),
            gpu_memory_mib: Vec::new(),
            adopt_poll: Duration::from_millis(50),
            task_users: paceline_agent::TaskUsers::Agent { why: "the agent's own tests".to_owned() },
        })
        .await
        .expect("supervisor");
        let mut events = sup.subscribe();
        sup.launch(&seed_launch()).await.expect("seed launch");
        while let Ok(u) = events.recv().await {
            if u.state == pb::RunState::Succeeded as i32 {
                break;
            }
        }
        sup
    });
    Agent { _rt: rt, sup, _dir: dir }
});

fn seed_launch() -> pb::Launch {
    pb::Launch {
        run_id: "job-1-0-1".into(),
        task_id: "job-1-0".into(),
        command: "true".into(),
        args: vec!["a".into()],
        env: [("K".to_owned(), "v".to_owned())].into_iter().collect(),
        resources: Some(paceline_proto::v1::Resources {
            cpu_millis: 100,
            memory_mib: 32,
            disk_mib: 10,
            gpus: 0,
            ports: 1,
            gpu_milli: 0,
        }),
        port_names: vec!["http".into()],
        health_check: Some(pb::HealthCheck {
            http_port: "http".into(),
            http_path: "/health".into(),
            interval_secs: 5,
            ..Default::default()
        }),
        volume: Some(pb::Volume { name: "data".into(), size_mib: 10 }),
        kill_grace_period_secs: 3,
        stop_signal: "SIGUSR1".into(),
        gpu: None,
        gang: None,
        user: String::new(),
        secrets: vec![pb::LaunchSecret {
            name: "db".into(),
            env: String::new(),
            file: "db.txt".into(),
            value: b"seed-value".to_vec(),
        }],
    }
}

fn seed() -> Vec<u8> {
    use pb::manager_message::Body;
    [
        Body::Registered(pb::Registered { heartbeat_interval_ms: 1000 }),
        Body::Launch(seed_launch()),
        Body::Kill(pb::Kill { run_id: "job-1-0-1".into(), grace_period_secs: Some(1) }),
        Body::Ack(pb::Ack { run_id: "job-1-0-1".into(), seq: 2 }),
        Body::ReadLog(pb::ReadLog {
            request_id: 1,
            run_id: "job-1-0-1".into(),
            stream: "stdout".into(),
            offset: 0,
            max_bytes: 64,
        }),
    ]
    .into_iter()
    .flat_map(|b| pb::ManagerMessage { body: Some(b) }.encode_length_delimited_to_vec())
    .collect()
}

/// The agent's handling of one stream's messages, minus starting processes.
fn handle(data: &[u8]) -> Result<(), TestCaseError> {
    use pb::manager_message::Body;
    let agent = &*AGENT;
    let mut rest = data;
    while !rest.is_empty() {
        let Ok(message) = pb::ManagerMessage::decode_length_delimited(&mut rest) else { break };
        match message.body {
            Some(Body::Launch(launch)) => {
                if let Ok(spec) = RunSpec::from_launch(&launch) {
                    let again = RunSpec::from_launch(&spec.to_launch());
                    prop_assert_eq!(again.as_ref(), Ok(&spec), "a Launch does not survive the round trip");
                }
            }
            Some(Body::Kill(kill)) => {
                let _ = agent.sup.kill(&kill.run_id, kill.grace_period_secs);
            }
            Some(Body::Ack(ack)) => {
                let _ = agent.sup.ack(&ack.run_id, ack.seq);
            }
            Some(Body::ReadLog(req)) => {
                let chunk = agent.sup.handle_read_log(&req);
                prop_assert_eq!(chunk.request_id, req.request_id);
            }
            Some(Body::Registered(_)) | None => {}
        }
    }
    Ok(())
}

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/agent-launch")
}

#[test]
fn the_seed_is_accepted_and_the_corpus_replays() {
    assert!(RunSpec::from_launch(&seed_launch()).is_ok());
    handle(&seed()).expect("seed");
    for entry in std::fs::read_dir(corpus_dir()).into_iter().flatten().flatten() {
        let bytes = std::fs::read(entry.path()).expect("corpus file");
        handle(&bytes).unwrap_or_else(|e| panic!("{}: {e}", entry.path().display()));
    }
}

#[test]
#[ignore = "writes the seed file; run by hand after changing the seed"]
fn write_seeds() {
    std::fs::create_dir_all(corpus_dir()).expect("corpus dir");
    std::fs::write(corpus_dir().join("seed"), seed()).expect("seed");
}

fn mutate(mut bytes: Vec<u8>, ops: &[(u8, prop::sample::Index, u8)]) -> Vec<u8> {
    for (op, at, b) in ops {
        let i = at.index(bytes.len() + 1);
        match op {
            0 if i < bytes.len() => bytes[i] = *b,
            1 => bytes.insert(i, *b),
            2 if i < bytes.len() => {
                bytes.remove(i);
            }
            _ => bytes.truncate(i),
        }
    }
    bytes
}

proptest! {
    // Cases from PROPTEST_CASES (scripts/fuzz), else proptest's 256.
    #![proptest_config(ProptestConfig::default())]

    #[test]
    fn fuzz_mutated_manager_messages(ops in proptest::collection::vec((0u8..4, any::<prop::sample::Index>(), any::<u8>()), 0..6)) {
        handle(&mutate(seed(), &ops))?;
    }

    #[test]
    fn fuzz_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        handle(&bytes)?;
    }
}
