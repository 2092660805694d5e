//! Alibaba `cluster-trace-v2018`, batch workloads: `machine_meta.csv` and
//! `batch_task.csv`, CSV without a header row, columns in the order of that
//! repository's `schema.txt`.
//!
//! | 2018 | trace |
//! |---|---|
//! | machine `machine_id` (first row of each) | host `name`, joining at its `time_stamp` (s → ms) |
//! | machine `cpu_num` | `resources.cpu_millis` = cpu_num × 1000 |
//! | machine `mem_size` (normalised 0–100) | `resources.memory_mib` = mem_size × `memory_mib_per_unit` |
//! | machine `failure_domain_1`, `failure_domain_2` | attributes `zone` (= failure_domain_1), `failure_domain_1`, `failure_domain_2` |
//! | task row (`job_name`, `task_name`) | a batch job `<job_name>.<task_name>` in pool `/batch` (reserving every machine) |
//! | task `instance_num` | `instance_count` |
//! | task `start_time` (s) | the job's `at` (ms) |
//! | task `end_time − start_time` (s) | every instance's run time |
//! | task `plan_cpu` (100 = 1 core) | `cpu_millis` = plan_cpu × 10 |
//! | task `plan_mem` (normalised 0–100, the machines' unit) | `memory_mib` = plan_mem × `memory_mib_per_unit` |
//! | task `status` | `Terminated` exits 0, `Failed` exits 1 |
//! | task `task_type` | label `task_type` |
//!
//! Dropped, with counts: later rows of a machine (status changes), tasks
//! that never ended (`Running`, `Waiting`, …, or `end_time` before
//! `start_time`), tasks without CPU or instances, and the DAG: a task
//! arrives at its recorded start, not when the tasks it depends on end.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;

use paceline_model::Resources;
use paceline_model::job::JobKind;

use super::{ImportError, Imported, field, float, rows, text};
use crate::trace::{Event, Header, HostEvent, JobEvent, RunScript, Timed, job_spec};

/// Importer settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// MiB of one normalised memory unit of a machine (`mem_size` 100 is
    /// the largest machine): 100 units × 1,024 MiB ≈ 100 GiB.
    pub memory_mib_per_unit: f64,
    /// The pool every task goes to.
    pub pool: String,
    /// Import at most this many tasks (rows of batch_task), in file order.
    pub max_tasks: Option<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Options { memory_mib_per_unit: 1_024.0, pool: "/batch".into(), max_tasks: None }
    }
}

