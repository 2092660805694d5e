//! Fuzz targets `mesos` and `agent-host` (scripts/fuzz): bytes from a Mesos
//! master's event stream and from an agent's session stream, through the
//! real decoding and handling code (`paceline_hostmgr::fuzz_entry`).
//!
//! Property: whatever the bytes, nothing panics. Cases are the seeds
//! (well-formed streams, so the handling code is reached), the seeds
//! mutated (bytes flipped, inserted, removed, cut) and arbitrary bytes.
//! Every file in `fuzz/corpus/mesos-json`, `fuzz/corpus/mesos-protobuf`
//! and `fuzz/corpus/agent-host` (seeds, inputs AFL++ found, crash
//! reproducers) is replayed first. `--ignored write_seeds` rewrites the
//! seed files there.

use std::path::PathBuf;

use paceline_hostmgr::fuzz_entry::{agent_stream, mesos_stream};
use paceline_hostmgr::mesos::{Encoding, decode_event, recordio};
use paceline_proto::agent::v1 as pb;
use proptest::prelude::*;
use prost::Message;

/// Mesos events as the master sends them in JSON: the kinds the provider handles.
const MESOS_JSON_EVENTS: &[&str] = &[
    r#"{"type":"SUBSCRIBED","subscribed":{"framework_id":{"value":"fw-1"},"heartbeat_interval_seconds":15}}"#,
    r#"{"type":"OFFERS","offers":{"offers":[{"id":{"value":"o-1"},"framework_id":{"value":"fw-1"},"agent_id":{"value":"a-1"},"hostname":"h1","resources":[{"name":"cpus","type":"SCALAR","scalar":{"value":4}},{"name":"mem","type":"SCALAR","scalar":{"value":4096}},{"name":"disk","type":"SCALAR","scalar":{"value":10000}},{"name":"ports","type":"RANGES","ranges":{"range":[{"begin":"31000","end":"31010"}]}}],"attributes":[{"name":"rack","type":"TEXT","text":{"value":"r1"}},{"name":"zone","type":"SCALAR","scalar":{"value":2}}]}]}}"#,
    r#"{"type":"UPDATE","update":{"status":{"task_id":{"value":"job-1-0-1"},"state":"TASK_RUNNING","agent_id":{"value":"a-1"},"uuid":"AAECAw==","source":"SOURCE_EXECUTOR"}}}"#,
    r#"{"type":"UPDATE","update":{"status":{"task_id":{"value":"job-1-0-1"},"state":"TASK_FAILED","agent_id":{"value":"a-1"},"message":"Command exited with status 3","reason":"REASON_COMMAND_EXECUTOR_FAILED"}}}"#,
    r#"{"type":"RESCIND","rescind":{"offer_id":{"value":"o-1"}}}"#,
    r#"{"type":"INVERSE_OFFERS","inverse_offers":{"inverse_offers":[{"id":{"value":"io-1"},"framework_id":{"value":"fw-1"},"agent_id":{"value":"a-1"},"unavailability":{"start":{"nanoseconds":"0"}}}]}}"#,
    r#"{"type":"RESCIND_INVERSE_OFFER","rescind_inverse_offer":{"inverse_offer_id":{"value":"io-1"}}}"#,
    r#"{"type":"FAILURE","failure":{"agent_id":{"value":"a-1"}}}"#,
    r#"{"type":"HEARTBEAT"}"#,
    r#"{"type":"ERROR","error":{"message":"framework removed"}}"#,
];

fn mesos_seed(encoding: Encoding) -> Vec<u8> {
    MESOS_JSON_EVENTS
        .iter()
        .flat_map(|json| {
            let record = match encoding {
                Encoding::Json => json.as_bytes().to_vec(),
                Encoding::Protobuf => {
                    decode_event(json.as_bytes(), Encoding::Json).expect("seed event").encode_to_vec()
                }
            };
            recordio::encode(&record)
        })
        .collect()
}

