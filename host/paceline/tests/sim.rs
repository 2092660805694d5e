//! `paceline sim`'s runner over the real roles (job manager with the Wasm
//! lifecycles, resource manager, placement engine with the Wasm policies,
//! host manager over the `sim` provider): determinism, conservation, and a
//! scenario where `spread` and `binpack` must differ the way theory says.
//! Small traces: each replay takes seconds in a debug build.

use std::io::Cursor;

use paceline::sim::{Options, PolicySource, replay};
use paceline_sim::Report;
use paceline_sim::trace::{Event, Writer};

fn run(trace: &[u8], policies: &[(&str, &str)]) -> Report {
    let options = Options {
        policies: policies.iter().map(|(s, p)| (s.to_string(), PolicySource::Builtin(p.to_string()))).collect(),
        ..Options::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let mut report = rt.block_on(replay(Cursor::new(trace.to_vec()), options)).expect("replay");
    assert!(report.measured.is_some(), "wall-clock figures are measured");
    report.measured = None;
    report
}

fn generated(hosts: usize, tasks: u64, seed: u64) -> Vec<u8> {
    let cfg = paceline_sim::generate::GenConfig {
        seed,
        hosts,
        tasks,
        duration_ms: 1_800_000,
        load: 0.9,
        ..Default::default()
    };
    let (header, events) = paceline_sim::generate::generate(&cfg);
    let mut w = Writer::new(Vec::new(), &header).expect("header");
    for e in &events {
        w.event(e.at, &e.event).expect("event");
    }
    w.finish().expect("bytes")
}

#[test]
fn the_same_trace_and_policies_give_the_same_bytes_and_every_task_is_accounted_for() {
    let trace = generated(24, 260, 7);
    let a = run(&trace, &[]);
    let b = run(&trace, &[]);
    assert_eq!(a.to_json(), b.to_json(), "two replays, same bytes");
    assert_eq!(paceline_sim::render::html(&a), paceline_sim::render::html(&b));

    // Conservation: every task of the trace is in exactly one outcome.
    let (_, events) = paceline_sim::parse::read_all(Cursor::new(&trace)).expect("trace");
    let tasks: u64 = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Job(j) => Some(u64::from(j.spec.instance_count)),
            _ => None,
        })
        .sum();
    let o = &a.outcomes;
    assert_eq!(o.tasks, tasks, "{o:?}");
    assert_eq!(o.accounted(), tasks, "{o:?}");
    assert_eq!(o.never_placed, a.never_placed.by_reason.values().sum::<u64>(), "each never-placed task has a reason");
    assert!(a.never_placed.by_reason.keys().all(|r| !r.is_empty()));
    assert!(o.succeeded > 0 && a.summary.placements >= o.succeeded, "{o:?}");
    assert!(o.killed > 0, "the services were killed at the end of their lives: {o:?}");
    assert!(
        a.plugins.iter().any(|p| p.slot == "placement/batch" && p.calls > 0),
        "the Wasm policy placed: {:?}",
        a.plugins
    );
    assert!(a.plugins.iter().any(|p| p.slot == "lifecycle/batch" && p.calls > 0));
    assert!(!a.series.t_ms.is_empty() && a.series.cpu.iter().any(|c| *c > 0.0));
}

