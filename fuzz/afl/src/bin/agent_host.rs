//! AFL++ harness for `paceline_fuzz_afl::agent_host`.
fn main() {
    afl::fuzz!(|data: &[u8]| paceline_fuzz_afl::agent_host(data));
}