fn agent_seed() -> Vec<u8> {
    use pb::agent_message::Body;
    let status = |seq: u64, state: pb::RunState| pb::StatusUpdate {
        run_id: "job-1-0-1".into(),
        task_id: "job-1-0".into(),
        seq,
        state: state as i32,
        healthy: Some(true),
        exit_code: (state == pb::RunState::Failed).then_some(3),
        ports: [("http".to_owned(), 31000)].into_iter().collect(),
        sandbox: "/var/lib/paceline/runs/job-1-0-1".into(),
        ..Default::default()
    };
    let bodies = vec![
        Body::Register(pb::Register {
            protocol_version: pb::PROTOCOL_VERSION,
            agent_id: "agent-1".into(),
            hostname: "h1".into(),
            total: Some(paceline_proto::v1::Resources {
                cpu_millis: 4000,
                memory_mib: 4096,
                disk_mib: 10000,
                gpus: 0,
                ports: 10,
                gpu_milli: 0,
            }),
            attributes: [("rack".to_owned(), "r1".to_owned())].into_iter().collect(),
            running: vec![pb::RunningRun {
                run_id: "job-1-0-1".into(),
                task_id: "job-1-0".into(),
                resources: None,
                gpu: None,
            }],
            port_range_first: 31000,
            port_range_last: 31010,
            ..Default::default()
        }),
        Body::Heartbeat(pb::Heartbeat::default()),
        Body::Status(status(1, pb::RunState::Starting)),
        Body::Status(status(2, pb::RunState::Running)),
        Body::Status(status(2, pb::RunState::Running)),
        Body::LaunchRejected(pb::LaunchRejected { run_id: "job-2-0-1".into(), error: "command: missing".into() }),
        Body::LogChunk(pb::LogChunk { request_id: 7, data: b"hello".to_vec(), ..Default::default() }),
        Body::Status(status(3, pb::RunState::Failed)),
    ];
    bodies.into_iter().flat_map(|b| pb::AgentMessage { body: Some(b) }.encode_length_delimited_to_vec()).collect()
}

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target)
}

/// Every file kept for `target`, replayed through `run`.
fn replay(target: &str, run: impl Fn(&[u8])) -> usize {
    let Ok(entries) = std::fs::read_dir(corpus_dir(target)) else { return 0 };
    let mut n = 0;
    for entry in entries.flatten() {
        if let Ok(bytes) = std::fs::read(entry.path()) {
            run(&bytes);
            n += 1;
        }
    }
    n
}

/// One mutation of a seed: what to do, where (an index into the bytes) and with which byte.
fn mutations() -> impl Strategy<Value = Vec<(u8, prop::sample::Index, u8)>> {
    proptest::collection::vec((0u8..4, any::<prop::sample::Index>(), any::<u8>()), 0..6)
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

#[test]
fn the_seeds_reach_the_handlers_and_the_corpus_replays() {
    // Every seed event is handled (the ERROR event ends the stream, so it is the last).
    assert_eq!(mesos_stream(&mesos_seed(Encoding::Json), Encoding::Json), MESOS_JSON_EVENTS.len() - 1);
    assert_eq!(mesos_stream(&mesos_seed(Encoding::Protobuf), Encoding::Protobuf), MESOS_JSON_EVENTS.len() - 1);
    // Registration, heartbeat, 3 new updates (one duplicate dropped), the rejection, the disconnect.
    assert_eq!(agent_stream(&agent_seed()), 7);
    replay("mesos-json", |b| {
        mesos_stream(b, Encoding::Json);
    });
    replay("mesos-protobuf", |b| {
        mesos_stream(b, Encoding::Protobuf);
    });
    replay("agent-host", |b| {
        agent_stream(b);
    });
}

/// Writes the seeds into `fuzz/corpus` (for AFL++ and the replay above).
#[test]
#[ignore = "writes the seed files; run by hand after changing a seed"]
fn write_seeds() {
    for (target, bytes) in [
        ("mesos-json", mesos_seed(Encoding::Json)),
        ("mesos-protobuf", mesos_seed(Encoding::Protobuf)),
        ("agent-host", agent_seed()),
    ] {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).expect("corpus dir");
        std::fs::write(dir.join("seed"), bytes).expect("seed");
    }
}

proptest! {
    // Cases from PROPTEST_CASES (scripts/fuzz), else proptest's 256.
    #![proptest_config(ProptestConfig::default())]

    #[test]
    fn fuzz_mesos_mutated_streams_never_panic(ops in mutations(), json in any::<bool>()) {
        let encoding = if json { Encoding::Json } else { Encoding::Protobuf };
        mesos_stream(&mutate(mesos_seed(encoding), &ops), encoding);
    }

    #[test]
    fn fuzz_mesos_arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        mesos_stream(&bytes, Encoding::Json);
        mesos_stream(&bytes, Encoding::Protobuf);
    }

    #[test]
    fn fuzz_agent_mutated_sessions_never_panic(ops in mutations()) {
        agent_stream(&mutate(agent_seed(), &ops));
    }

    #[test]
    fn fuzz_agent_arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        agent_stream(&bytes);
    }
}
