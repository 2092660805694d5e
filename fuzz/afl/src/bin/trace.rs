//! AFL++ harness for `paceline_fuzz_afl::trace`.
fn main() {
    afl::fuzz!(|data: &[u8]| paceline_fuzz_afl::trace(data));
}
