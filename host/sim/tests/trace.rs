//! The trace format end to end without a cluster: malformed lines name the
//! line and the field; generated and imported traces read back as written;
//! each public schema's importer maps a sample written here from its
//! published schema.

use std::io::Cursor;

use paceline_model::Constraint;
use paceline_sim::import::{alibaba2018, openb};
use paceline_sim::parse::{TraceError, read_all};
use paceline_sim::trace::{Event, Writer};

const HEADER: &str = r#"{"format":"paceline-trace","version":1,"name":"t"}"#;

fn error_of(lines: &[&str]) -> TraceError {
    let text = lines.join("\n");
    match read_all(Cursor::new(text)) {
        Err(e) => e,
        Ok(_) => panic!("expected an error for {lines:?}"),
    }
}

#[test]
fn malformed_traces_name_the_line_and_the_field() {
    // (lines, line, field, words the message has)
    let job = r#"{"at":5,"event":"job","id":"j","spec":{"name":"j","owner":"o","pool":"/p","instance_count":1,"default_task":{"command":"x"}}}"#;
    let host = r#"{"at":0,"event":"host","name":"h","resources":{"cpu_millis":1000}}"#;
    let down = r#"{"at":0,"event":"host_down","name":"h"}"#;
    let cases: Vec<(Vec<&str>, u64, &str, &str)> = vec![
        (vec![r#"{"format":"other","version":1}"#], 1, "format", "header"),
        (vec![r#"{"format":"paceline-trace","version":9}"#], 1, "version", "version 9"),
        (vec![HEADER, "not json"], 2, "-", "JSON"),
        (vec![HEADER, r#"{"event":"end"}"#], 2, "at", "missing"),
        (vec![HEADER, r#"{"at":-1,"event":"end"}"#], 2, "at", "whole number"),
        (vec![HEADER, r#"{"at":0,"event":"hosts"}"#], 2, "event", "not an event"),
        (
            vec![HEADER, r#"{"at":0,"event":"host","name":"h","resources":{"cpu_millis":"many"}}"#],
            2,
            "resources.cpu_millis",
            "invalid type",
        ),
        (vec![HEADER, r#"{"at":0,"event":"host","name":"h","resources":{},"zone":"a"}"#], 2, "zone", "unknown field"),
        (vec![HEADER, job, r#"{"at":4,"event":"kill","job":"j"}"#], 3, "at", "never decrease"),
        (vec![HEADER, r#"{"at":0,"event":"kill","job":"nobody"}"#], 2, "job", "no job `nobody`"),
        (
            vec![
                HEADER,
                r#"{"at":0,"event":"job","id":"j","spec":{"name":"j","owner":"o","pool":"/p","instance_count":1,"default_task":{"command":"x","resources":{"cpu_millis":1,"gpu":2}}}}"#,
            ],
            2,
            "spec.default_task.resources.gpu",
            "unknown field",
        ),
        (
            vec![
                HEADER,
                r#"{"at":0,"event":"job","id":"j","spec":{"name":"j","owner":"o","pool":"nopath","instance_count":1,"default_task":{"command":"x"}}}"#,
            ],
            2,
            "spec",
            "pool",
        ),
        (
            vec![
                HEADER,
                r#"{"at":0,"event":"job","id":"j","spec":{"name":"j","owner":"o","pool":"/p","instance_count":2,"default_task":{"command":"x"}},"runs":[{"ms":1}]}"#,
            ],
            2,
            "runs",
            "one per instance",
        ),
        (vec![HEADER, job, job], 3, "id", "arrived already"),
        (
            vec![HEADER, r#"{"at":0,"event":"pool","pool":{"path":"/a","share":{"cpu":0}}}"#],
            2,
            // Pool kinds are named in one vocabulary (`cpu` reads as `cpu_millis`).
            "pool.share.cpu_millis",
            "at least 1",
        ),
        (vec![HEADER, r#"{"at":0,"event":"host_down","name":"ghost"}"#], 2, "name", "no host `ghost`"),
        (vec![HEADER, host, host], 3, "name", "joined already"),
        (vec![HEADER, host, down, down], 4, "name", "down already"),
    ];
    for (lines, line, field, words) in cases {
        let e = error_of(&lines);
        assert_eq!(e.line(), Some(line), "{lines:?}: {e}");
        assert_eq!(e.field(), Some(field), "{lines:?}: {e}");
        assert!(e.to_string().contains(words), "{lines:?}: `{e}` should say `{words}`");
        assert!(e.to_string().starts_with(&format!("line {line}, field `{field}`")), "{e}");
    }
    assert!(matches!(error_of(&[]), TraceError::Empty));
    // A failed host may join again.
    let back = [HEADER, host, down, host].join("\n");
    assert!(read_all(Cursor::new(back)).is_ok());
}

#[test]
fn a_generated_trace_reads_back_as_it_was_written() {
    let cfg = paceline_sim::generate::GenConfig { hosts: 12, tasks: 150, ..Default::default() };
    let (header, events) = paceline_sim::generate::generate(&cfg);
    let mut w = Writer::new(Vec::new(), &header).expect("header");
    for e in &events {
        w.event(e.at, &e.event).expect("event");
    }
    let bytes = w.finish().expect("finish");
    let (h2, e2) = read_all(Cursor::new(&bytes)).expect("reads back");
    assert_eq!(h2, header);
    assert_eq!(e2, events);
    // Compact: a job line carries what differs from the job YAML's defaults only.
    let text = String::from_utf8(bytes).expect("utf-8");
    let job_line = text.lines().find(|l| l.contains(r#""event":"job""#)).expect("a job line");
    assert!(!job_line.contains("health_check") && !job_line.contains("plugin_overrides"), "{job_line}");
}

const OPENB_NODES: &str = "sn,cpu_milli,memory_mib,gpu,model
openb-node-0000,32000,262144,0,
openb-node-0001,96000,786432,8,V100M32
openb-node-0002,128000,786432,8,G3
";

const OPENB_PODS: &str =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
openb-pod-0000,12000,16384,1,1000,,LS,Running,100,1100,100
openb-pod-0001,6000,12288,1,460,,BE,Succeeded,150,400,160
openb-pod-0002,16000,32768,2,1000,V100M16|V100M32,Burstable,Failed,200,260,205
openb-pod-0003,4000,8192,0,0,,BE,Pending,300,900,
";

#[test]
fn openb_sample_maps_nodes_pods_and_fractional_gpus() {
    let imported =
        openb::import(Cursor::new(OPENB_NODES), Cursor::new(OPENB_PODS), &openb::Options::default()).expect("imports");
    let hosts: Vec<_> = imported
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Host(h) => Some(h),
            _ => None,
        })
        .collect();
    assert_eq!(hosts.len(), 3);
    assert_eq!((hosts[1].resources.cpu_millis, hosts[1].resources.gpu_milli), (96_000, 8_000));
    assert_eq!(hosts[1].attributes.get("gpu_model").map(String::as_str), Some("V100M32"));
    assert!(!hosts[0].attributes.contains_key("gpu_model"), "a CPU node has no model");
    let jobs: Vec<(u64, &paceline_sim::trace::JobEvent)> = imported
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Job(j) => Some((e.at, j.as_ref())),
            _ => None,
        })
        .collect();
    assert_eq!(jobs.len(), 4, "every pod, fractional ones as shares");
    let (at, frac) = jobs[1];
    assert_eq!(at, 50_000, "arrival relative to the first creation, in ms");
    assert_eq!((frac.spec.default_task.resources.gpu_milli, frac.gpu_milli), (460, Some(460)), "a share of one device");
    assert_eq!(frac.run.ms, Some(240_000), "deletion - scheduled");
    assert!(frac.spec.sla.preemptible, "BE is preemptible");
    let (_, typed) = jobs[2];
    assert_eq!(typed.run.exit, 1, "Failed exits 1");
    assert_eq!(
        typed.spec.default_task.constraints,
        vec![Constraint::AttributeIn { key: "gpu_model".into(), values: vec!["V100M16".into(), "V100M32".into()] }]
    );
    let (_, pending) = jobs[3];
    assert_eq!(pending.run.ms, Some(600_000), "never scheduled: from creation");
    assert!(
        imported.summary.iter().any(|s| s.contains("fractional GPU: a share of one device: 1")),
        "{:?}",
        imported.summary
    );

    let dropped = openb::import(
        Cursor::new(OPENB_NODES),
        Cursor::new(OPENB_PODS),
        &openb::Options { fractional: openb::Fractional::Drop, ..Default::default() },
    )
    .expect("imports");
    let n = dropped.events.iter().filter(|e| matches!(e.event, Event::Job(_))).count();
    assert_eq!(n, 3);
    assert!(dropped.header.notes.iter().any(|s| s.contains("dropped: fractional GPU: 1")));

    let bad = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\nopenb-pod-9,lots,1,0,0,,BE,Running,0,1,0\n";
    let e = openb::import(Cursor::new(OPENB_NODES), Cursor::new(bad), &openb::Options::default()).expect_err("bad row");
    assert_eq!(e.to_string(), "pod list, line 2, column `cpu_milli`: `lots`: invalid digit found in string");
}

// machine_id, time_stamp, failure_domain_1, failure_domain_2, cpu_num, mem_size, status
const MACHINES: &str = "m_1,0,1,A,96,100,USING
m_2,0,2,B,64,50,USING
m_1,3600,1,A,96,100,USING
m_3,120,1,C,96,100,USING
";

// task_name, instance_num, job_name, task_type, status, start_time, end_time, plan_cpu, plan_mem
const TASKS: &str = "M1,2,j_1,1,Terminated,100,160,100,0.39
R2_1,1,j_1,1,Terminated,170,200,50,0.2
M1,1,j_2,12,Failed,150,151,200,1.5
M3,5,j_3,1,Running,180,0,100,0.5
task_X,1,j_4,1,Terminated,90,95,0,0.1
";

#[test]
fn alibaba_2018_sample_maps_machines_and_batch_tasks() {
    let imported = alibaba2018::import(Cursor::new(MACHINES), Cursor::new(TASKS), &alibaba2018::Options::default())
        .expect("imports");
    let hosts: Vec<(u64, &paceline_sim::trace::HostEvent)> = imported
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Host(h) => Some((e.at, h)),
            _ => None,
        })
        .collect();
    assert_eq!(hosts.len(), 3, "one host per machine; later rows dropped");
    assert_eq!(hosts[0].1.resources.cpu_millis, 96_000);
    assert_eq!(hosts[1].1.resources.memory_mib, 51_200, "50 units x 1024 MiB");
    assert_eq!(hosts[2].0, 120_000, "m_3 joins at its first time_stamp");
    assert_eq!(hosts[0].1.attributes.get("zone").map(String::as_str), Some("1"));
    let jobs: Vec<(u64, &paceline_sim::trace::JobEvent)> = imported
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Job(j) => Some((e.at, j.as_ref())),
            _ => None,
        })
        .collect();
    let ids: Vec<&str> = jobs.iter().map(|(_, j)| j.id.as_str()).collect();
    assert_eq!(ids, vec!["j_1.M1", "j_2.M1", "j_1.R2_1"], "in start order; running and CPU-less tasks dropped");
    assert_eq!(jobs[0].0, 100_000);
    assert_eq!(jobs[0].1.spec.instance_count, 2);
    assert_eq!(jobs[0].1.spec.default_task.resources.cpu_millis, 1_000, "plan_cpu 100 is one core");
    assert_eq!(jobs[0].1.run.ms, Some(60_000));
    assert_eq!(jobs[1].1.run.exit, 1, "Failed exits 1");
    let notes = imported.header.notes.join("\n");
    assert!(notes.contains("never ended") && notes.contains("no CPU") && notes.contains("DAG"), "{notes}");

    let bad = "M1,two,j_1,1,Terminated,100,160,100,0.39\n";
    let e = alibaba2018::import(Cursor::new(MACHINES), Cursor::new(bad), &alibaba2018::Options::default())
        .expect_err("bad row");
    assert!(e.to_string().starts_with("batch_task.csv, line 1, column `instance_num`"), "{e}");
}