/// 8 hosts of 4 cores in zones a and b. At 0 a job of 4 one-core tasks
/// arrives, at 10 s a job of 6 whole-host tasks; the replay ends at 10 min,
/// before anything finishes. Binpack puts the four small tasks on one host
/// and places all six large ones; spread puts them on four hosts, leaving
/// no host whole for two of the large ones: 12 cores stranded, and its small
/// job spread over both zones where binpack's sits in one.
const FRAGMENTS: &str = r#"{"format":"paceline-trace","version":1,"name":"fragments","source":"hand","duration_ms":600000}
{"at":0,"event":"pool","pool":{"path":"/p","reservation":{"cpu":32000,"memory":131072}}}
{"at":0,"event":"host","name":"h0","resources":{"cpu_millis":4000,"memory_mib":16384},"attributes":{"zone":"a"}}
{"at":0,"event":"host","name":"h1","resources":{"cpu_millis":4000,"memory_mib":16384},"attributes":{"zone":"b"}}
{"at":0,"event":"host","name":"h2","resources":{"cpu_millis":4000,"memory_mib":16384},"attributes":{"zone":"a"}}
{"at":0,"event":"host","name":"h3","resources":{"cpu_millis":4000,"memory_mib":16384},"attributes":{"zone":"b"}}
{"at":0,"event":"host","name":"h4","resources":{"cpu_millis":4000,"memory_mib":16384},"attributes":{"zone":"a"}}
{"at":0,"event":"host","name":"h5","resources":{"cpu_millis":4000,"memory_mib":16384},"attributes":{"zone":"b"}}
{"at":0,"event":"host","name":"h6","resources":{"cpu_millis":4000,"memory_mib":16384},"attributes":{"zone":"a"}}
{"at":0,"event":"host","name":"h7","resources":{"cpu_millis":4000,"memory_mib":16384},"attributes":{"zone":"b"}}
{"at":0,"event":"job","id":"small","spec":{"name":"small","owner":"t","pool":"/p","instance_count":4,"default_task":{"command":"x","resources":{"cpu_millis":1000,"memory_mib":1024}}},"run":{"ms":3600000}}
{"at":10000,"event":"job","id":"large","spec":{"name":"large","owner":"t","pool":"/p","instance_count":6,"default_task":{"command":"x","resources":{"cpu_millis":4000,"memory_mib":4096}}},"run":{"ms":3600000}}
{"at":600000,"event":"end"}
"#;

#[test]
fn spread_strands_capacity_that_binpack_keeps_whole_and_spreads_over_more_zones() {
    let binpack = run(FRAGMENTS.as_bytes(), &[("placement", "binpack")]);
    let spread = run(FRAGMENTS.as_bytes(), &[("placement", "spread")]);
    assert!(
        binpack.policies.get("placement/batch").is_some_and(|p| p.starts_with("binpack@")),
        "{:?}",
        binpack.policies
    );
    assert!(spread.policies.get("placement/batch").is_some_and(|p| p.starts_with("spread@")), "{:?}", spread.policies);
    assert_eq!(binpack.outcomes.never_placed, 0, "binpack placed everything: {:?}", binpack.never_placed);
    assert_eq!(binpack.outcomes.running, 10);
    assert_eq!(spread.outcomes.never_placed, 2, "{:?}", spread.outcomes);
    assert_eq!(
        spread.never_placed.by_reason.keys().collect::<Vec<_>>(),
        vec!["placement: insufficient_resources"],
        "why: no host had room"
    );
    assert_eq!(spread.summary.stranded_cpu_cores.peak, 12.0, "four hosts with 3 free cores each, none fits 4");
    assert_eq!(binpack.summary.stranded_cpu_cores.peak, 0.0);
    assert!(
        spread.summary.spread_mean_values > binpack.summary.spread_mean_values,
        "spread {} vs binpack {}",
        spread.summary.spread_mean_values,
        binpack.summary.spread_mean_values
    );
    assert_eq!(spread.summary.spread_multi_share, 1.0, "both of spread's jobs span the two zones");
    assert!(binpack.summary.spread_multi_share < 1.0, "binpack's small job sits in one zone");
    // The comparison renders both, side by side.
    let html = paceline_sim::render::compare_html(&binpack, &spread, ["binpack", "spread"]);
    assert!(html.contains("<svg") && html.contains("binpack: ") && html.contains("spread: "));
    assert!(
        !html.contains("src=") && !html.contains("<link") && !html.contains("<script"),
        "nothing fetched at view time"
    );
}
