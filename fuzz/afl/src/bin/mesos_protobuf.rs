//! AFL++ harness for `paceline_fuzz_afl::mesos_protobuf`.
fn main() {
    afl::fuzz!(|data: &[u8]| paceline_fuzz_afl::mesos_protobuf(data));
}