/// Imports machines and batch tasks.
pub fn import(machines: impl BufRead, tasks: impl BufRead, opts: &Options) -> Result<Imported, ImportError> {
    const MACHINES: &str = "machine_meta.csv";
    const TASKS: &str = "batch_task.csv";
    let mut events: Vec<Timed> = Vec::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut counts: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut hosts: Vec<(u64, HostEvent)> = Vec::new();
    for row in rows(MACHINES, machines) {
        let row = row?;
        let id = text(&row, 0).to_string();
        if id.is_empty() {
            return Err(ImportError::Row {
                file: MACHINES.into(),
                line: row.line,
                column: "machine_id".into(),
                message: "empty".into(),
            });
        }
        let at: u64 = field(MACHINES, &row, 1, "time_stamp")?;
        let cpu: u64 = field(MACHINES, &row, 4, "cpu_num")?;
        let mem = float(MACHINES, &row, 5, "mem_size")?;
        if !seen.insert(id.clone()) {
            *counts.entry("dropped: later machine rows (status changes)").or_default() += 1;
            continue;
        }
        let mut attributes = paceline_model::Labels::new();
        for (i, key) in [(2, "failure_domain_1"), (3, "failure_domain_2")] {
            let v = text(&row, i);
            if !v.is_empty() {
                attributes.insert(key.into(), v.to_string());
            }
        }
        if let Some(fd) = attributes.get("failure_domain_1").cloned() {
            attributes.insert("zone".into(), fd);
        }
        let memory = (mem.max(0.0) * opts.memory_mib_per_unit) as u64;
        hosts.push((
            at.saturating_mul(1_000),
            HostEvent { name: id, resources: Resources::new(cpu.saturating_mul(1_000), memory, 0, 0), attributes },
        ));
    }
    let machine_count = hosts.len();
    // The pool reserves every machine: non-preemptible work is admitted within reservations.
    let total = hosts.iter().fold(Resources::ZERO, |t, (_, h)| t.saturating_add(&h.resources));
    events.push(Timed { at: 0, event: Event::Pool(super::openb::reserving(&opts.pool, &total)) });
    let mut jobs: Vec<(u64, JobEvent)> = Vec::new();
    let mut ids: BTreeSet<String> = BTreeSet::new();
    let mut last_end = 0u64;
    for (task_rows, row) in rows(TASKS, tasks).enumerate() {
        let row = row?;
        if opts.max_tasks.is_some_and(|m| task_rows as u64 >= m) {
            break;
        }
        let task_name = text(&row, 0);
        let instances: u64 = field(TASKS, &row, 1, "instance_num")?;
        let job_name = text(&row, 2);
        let task_type = text(&row, 3);
        let status = text(&row, 4);
        let start: u64 = field(TASKS, &row, 5, "start_time")?;
        let end: u64 = field(TASKS, &row, 6, "end_time")?;
        let plan_cpu = float(TASKS, &row, 7, "plan_cpu")?;
        let plan_mem = float(TASKS, &row, 8, "plan_mem")?;
        let exit = match status {
            "Terminated" => 0,
            "Failed" => 1,
            _ => {
                *counts
                    .entry("dropped: tasks that never ended (status other than Terminated or Failed)")
                    .or_default() += 1;
                continue;
            }
        };
        if end < start {
            *counts.entry("dropped: end_time before start_time").or_default() += 1;
            continue;
        }
        let cpu = (plan_cpu * 10.0) as u64;
        if cpu == 0 || instances == 0 {
            *counts.entry("dropped: no CPU or no instances").or_default() += 1;
            continue;
        }
        let id = format!("{job_name}.{task_name}");
        if !ids.insert(id.clone()) {
            *counts.entry("dropped: duplicate (job_name, task_name)").or_default() += 1;
            continue;
        }
        let instances = u32::try_from(instances).unwrap_or(u32::MAX).min(paceline_model::job::MAX_INSTANCES);
        let memory = (plan_mem.max(0.0) * opts.memory_mib_per_unit) as u64;
        let mut spec = job_spec(&id, &opts.pool, JobKind::Batch, instances, Resources::new(cpu, memory, 0, 0));
        spec.owner = "alibaba-2018".into();
        if !task_type.is_empty() {
            spec.labels.insert("task_type".into(), task_type.to_string());
        }
        spec.validate().map_err(|e| ImportError::Row {
            file: TASKS.into(),
            line: row.line,
            column: "task_name".into(),
            message: format!("the task makes no valid job: {e}"),
        })?;
        if task_name.contains('_') {
            *counts.entry("DAG dependencies dropped (tasks arrive at their recorded start)").or_default() += 1;
        }
        *counts.entry(if exit == 0 { "tasks Terminated" } else { "tasks Failed (exit 1)" }).or_default() += 1;
        last_end = last_end.max(end);
        jobs.push((
            start.saturating_mul(1_000),
            JobEvent {
                id,
                spec,
                run: RunScript { ms: Some(end.saturating_sub(start).max(1).saturating_mul(1_000)), exit, fail_runs: 0 },
                runs: Vec::new(),
                gpu_milli: None,
            },
        ));
    }
    // Host joins and job arrivals in time order (hosts first at equal times).
    hosts.sort_by_key(|(t, _)| *t);
    jobs.sort_by_key(|(t, _)| *t);
    let job_count = jobs.len();
    let task_count: u64 = jobs.iter().map(|(_, j)| u64::from(j.spec.instance_count)).sum();
    let mut merged: Vec<Timed> = hosts.into_iter().map(|(at, h)| Timed { at, event: Event::Host(h) }).collect();
    merged.extend(jobs.into_iter().map(|(at, j)| Timed { at, event: Event::Job(Box::new(j)) }));
    merged.sort_by_key(|t| t.at);
    events.extend(merged);
    let mut summary = vec![
        format!("{machine_count} machines as hosts (zone = failure_domain_1)"),
        format!("{job_count} tasks as batch jobs ({task_count} instances) in pool {}", opts.pool),
    ];
    summary.extend(counts.iter().map(|(k, v)| format!("{k}: {v}")));
    let mut header = Header::new("alibaba-2018-batch", "alibaba-2018");
    header.duration_ms = Some(last_end.saturating_mul(1_000));
    header.notes = summary.clone();
    Ok(Imported { header, events, summary })
}
