//! The parsers AFL++ drives, one function per target; each takes arbitrary
//! bytes and must not panic. The binaries in `src/bin` wrap them in
//! `afl::fuzz!`. Each target's corpus is `fuzz/corpus/<target>` (dashes for
//! underscores, `jobspec` for `jobspec_yaml`), which the property tests of
//! the same name in `cargo test` replay (scripts/fuzz lists where). The
//! `api` target has no harness here: it needs a server (decision 0027).

use paceline_model::job::JobConfig;
use paceline_proto::agent::v1 as agent_pb;
use prost::Message;

/// Job spec YAML as `paceline job create` reads it, then to protobuf and back.
pub fn jobspec_yaml(data: &[u8]) {
    let Ok(config) = serde_yaml::from_slice::<JobConfig>(data) else { return };
    if config.validate().is_err() {
        return;
    }
    let spec = paceline_proto::convert::job_spec_pb(&config);
    let back = paceline_proto::convert::job_config("spec", &spec);
    assert!(back.is_ok(), "a valid job spec does not convert back: {back:?}");
}

/// A Mesos SUBSCRIBE body in JSON (RecordIO, events, the provider's handling).
pub fn mesos_json(data: &[u8]) {
    paceline_hostmgr::fuzz_entry::mesos_stream(data, paceline_hostmgr::mesos::Encoding::Json);
}

/// A Mesos SUBSCRIBE body in protobuf.
pub fn mesos_protobuf(data: &[u8]) {
    paceline_hostmgr::fuzz_entry::mesos_stream(data, paceline_hostmgr::mesos::Encoding::Protobuf);
}

/// An agent's session stream as the host manager reads it.
pub fn agent_host(data: &[u8]) {
    paceline_hostmgr::fuzz_entry::agent_stream(data);
}

/// The host manager's messages as the agent reads them: a `Launch` it
/// accepts survives the round trip.
pub fn agent_launch(data: &[u8]) {
    let mut rest = data;
    while let Ok(m) = agent_pb::ManagerMessage::decode_length_delimited(&mut rest) {
        if let Some(agent_pb::manager_message::Body::Launch(launch)) = m.body
            && let Ok(spec) = paceline_agent::RunSpec::from_launch(&launch)
        {
            assert_eq!(paceline_agent::RunSpec::from_launch(&spec.to_launch()).as_ref(), Ok(&spec));
        }
        if rest.is_empty() {
            break;
        }
    }
}

/// A simulator trace file.
pub fn trace(data: &[u8]) {
    let _ = paceline_sim::parse::read_all(std::io::Cursor::new(data));
}
