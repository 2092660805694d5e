//! AFL++ harness for `paceline_fuzz_afl::agent_launch`.
fn main() {
    afl::fuzz!(|data: &[u8]| paceline_fuzz_afl::agent_launch(data));
}
