//! The trace format, version 1: one JSON object per line. The first line is
//! the [`Header`]; every other line is one [`Event`] at a time `at` (ms
//! since the trace's start, never decreasing from one line to the next).
//! docs/sim.md documents every field; this module is the format's one
//! definition, and [`crate::parse`] its one reader.
//!
//! ```text
//! {"format":"paceline-trace","version":1,"name":"demo","source":"generator"}
//! {"at":0,"event":"pool","pool":{"path":"/batch","reservation":{"cpu":64000}}}
//! {"at":0,"event":"host","name":"h-00000","resources":{"cpu_millis":32000,"memory_mib":131072},"attributes":{"zone":"a"}}
//! {"at":1500,"event":"job","id":"j-1","spec":{…job YAML as JSON…},"run":{"ms":60000}}
//! {"at":9000,"event":"kill","job":"j-1"}
//! ```
//!
//! Versioning: a reader refuses a version it does not know. A field is
//! added by a new version; a version, once released, is never edited.
//! Room is kept for per-device GPU capacity (`gpu_devices` on hosts) and
//! fractional requests (`gpu_milli` on jobs: recorded now, placed once GPU
//! sharing exists).

use std::collections::BTreeMap;

use paceline_model::job::JobConfig;
use paceline_model::pool::PoolEntry;
use paceline_model::{Labels, Resources};
use serde::{Deserialize, Serialize};

/// The `format` value of every trace's first line.
pub const FORMAT: &str = "paceline-trace";
/// The version this crate reads and writes.
pub const VERSION: u32 = 1;

/// The first line of a trace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`] for this reader.
    pub version: u32,
    /// A name for reports.
    #[serde(default)]
    pub name: String,
    /// Where it came from: `generator`, `recorded`, `openb`, `alibaba-2018`, `hand`.
    #[serde(default)]
    pub source: String,
    /// The generator's seed, when generated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The span the trace covers in ms, when known (charts use it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Free text: what an importer mapped and dropped, how it was made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Header {
    /// A version-1 header.
    pub fn new(name: impl Into<String>, source: impl Into<String>) -> Header {
        Header {
            format: FORMAT.into(),
            version: VERSION,
            name: name.into(),
            source: source.into(),
            ..Header::default()
        }
    }
}

/// How each run of a task behaves once it runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunScript {
    /// Ms from start to exit; absent: runs until killed (a service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ms: Option<u64>,
    /// Exit status when it exits; 0 succeeds, anything else fails.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub exit: i32,
    /// The first `fail_runs` runs of the task exit 1 whatever `exit` says.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub fail_runs: u32,
}

fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

/// A host joining (at 0: present from the start).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostEvent {
    /// Host name, unique in the trace.
    pub name: String,
    /// Capacity.
    pub resources: Resources,
    /// Attributes (`zone`, `gpu_model`, …) constraints and spread read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: Labels,
}

/// A job arriving.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobEvent {
    /// Job id, unique in the trace.
    pub id: String,
    /// The job spec, as `paceline job create` reads it (docs/user-guide.md).
    pub spec: JobConfig,
    /// How every task's runs behave, unless `runs` says otherwise.
    #[serde(default)]
    pub run: RunScript,
    /// Per instance, overriding `run`: empty, or one entry per instance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<RunScript>,
    /// The share of one GPU each task asked for, in thousandths, when the
    /// source had fractional requests (recorded as the source said it; what
    /// is placed is `spec`'s `gpu_milli`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_milli: Option<u64>,
}

impl JobEvent {
    /// The script of instance `i`.
    pub fn script(&self, i: u32) -> RunScript {
        self.runs.get(i as usize).copied().unwrap_or(self.run)
    }
}

/// A kill request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KillEvent {
    /// The job.
    pub job: String,
    /// Instances to kill; absent: the whole job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<Vec<u32>>,
}

/// A new config for a job (a rolling update, or a resize).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateEvent {
    /// The job.
    pub job: String,
    /// The new spec.
    pub spec: JobConfig,
    /// How runs of the new config behave.
    #[serde(default)]
    pub run: RunScript,
    /// Per instance, overriding `run`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<RunScript>,
}

/// A host's maintenance state changing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaintenanceEvent {
    /// The host.
    pub name: String,
    /// `draining`, `down` (after drained) or `up`.
    pub state: MaintenanceTo,
}

/// Target of a [`MaintenanceEvent`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaintenanceTo {
    /// Stop offering it; its tasks move elsewhere.
    Draining,
    /// Take a drained host down.
    Down,
    /// Back in service.
    Up,
}

/// A host failing: it disappears and its runs end LOST.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostDownEvent {
    /// The host.
    pub name: String,
}

/// A policy swap: `slot` is served by `plugin` from `at` on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyEvent {
    /// A slot (`placement/batch`, `preemption`, `lifecycle/batch`), or
    /// `placement` for every placement slot.
    pub slot: String,
    /// A built-in policy's name or one given to the runner (`--plugin NAME=PATH`).
    pub plugin: String,
}

