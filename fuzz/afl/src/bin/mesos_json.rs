//! AFL++ harness for `paceline_fuzz_afl::mesos_json`.
fn main() {
    afl::fuzz!(|data: &[u8]| paceline_fuzz_afl::mesos_json(data));
}
