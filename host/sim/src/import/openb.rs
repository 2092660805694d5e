//! Alibaba `cluster-trace-gpu-v2023` ("openb"): a node list and a pod list,
//! both CSV with a header row, as that repository's README publishes them.
//!
//! | openb | trace |
//! |---|---|
//! | node `sn` | host `name` |
//! | node `cpu_milli`, `memory_mib`, `gpu` | host `resources.cpu_millis`, `memory_mib`, `gpus` |
//! | node `model` | host attribute `gpu_model` (absent for CPU nodes) |
//! | pod `name` | a one-instance batch job of that id in pool `/openb` (reserving the whole cluster) |
//! | pod `creation_time` (s) | the job's `at`, in ms from the earliest creation |
//! | pod `deletion_time − scheduled_time` (s) | its run time (`deletion − creation` when never scheduled) |
//! | pod `cpu_milli`, `memory_mib` | task `resources` |
//! | pod `num_gpu`, `gpu_milli` | `resources.gpu_milli`: `num_gpu` × 1000, or for a fractional request (`num_gpu` 1, `gpu_milli` < 1000) a share of one device (the default), one whole GPU, or left out (`--fractional-gpu share\|round-up\|drop`); the pod's `gpu_milli` is kept on the job line |
//! | pod `gpu_spec` (`A\|B`) | task `gpu_models: [A, B]` and constraint `attribute_in gpu_model [A, B]` |
//! | pod `qos` | label `qos`; priority LS 3, Guaranteed 3, Burstable 2, BE 1 (BE preemptible) |
//! | pod `pod_phase` | Failed exits 1, every other phase exits 0 |
//!
//! Dropped: disk (not in the trace: hosts and tasks get none), the
//! production placement (`scheduled_time` is used only for the run time),
//! and, with `--fractional-gpu drop`, fractional-GPU pods.

use std::collections::BTreeMap;
use std::io::BufRead;

use paceline_model::job::JobKind;
use paceline_model::pool::PoolEntry;
use paceline_model::{Constraint, Resources};

use super::{ImportError, Imported, field, rows, text};
use crate::trace::{Event, Header, HostEvent, JobEvent, RunScript, Timed, job_spec};

/// What to do with a pod asking for part of one GPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fractional {
    /// A share of one GPU device, as the trace asks (the default).
    #[default]
    Share,
    /// Give it one whole GPU.
    RoundUp,
    /// Leave the pod out.
    Drop,
}

/// Importer settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Fractional GPU requests.
    pub fractional: Fractional,
    /// The pool every pod goes to.
    pub pool: String,
}

impl Default for Options {
    fn default() -> Self {
        Options { fractional: Fractional::Share, pool: "/openb".into() }
    }
}

/// A pool whose reservation is `total` (kinds of zero are left unset).
pub(crate) fn reserving(path: &str, total: &Resources) -> PoolEntry {
    let some = |v: u64| (v > 0).then_some(paceline_model::pool::Amount(v));
    PoolEntry {
        path: path.to_string(),
        reservation: paceline_model::pool::KindValues {
            cpu_millis: some(total.cpu_millis),
            memory_mib: some(total.memory_mib),
            disk_mib: some(total.disk_mib),
            gpus: None,
            gpu_milli: some(total.gpu_milli),
        },
        ..PoolEntry::default()
    }
}

fn header_index(file: &str, header: &[String], name: &str) -> Result<usize, ImportError> {
    header.iter().position(|h| h.trim() == name).ok_or_else(|| ImportError::Row {
        file: file.to_string(),
        line: 1,
        column: name.to_string(),
        message: format!("the header row has no `{name}` column (it has: {})", header.join(",")),
    })
}

