//! Fuzz target `trace`: the trace reader on generated traces with bytes
//! flipped, lines cut, dropped or repeated, and on arbitrary bytes.
//!
//! Property: reading never panics; it returns a trace or an error naming
//! the line. `scripts/fuzz trace MINUTES` runs it long with fresh seeds.

use std::io::Cursor;

use paceline_sim::parse::read_all;
use paceline_sim::trace::Writer;
use proptest::prelude::*;

fn sample() -> Vec<u8> {
    let cfg = paceline_sim::generate::GenConfig { hosts: 4, tasks: 20, ..Default::default() };
    let (header, events) = paceline_sim::generate::generate(&cfg);
    let mut w = Writer::new(Vec::new(), &header).expect("header");
    for e in &events {
        w.event(e.at, &e.event).expect("event");
    }
    w.finish().expect("finish")
}

proptest! {
    // Cases from PROPTEST_CASES (scripts/fuzz), else proptest's 256.
    #![proptest_config(ProptestConfig::default())]

    #[test]
    fn mutated_traces_never_panic(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
        cut in any::<prop::sample::Index>(),
        dup in any::<prop::sample::Index>(),
    ) {
        let mut bytes = sample();
        for (at, b) in flips {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
        let d = dup.index(lines.len());
        let mut text: Vec<u8> = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            text.extend_from_slice(l);
            text.push(b'\n');
            if i == d {
                text.extend_from_slice(l);
                text.push(b'\n');
            }
        }
        let cut = cut.index(text.len() + 1);
        let _ = read_all(Cursor::new(&text[..cut]));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut text = br#"{"format":"paceline-trace","version":1,"name":"t"}"#.to_vec();
        text.push(b'\n');
        text.extend_from_slice(&bytes);
        let _ = read_all(Cursor::new(&text));
        let _ = read_all(Cursor::new(&bytes));
    }
}

/// Every file in `fuzz/corpus/trace` (the seed, inputs AFL++ found, crash
/// reproducers) reads without a panic.
#[test]
fn the_corpus_replays() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/trace");
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let bytes = std::fs::read(entry.path()).expect("corpus file");
        let _ = read_all(Cursor::new(&bytes));
    }
}

/// Writes the seed into `fuzz/corpus/trace` (for AFL++ and the replay above).
#[test]
#[ignore = "writes the seed file; run by hand after changing the sample"]
fn write_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/trace");
    std::fs::create_dir_all(&dir).expect("corpus dir");
    std::fs::write(dir.join("seed"), sample()).expect("seed");
}
