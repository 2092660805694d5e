//! AFL++ harness for `paceline_fuzz_afl::jobspec_yaml`.
fn main() {
    afl::fuzz!(|data: &[u8]| paceline_fuzz_afl::jobspec_yaml(data));
}