/// One line after the header.
// Pool lines are few (a tree's worth per trace) and jobs are boxed: the
// size of a pool entry costs nothing that matters.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A pool of the tree (parents before children).
    Pool(PoolEntry),
    /// A host joins.
    Host(HostEvent),
    /// A host fails.
    HostDown(HostDownEvent),
    /// A host's maintenance state changes.
    Maintenance(MaintenanceEvent),
    /// A job arrives.
    Job(Box<JobEvent>),
    /// Tasks are killed.
    Kill(KillEvent),
    /// A job gets a new config.
    Update(Box<UpdateEvent>),
    /// A slot changes policy.
    Policy(PolicyEvent),
    /// The trace's end: the replay stops here even if work remains.
    End,
}

impl Event {
    /// The `event` name of the line.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Pool(_) => "pool",
            Event::Host(_) => "host",
            Event::HostDown(_) => "host_down",
            Event::Maintenance(_) => "maintenance",
            Event::Job(_) => "job",
            Event::Kill(_) => "kill",
            Event::Update(_) => "update",
            Event::Policy(_) => "policy",
            Event::End => "end",
        }
    }
}

/// An event with its time.
#[derive(Clone, Debug, PartialEq)]
pub struct Timed {
    /// Ms since the trace's start.
    pub at: u64,
    /// What happens.
    pub event: Event,
}

/// Writes a trace line by line.
#[derive(Debug)]
pub struct Writer<W: std::io::Write> {
    out: W,
    last_at: u64,
    lines: u64,
}

impl<W: std::io::Write> Writer<W> {
    /// Writes the header.
    pub fn new(mut out: W, header: &Header) -> std::io::Result<Writer<W>> {
        serde_json::to_writer(&mut out, header)?;
        out.write_all(b"\n")?;
        Ok(Writer { out, last_at: 0, lines: 1 })
    }

    /// Writes one event. Times must not decrease.
    pub fn event(&mut self, at: u64, event: &Event) -> std::io::Result<()> {
        if at < self.last_at {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("event at {at} ms after one at {} ms: a trace's times never decrease", self.last_at),
            ));
        }
        self.last_at = at;
        let mut obj = serde_json::Map::new();
        obj.insert("at".into(), at.into());
        obj.insert("event".into(), event.name().into());
        let body = match event {
            Event::Pool(p) => Some(serde_json::json!({ "pool": compact(serde_json::to_value(p)?, &default_pool()) })),
            Event::Host(h) => Some(serde_json::to_value(h)?),
            Event::HostDown(h) => Some(serde_json::to_value(h)?),
            Event::Maintenance(m) => Some(serde_json::to_value(m)?),
            Event::Job(j) => Some(compact_spec(serde_json::to_value(j)?)),
            Event::Kill(k) => Some(serde_json::to_value(k)?),
            Event::Update(u) => Some(compact_spec(serde_json::to_value(u)?)),
            Event::Policy(p) => Some(serde_json::to_value(p)?),
            Event::End => None,
        };
        if let Some(serde_json::Value::Object(fields)) = body {
            obj.extend(fields);
        }
        serde_json::to_writer(&mut self.out, &obj)?;
        self.out.write_all(b"\n")?;
        self.lines += 1;
        Ok(())
    }

    /// Lines written so far, the header included.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// Flushes and hands back the output.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

fn default_pool() -> serde_json::Value {
    serde_json::to_value(PoolEntry::default()).unwrap_or_default()
}

/// Drops every field of `value` equal to the same field of `default`
/// (recursively): the types read them back as their defaults, and a job line
/// keeps only what differs from the job YAML's defaults.
fn compact(value: serde_json::Value, default: &serde_json::Value) -> serde_json::Value {
    match (value, default) {
        (serde_json::Value::Object(fields), serde_json::Value::Object(defaults)) => serde_json::Value::Object(
            fields
                .into_iter()
                .filter(|(k, v)| defaults.get(k) != Some(v))
                .map(|(k, v)| {
                    let v = match defaults.get(&k) {
                        Some(d) => compact(v, d),
                        None => v,
                    };
                    (k, v)
                })
                .collect(),
        ),
        (v, _) => v,
    }
}

/// [`compact`] on the `spec` of a job or update line.
fn compact_spec(mut line: serde_json::Value) -> serde_json::Value {
    let default = serde_json::to_value(JobConfig::default()).unwrap_or_default();
    if let Some(spec) = line.get_mut("spec") {
        *spec = compact(spec.take(), &default);
    }
    line
}

/// A job spec with only what a trace needs set: the rest keeps the job
/// YAML's defaults.
pub fn job_spec(
    name: &str,
    pool: &str,
    kind: paceline_model::job::JobKind,
    instances: u32,
    resources: Resources,
) -> JobConfig {
    JobConfig {
        name: name.into(),
        owner: "sim".into(),
        pool: pool.into(),
        kind,
        instance_count: instances,
        default_task: paceline_model::task::TaskSpec { command: "sim".into(), resources, ..Default::default() },
        ..JobConfig::default()
    }
}