/// Imports a node list and a pod list.
pub fn import(nodes: impl BufRead, pods: impl BufRead, opts: &Options) -> Result<Imported, ImportError> {
    const NODES: &str = "node list";
    const PODS: &str = "pod list";
    // The pool, reserving the whole cluster (non-preemptible work is
    // admitted within reservations), is filled in once the nodes are read.
    let mut events: Vec<Timed> = vec![Timed { at: 0, event: Event::End }];
    let mut node_rows = rows(NODES, nodes);
    let head = match node_rows.next() {
        Some(r) => r?.fields,
        None => {
            return Err(ImportError::Row {
                file: NODES.into(),
                line: 1,
                column: "sn".into(),
                message: "empty file".into(),
            });
        }
    };
    let [sn, cpu, mem, gpu, model] =
        ["sn", "cpu_milli", "memory_mib", "gpu", "model"].map(|c| header_index(NODES, &head, c));
    let (sn, cpu, mem, gpu, model) = (sn?, cpu?, mem?, gpu?, model?);
    let mut hosts = 0u64;
    let mut gpu_hosts = 0u64;
    for row in node_rows {
        let row = row?;
        let name = text(&row, sn).to_string();
        if name.is_empty() {
            return Err(ImportError::Row {
                file: NODES.into(),
                line: row.line,
                column: "sn".into(),
                message: "empty".into(),
            });
        }
        let resources = Resources::new(
            field(NODES, &row, cpu, "cpu_milli")?,
            field(NODES, &row, mem, "memory_mib")?,
            0,
            field::<u64>(NODES, &row, gpu, "gpu")?.saturating_mul(1000),
        );
        let mut attributes = paceline_model::Labels::new();
        let m = text(&row, model);
        if !m.is_empty() && m != "nan" {
            attributes.insert("gpu_model".into(), m.to_string());
        }
        hosts += 1;
        gpu_hosts += u64::from(resources.gpu_milli > 0);
        events.push(Timed { at: 0, event: Event::Host(HostEvent { name, resources, attributes }) });
    }

    let total = events.iter().fold(Resources::ZERO, |t, e| match &e.event {
        Event::Host(h) => t.saturating_add(&h.resources),
        _ => t,
    });
    events[0].event = Event::Pool(reserving(&opts.pool, &total));
    let mut pod_rows = rows(PODS, pods);
    let head = match pod_rows.next() {
        Some(r) => r?.fields,
        None => {
            return Err(ImportError::Row {
                file: PODS.into(),
                line: 1,
                column: "name".into(),
                message: "empty file".into(),
            });
        }
    };
    let cols = [
        "name",
        "cpu_milli",
        "memory_mib",
        "num_gpu",
        "gpu_milli",
        "gpu_spec",
        "qos",
        "pod_phase",
        "creation_time",
        "deletion_time",
        "scheduled_time",
    ]
    .map(|c| header_index(PODS, &head, c));
    let mut idx = [0usize; 11];
    for (i, c) in cols.into_iter().enumerate() {
        idx[i] = c?;
    }
    let [name_i, cpu_i, mem_i, ngpu_i, gmilli_i, spec_i, qos_i, phase_i, create_i, delete_i, sched_i] = idx;
    let mut jobs: Vec<(u64, JobEvent)> = Vec::new();
    let mut counts: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut min_create = u64::MAX;
    let mut max_end = 0u64;
    for row in pod_rows {
        let row = row?;
        let name = text(&row, name_i).to_string();
        let cpu: u64 = field(PODS, &row, cpu_i, "cpu_milli")?;
        let memory: u64 = field(PODS, &row, mem_i, "memory_mib")?;
        let num_gpu: u64 = field(PODS, &row, ngpu_i, "num_gpu")?;
        let gpu_milli: u64 = field(PODS, &row, gmilli_i, "gpu_milli")?;
        let created: u64 = field(PODS, &row, create_i, "creation_time")?;
        let deleted: u64 = field(PODS, &row, delete_i, "deletion_time")?;
        // Empty for pods production never scheduled (phase Pending).
        let scheduled: u64 =
            if text(&row, sched_i).is_empty() { 0 } else { field(PODS, &row, sched_i, "scheduled_time")? };
        let phase = text(&row, phase_i);
        let qos = text(&row, qos_i);
        let fractional = num_gpu == 1 && gpu_milli < 1_000;
        if fractional && opts.fractional == Fractional::Drop {
            *counts.entry("dropped: fractional GPU").or_default() += 1;
            continue;
        }
        let gpu_ask = match (fractional, opts.fractional) {
            (true, Fractional::Share) => {
                *counts.entry("fractional GPU: a share of one device").or_default() += 1;
                gpu_milli
            }
            (true, _) => {
                *counts.entry("fractional GPU rounded up to 1").or_default() += 1;
                1000
            }
            (false, _) => num_gpu.saturating_mul(1000),
        };
        let started = if scheduled >= created && scheduled > 0 || created == 0 && scheduled == 0 {
            scheduled
        } else {
            *counts.entry("never scheduled in production: run time from creation").or_default() += 1;
            created
        };
        let run_s = deleted.saturating_sub(started).max(1);
        let mut spec = job_spec(&name, &opts.pool, JobKind::Batch, 1, Resources::new(cpu, memory, 0, gpu_ask));
        spec.owner = "openb".into();
        if !qos.is_empty() {
            spec.labels.insert("qos".into(), qos.to_string());
        }
        spec.sla.priority = match qos {
            "LS" | "Guaranteed" => 3,
            "Burstable" => 2,
            _ => 1,
        };
        spec.sla.preemptible = qos == "BE";
        let gpu_spec = text(&row, spec_i);
        if !gpu_spec.is_empty() && gpu_spec != "nan" {
            let values: Vec<String> =
                gpu_spec.split('|').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
            spec.default_task.gpu_models = values.clone();
            spec.default_task.constraints.push(Constraint::AttributeIn { key: "gpu_model".into(), values });
            *counts.entry("GPU type constraint (gpu_spec)").or_default() += 1;
        }
        let exit = i32::from(phase == "Failed");
        *counts
            .entry(match phase {
                "Succeeded" => "phase Succeeded",
                "Failed" => "phase Failed (exits 1)",
                "Running" => "phase Running",
                "Pending" => "phase Pending",
                _ => "phase other",
            })
            .or_default() += 1;
        spec.validate().map_err(|e| ImportError::Row {
            file: PODS.into(),
            line: row.line,
            column: "name".into(),
            message: format!("the pod makes no valid job: {e}"),
        })?;
        min_create = min_create.min(created);
        max_end = max_end.max(deleted);
        jobs.push((
            created,
            JobEvent {
                id: name,
                spec,
                run: RunScript { ms: Some(run_s.saturating_mul(1_000)), exit, fail_runs: 0 },
                runs: Vec::new(),
                gpu_milli: fractional.then_some(gpu_milli),
            },
        ));
    }
    let base = if min_create == u64::MAX { 0 } else { min_create };
    jobs.sort_by_key(|(t, _)| *t);
    let pods_n = jobs.len();
    for (t, job) in jobs {
        events.push(Timed { at: (t - base).saturating_mul(1_000), event: Event::Job(Box::new(job)) });
    }
    let mut summary = vec![
        format!("{hosts} nodes ({gpu_hosts} with GPUs) as hosts, GPU model as attribute gpu_model"),
        format!("{pods_n} pods as one-instance batch jobs in pool {}", opts.pool),
    ];
    summary.extend(counts.iter().map(|(k, v)| format!("{k}: {v}")));
    summary.push("dropped: disk (not in the trace), production placements".into());
    let mut header = Header::new("openb", "openb");
    header.duration_ms = Some(max_end.saturating_sub(base).saturating_mul(1_000));
    header.notes = summary.clone();
    Ok(Imported { header, events, summary })
}
