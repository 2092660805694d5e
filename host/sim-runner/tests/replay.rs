//! `paceline sim`'s runner over the real roles (job manager with the Wasm
//! lifecycles, resource manager, placement engine with the Wasm policies,
//! host manager over the `sim` provider): determinism, conservation, and a
//! scenario where `spread` and `binpack` must differ the way theory says.
//! Then one test per event type that changes the cluster while it runs
//! (policy swap, host failure and return, maintenance window, job update),
//! each asserting its effect on the replay, and the "arrive until full"
//! mode. Small traces: each replay takes seconds in a debug build.

use std::io::Cursor;

use paceline_sim::Report;
use paceline_sim::trace::{Event, Writer};
use paceline_sim_runner::{Arrival, Options, PolicySource, replay};

fn run(trace: &[u8], policies: &[(&str, &str)]) -> Report {
    run_with(trace, policies, Arrival::ByTime)
}

/// A replay with every task's runs listed (`Report::tasks`).
fn run_with(trace: &[u8], policies: &[(&str, &str)], arrival: Arrival) -> Report {
    let options = Options {
        policies: policies.iter().map(|(s, p)| (s.to_string(), PolicySource::Builtin(p.to_string()))).collect(),
        arrival,
        list_tasks: true,
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

#[test]
fn without_reproducible_only_the_wall_clock_section_can_differ() {
    // The default output keeps the wall-clock figures, each output's last
    // section; everything before it is the same bytes run after run.
    let trace = generated(24, 260, 11);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let replay_once = || rt.block_on(replay(Cursor::new(trace.clone()), Options::default())).expect("replay");
    let (a, b) = (replay_once(), replay_once());
    assert!(a.measured.is_some() && b.measured.is_some());
    let before = |text: String, marker: &str| -> String {
        let at = text.find(marker).unwrap_or_else(|| panic!("{marker:?} missing"));
        text[..at].to_string()
    };
    let json = |r: &Report| before(r.to_json(), "\n  \"measured\": {");
    assert_eq!(json(&a), json(&b), "the JSON up to its `measured` key");
    assert!(a.to_json().trim_end().ends_with('}') && json(&a).ends_with("],"), "`measured` is the last key");
    let html = |r: &Report| before(paceline_sim::render::html(r), "<h2>Measured</h2>");
    assert_eq!(html(&a), html(&b), "the HTML page up to its Measured section");
    let table = |r: &Report| before(paceline_sim::render::table_text(r), "\nmeasured (wall clock");
    assert_eq!(table(&a), table(&b), "the table up to its measured paragraph");
}

/// Issue 43: `sim compare` said "seed 0" for a trace generated with
/// `--seed 7` (the replay's seed, unnamed), and its terminal table left out
/// the fairness, plugin-call and wall-clock sections `sim run` prints.
#[test]
fn compare_names_both_seeds_and_prints_every_section_run_prints() {
    let trace = generated(24, 260, 7);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let replay_with = |policy: &str| {
        let options = Options {
            policies: vec![("placement".into(), PolicySource::Builtin(policy.into()))],
            ..Options::default()
        };
        rt.block_on(replay(Cursor::new(trace.clone()), options)).expect("replay")
    };
    let (a, b) = (replay_with("binpack"), replay_with("spread"));
    assert_eq!((a.trace_seed, a.seed), (Some(7), 0));
    assert!(a.to_json().contains("\"trace_seed\": 7"), "in the JSON report too");
    let html = paceline_sim::render::compare_html(&a, &b, ["binpack", "spread"]);
    assert!(html.contains("trace generated with seed 7, replay seed 0"), "{html}");
    assert!(paceline_sim::render::html(&a).contains("trace generated with seed 7, replay seed 0"));
    let table = paceline_sim::render::compare_table(&a, &b, ["binpack", "spread"]);
    assert!(table.contains("trace generated with seed 7, replay seed 0"), "{table}");
    let run = paceline_sim::render::table_text(&a);
    for section in ["pools against their entitlement", "plugin calls", "measured (wall clock"] {
        assert!(run.contains(section), "sim run prints {section:?}: {run}");
        assert!(table.contains(section), "sim compare prints {section:?} too: {table}");
    }
    for set in ["binpack", "spread"] {
        assert!(
            table.lines().any(|l| l.starts_with(&format!("{set} ")) && l.contains(&format!("{set}@"))),
            "plugin calls of {set}: {table}"
        );
    }
    // B - A in units: shares in percentage points.
    let line = table.lines().find(|l| l.starts_with("CPU allocated (mean)")).expect("CPU row");
    assert!(line.ends_with(" pp") || line.ends_with('='), "{line}");
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

const HEADER: &str = r#"{"format":"paceline-trace","version":1,"name":"events","source":"hand","duration_ms":600000}"#;

/// A trace: the header, pool `/p` (64 cores reserved), then `lines`.
fn trace(lines: &[String]) -> Vec<u8> {
    let mut t = format!(
        "{HEADER}\n{}\n",
        r#"{"at":0,"event":"pool","pool":{"path":"/p","reservation":{"cpu":64000,"memory":262144}}}"#
    );
    for l in lines {
        t.push_str(l);
        t.push('\n');
    }
    t.into_bytes()
}

fn host(at: u64, name: &str, cores: u64, zone: &str) -> String {
    format!(
        r#"{{"at":{at},"event":"host","name":"{name}","resources":{{"cpu_millis":{},"memory_mib":16384}},"attributes":{{"zone":"{zone}"}}}}"#,
        cores * 1_000
    )
}

/// A batch job of `n` tasks of `cores` each, running `ms` (absent: until killed).
fn job(at: u64, id: &str, kind: &str, n: u32, cores: u64, ms: Option<u64>) -> String {
    let run = ms.map_or(String::new(), |ms| format!(r#","run":{{"ms":{ms}}}"#));
    format!(
        r#"{{"at":{at},"event":"job","id":"{id}","spec":{{"name":"{id}","owner":"t","pool":"/p","kind":"{kind}","instance_count":{n},"default_task":{{"command":"x","resources":{{"cpu_millis":{},"memory_mib":1024}}}}}}{run}}}"#,
        cores * 1_000
    )
}

fn tasks_of<'a>(r: &'a Report, job: &str) -> Vec<&'a paceline_sim::report::TaskLife> {
    r.tasks.iter().filter(|t| t.job == job).collect()
}

/// Hosts of the job's first runs.
fn first_hosts(r: &Report, job: &str) -> std::collections::BTreeSet<String> {
    tasks_of(r, job).iter().filter_map(|t| t.runs.first().and_then(|run| run.host.clone())).collect()
}

#[test]
fn a_policy_swap_changes_placements_from_its_time_on() {
    // Eight 4-core hosts. Binpack puts job a's four 1-core tasks on one host;
    // after the swap to spread at 10 s, job b's four go to four hosts.
    let mut lines: Vec<String> = (0..8).map(|i| host(0, &format!("h{i}"), 4, ["a", "b"][i % 2])).collect();
    lines.push(job(0, "a", "batch", 4, 1, None));
    lines.push(r#"{"at":10000,"event":"policy","slot":"placement","plugin":"spread"}"#.into());
    lines.push(job(20_000, "b", "batch", 4, 1, None));
    lines.push(r#"{"at":60000,"event":"end"}"#.into());
    let r = run_with(&trace(&lines), &[("placement", "binpack")], Arrival::ByTime);
    assert!(r.policies.get("placement/batch").is_some_and(|p| p.starts_with("binpack@")), "{:?}", r.policies);
    assert_eq!(r.swaps, vec!["10000 ms: placement -> spread".to_string()]);
    assert_eq!(first_hosts(&r, "a").len(), 1, "binpack before the swap: {:?}", first_hosts(&r, "a"));
    let b = first_hosts(&r, "b");
    assert_eq!(b.len(), 4, "spread after the swap: {b:?}");
    assert!(
        r.plugins.iter().any(|p| p.slot == "placement/batch" && p.version.starts_with("spread@") && p.calls > 0),
        "the swapped-in policy answered rounds: {:?}",
        r.plugins
    );
    assert_eq!(r.outcomes.running, 8);
}

#[test]
fn a_failed_host_loses_its_runs_until_it_comes_back_and_they_are_placed_again() {
    // Two 4-core hosts, a job of two whole-host tasks. h0 fails at 10 s: its
    // run ends LOST; h1 is full, so the retry waits until h0 joins again at
    // 30 s, and nothing is placed on h0 while it is gone.
    let lines = vec![
        host(0, "h0", 4, "a"),
        host(0, "h1", 4, "a"),
        // Up to three restarts: the batch lifecycle counts a lost run as a failure.
        job(0, "j", "batch", 2, 4, Some(120_000)).replace(
            r#""command":"x","#,
            r#""command":"x","restart_policy":{"on_failure":true,"max_restarts":3,"backoff_secs":1},"#,
        ),
        r#"{"at":10000,"event":"host_down","name":"h0"}"#.to_string(),
        host(30_000, "h0", 4, "a"),
    ];
    let r = run_with(&trace(&lines), &[], Arrival::ByTime);
    let tasks = tasks_of(&r, "j");
    let hit: Vec<_> = tasks.iter().filter(|t| t.runs.first().and_then(|x| x.host.as_deref()) == Some("h0")).collect();
    assert_eq!(hit.len(), 1, "{tasks:#?}");
    let t = hit[0];
    assert_eq!(t.runs[0].end.as_deref(), Some("LOST"), "{t:#?}");
    assert_eq!(t.runs[0].ended_ms, Some(10_000), "{t:#?}");
    for run in &t.runs[1..] {
        if let Some(p) = run.placed_ms {
            assert!(p >= 30_000, "placed while its only possible host was down: {t:#?}");
        }
    }
    assert!(
        t.runs.iter().skip(1).any(|x| x.host.as_deref() == Some("h0") && x.end.as_deref() == Some("SUCCEEDED")),
        "re-placed on h0 once it was back, and ran to the end: {t:#?}"
    );
    assert_eq!(r.outcomes.succeeded, 2, "{:?}", r.outcomes);
    assert_eq!(r.outcomes.accounted(), r.outcomes.tasks);
    assert_eq!(r.hosts, 2, "a host that came back is one host");
}

#[test]
fn nothing_is_placed_on_a_host_during_its_maintenance_window() {
    // h0 drains at 5 s (empty, so it goes down) and comes back at 60 s. Job
    // w's six 1-core, 20 s tasks arrive at 10 s: four fit on h1, two wait
    // for them, none goes to h0. Job x arrives at 70 s and h0 takes some.
    let lines = vec![
        host(0, "h0", 4, "a"),
        host(0, "h1", 4, "a"),
        r#"{"at":5000,"event":"maintenance","name":"h0","state":"draining"}"#.to_string(),
        job(10_000, "w", "batch", 6, 1, Some(20_000)),
        r#"{"at":60000,"event":"maintenance","name":"h0","state":"up"}"#.to_string(),
        job(70_000, "x", "batch", 8, 1, Some(20_000)),
    ];
    let r = run_with(&trace(&lines), &[("placement", "spread")], Arrival::ByTime);
    let mut in_window = Vec::new();
    let mut after = 0;
    for t in &r.tasks {
        for run in &t.runs {
            if run.host.as_deref() == Some("h0")
                && let Some(p) = run.placed_ms
            {
                if (5_000..60_000).contains(&p) {
                    in_window.push((t.job.clone(), t.instance, p));
                } else if p >= 60_000 {
                    after += 1;
                }
            }
        }
    }
    assert!(in_window.is_empty(), "placed on h0 during its window: {in_window:?}");
    assert_eq!(after, 4, "job x fills both hosts once h0 is back");
    let w_waited = tasks_of(&r, "w").iter().filter(|t| t.runs[0].placed_ms.is_some_and(|p| p >= 30_000)).count();
    assert_eq!(w_waited, 2, "two of w's tasks waited for h1 rather than go to h0");
    assert_eq!(r.outcomes.succeeded, 14, "{:?}", r.outcomes);
}

#[test]
fn an_update_reruns_the_tasks_with_the_new_spec() {
    // h0 has 2 cores, h1 8. Service s runs two 1-core tasks; binpack puts
    // them together. At 30 s an update asks 3 cores per task: only h1 can
    // hold that, so every task's new run is on h1, and holds 3 cores.
    let lines = vec![
        host(0, "h0", 2, "a"),
        host(0, "h1", 8, "a"),
        job(0, "s", "stateless", 2, 1, None),
        r#"{"at":30000,"event":"update","job":"s","spec":{"name":"s","owner":"t","pool":"/p","kind":"stateless","instance_count":2,"default_task":{"command":"x2","resources":{"cpu_millis":3000,"memory_mib":1024}}}}"#.to_string(),
        r#"{"at":300000,"event":"end"}"#.to_string(),
    ];
    let r = run_with(&trace(&lines), &[("placement", "binpack")], Arrival::ByTime);
    let tasks = tasks_of(&r, "s");
    assert_eq!(tasks.len(), 2);
    for t in &tasks {
        let last = t.runs.last().expect("runs");
        assert!(t.runs.len() >= 2, "a new run for the new config: {t:#?}");
        assert!(last.placed_ms.is_some_and(|p| p >= 30_000), "{t:#?}");
        assert_eq!(last.host.as_deref(), Some("h1"), "3 cores fit only on h1: {t:#?}");
        assert_eq!(t.demand.cpu_millis, 3_000);
        assert_eq!(t.outcome, paceline_sim::report::Outcome::Running);
    }
    let cpu_at_end = *r.series.cpu.last().expect("samples");
    assert_eq!(cpu_at_end, 0.6, "6 of 10 cores held after the update");
}

/// `hosts` hosts of 4 cores and 4 GPUs; then, in order, `hosts` jobs of one
/// task of 1 core and 1 GPU, and `hosts - 2` jobs of one whole-host task.
/// Spread puts every small task on its own host and leaves no host whole;
/// binpack packs them onto two hosts and fits every large task too.
fn fill_trace(hosts: usize) -> Vec<u8> {
    let mut t = format!(
        "{}\n{}\n",
        r#"{"format":"paceline-trace","version":1,"name":"fill","source":"hand"}"#,
        r#"{"at":0,"event":"pool","pool":{"path":"/p","reservation":{"cpu":1000000,"memory":10000000,"gpu":1000}}}"#
    );
    for i in 0..hosts {
        t += &format!(
            r#"{{"at":0,"event":"host","name":"h{i}","resources":{{"cpu_millis":4000,"memory_mib":16384,"gpus":4}}}}"#
        );
        t.push('\n');
    }
    let task = |at: usize, id: String, cpu: u64, gpus: u64| {
        format!(
            r#"{{"at":{at},"event":"job","id":"{id}","spec":{{"name":"{id}","owner":"t","pool":"/p","instance_count":1,"default_task":{{"command":"x","resources":{{"cpu_millis":{cpu},"memory_mib":1024,"gpus":{gpus}}}}}}},"run":{{"ms":1000}}}}"#
        )
    };
    // Arrival times far apart: replayed by time, each would end before the next.
    for i in 0..hosts {
        t += &task(i * 3_600_000, format!("small-{i}"), 1_000, 1);
        t.push('\n');
    }
    for i in 0..hosts - 2 {
        t += &task((hosts + i) * 3_600_000, format!("large-{i}"), 4_000, 4);
        t.push('\n');
    }
    t += r#"{"at":999999999,"event":"kill","job":"small-0"}"#;
    t.push('\n');
    t.into_bytes()
}

#[test]
fn arriving_until_full_binpack_fits_more_than_spread() {
    let trace = fill_trace(6);
    let stop = Arrival::UntilFull { stop_at_first_unplaced: true, until_gpu_pct: None, shuffle: None };
    let binpack = run_with(&trace, &[("placement", "binpack")], stop);
    let spread = run_with(&trace, &[("placement", "spread")], stop);
    let (fb, fs) = (binpack.fill.as_ref().expect("fill figures"), spread.fill.as_ref().expect("fill figures"));
    assert_eq!((fb.jobs_submitted, fb.jobs_placed, fb.tasks_placed), (10, 10, 10), "{fb:?}");
    assert_eq!(fb.first_unplaced, None);
    assert_eq!((fb.cpu_cores, fb.gpus, fb.gpu_share), (22.0, 22.0, 0.9167), "{fb:?}");
    assert_eq!((fs.jobs_submitted, fs.jobs_placed, fs.tasks_placed), (7, 6, 6), "{fs:?}");
    assert_eq!(fs.first_unplaced.as_deref(), Some("large-0"), "no host left whole");
    assert_eq!((fs.cpu_cores, fs.gpus), (6.0, 6.0));
    assert_eq!(spread.outcomes.never_placed, 1, "{:?}", spread.outcomes);
    assert_eq!(spread.outcomes.running, 6, "nothing ends in this mode");

    // Going on past the first misfit: spread fits no large task at all.
    let on = Arrival::UntilFull { stop_at_first_unplaced: false, until_gpu_pct: None, shuffle: None };
    let spread_all = run_with(&trace, &[("placement", "spread")], on);
    let f = spread_all.fill.as_ref().expect("fill figures");
    assert_eq!((f.jobs_submitted, f.jobs_placed, f.tasks_placed), (10, 6, 6), "{f:?}");
    assert_eq!(spread_all.outcomes.never_placed, 4);
    assert!(
        spread_all.never_placed.by_reason.keys().all(|r| r.starts_with("did not fit whole when it arrived")),
        "{:?}",
        spread_all.never_placed.by_reason
    );
    assert_eq!(spread_all.summary.preemptions, 0, "nothing is preempted to make room");
    assert_eq!(f.dropped.get("kill"), Some(&1), "a kill is about time: not replayed");

    // The series of a fill are thinned to the samples asked for; the fill's figures do not move.
    let options = Options {
        policies: vec![("placement".into(), PolicySource::Builtin("spread".into()))],
        arrival: on,
        samples: 4,
        ..Options::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let thinned = rt.block_on(replay(Cursor::new(trace.clone()), options)).expect("replay");
    assert!(spread_all.series.t_ms.len() > 5, "{:?}", spread_all.series.t_ms);
    assert!(thinned.series.t_ms.len() <= 5, "{:?}", thinned.series.t_ms);
    assert_eq!(thinned.series.t_ms.last(), spread_all.series.t_ms.last(), "the last sample is kept");
    assert_eq!(thinned.fill, spread_all.fill);

    // Replayed by time, the same trace cannot tell them apart: each task ends before the next arrives.
    let by_time = [run(&trace, &[("placement", "binpack")]), run(&trace, &[("placement", "spread")])];
    for r in &by_time {
        assert_eq!(r.outcomes.succeeded, 10, "{:?}", r.outcomes);
        assert!(r.fill.is_none());
    }
}

/// GPU sharing (decision 0035) through the whole pipeline: two hosts of one
/// GPU device each, of different models; jobs arrive one after another and
/// nothing ends. The host of each task comes from the report.
/// Non-preemptible work is admitted within its pool's reservation: the
/// pool reserves `reserved_milli` milli-GPUs.
fn gpu_trace(reserved_milli: u64) -> Vec<u8> {
    let mut t = String::from(r#"{"format":"paceline-trace","version":1,"name":"gpu-sharing","source":"hand"}"#);
    t.push('\n');
    t += &format!(
        r#"{{"at":0,"event":"pool","pool":{{"path":"/p","reservation":{{"cpu":64000,"memory":65536,"gpu_milli":{reserved_milli}}}}}}}"#
    );
    t.push('\n');
    for (name, model) in [("h-a", "A100"), ("h-b", "T4")] {
        t += &format!(
            r#"{{"at":0,"event":"host","name":"{name}","resources":{{"cpu_millis":16000,"memory_mib":32768,"gpus":1}},"attributes":{{"gpu_model":"{model}"}}}}"#
        );
        t.push('\n');
    }
    let job = |id: &str, milli: u64, models: &str| {
        format!(
            r#"{{"at":0,"event":"job","id":"{id}","spec":{{"name":"{id}","owner":"t","pool":"/p","instance_count":1,"default_task":{{"command":"x","resources":{{"cpu_millis":1000,"memory_mib":1024,"gpu_milli":{milli}}}{models}}}}},"run":{{"ms":1000}}}}"#
        )
    };
    for line in [
        job("half-1", 500, ""),
        job("half-2", 500, ""),
        job("half-3", 500, ""),
        job("whole-1", 1000, ""),
        job("quarter-t4", 250, r#","gpu_models":["T4"]"#),
    ] {
        t += &line;
        t.push('\n');
    }
    t.into_bytes()
}

fn host_of(r: &Report, job: &str) -> Option<String> {
    r.tasks.iter().find(|t| t.job == job)?.runs.iter().find_map(|run| run.host.clone())
}

#[test]
fn gpu_shares_share_a_device_whole_gpus_never_land_on_a_shared_one_and_models_are_honoured() {
    let keep_going = Arrival::UntilFull { stop_at_first_unplaced: false, until_gpu_pct: None, shuffle: None };
    for policy in ["binpack", "gang-gpu", "gpu-fgd", "gpu-packing"] {
        let r = run_with(&gpu_trace(2000), &[("placement", policy)], keep_going);
        let (h1, h2, h3) = (host_of(&r, "half-1"), host_of(&r, "half-2"), host_of(&r, "half-3"));
        assert!(h1.is_some() && h1 == h2, "{policy}: two halves share one device: {h1:?} {h2:?}");
        assert!(h3.is_some() && h3 != h1, "{policy}: the third half goes to the other host's device: {h3:?}");
        // Each device holds half a GPU or more now: no device is wholly free.
        assert_eq!(host_of(&r, "whole-1"), None, "{policy}: a whole GPU never goes to a shared device");
        assert_eq!(host_of(&r, "quarter-t4").as_deref(), Some("h-b"), "{policy}: only the T4 host takes it");
        let f = r.fill.as_ref().expect("fill figures");
        assert_eq!((f.jobs_placed, f.gpus, f.gpu_share), (4, 1.75, 0.875), "{policy}: {f:?}");
        let curve = &f.gpu_curve;
        assert!(!curve.is_empty() && curve.iter().all(|p| p.allocated <= p.arrived), "{policy}: {curve:?}");
    }
}

#[test]
fn a_pool_reservation_in_milli_gpus_admits_shares_up_to_it() {
    // The pool reserves 1,000 milli-GPU: two halves, then nothing more.
    let keep_going = Arrival::UntilFull { stop_at_first_unplaced: false, until_gpu_pct: None, shuffle: None };
    let r = run_with(&gpu_trace(1000), &[("placement", "binpack")], keep_going);
    let placed: Vec<&str> =
        r.tasks.iter().filter(|t| t.runs.iter().any(|run| run.host.is_some())).map(|t| t.job.as_str()).collect();
    assert_eq!(placed, vec!["half-1", "half-2"], "{:?}", r.never_placed);
    assert_eq!(r.fill.as_ref().expect("fill").gpus, 1.0);
}

#[test]
fn arriving_until_a_gpu_share_offers_the_trace_again() {
    // 3 × 500 + 1,000 + 250 asked per pass on 2,000 of capacity: the second
    // pass starts, and the fill stops once 150% has arrived.
    let until = Arrival::UntilFull { stop_at_first_unplaced: false, until_gpu_pct: Some(150), shuffle: None };
    let r = run_with(&gpu_trace(2000), &[("placement", "binpack")], until);
    let f = r.fill.as_ref().expect("fill figures");
    assert!(f.jobs_submitted > 5, "the trace was offered again: {f:?}");
    let last = f.gpu_curve.last().expect("curve");
    assert!(last.arrived >= 1.5, "{f:?}");
    assert_eq!(f.gpu_at_full.map(|p| p.arrived >= 1.0), Some(true), "{f:?}");
    assert!(r.tasks.iter().any(|t| t.job.ends_with(".r2")), "second-pass jobs are named apart");
}

#[test]
fn shuffled_arrivals_follow_the_seed() {
    // The jobs in the order they arrived (each arrives after the one before is settled).
    let order = |shuffle: Option<u64>| {
        let mode = Arrival::UntilFull { stop_at_first_unplaced: false, until_gpu_pct: None, shuffle };
        let r = run_with(&gpu_trace(5000), &[("placement", "binpack")], mode);
        let mut arrived: Vec<(u64, String)> = r.tasks.iter().map(|t| (t.arrived_ms, t.job.clone())).collect();
        arrived.sort();
        arrived.into_iter().map(|(_, job)| job).collect::<Vec<_>>()
    };
    let plain = order(None);
    assert_eq!(plain, ["half-1", "half-2", "half-3", "whole-1", "quarter-t4"]);
    let seven = order(Some(7));
    assert_eq!(seven, order(Some(7)), "the same seed gives the same order");
    let mut same_jobs = seven.clone();
    same_jobs.sort();
    let mut expected = plain.clone();
    expected.sort();
    assert_eq!(same_jobs, expected, "every job arrives once");
    assert!((1..6).any(|seed| order(Some(seed)) != plain), "some seed changes the order");
}
