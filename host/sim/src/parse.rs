//! Reading a trace: line by line (a trace of a million tasks streams), every
//! error naming the line and the field, and the checks one line can fail
//! on its own (times never decrease, ids unique, specs valid, hosts and
//! jobs referred to exist).

use std::collections::BTreeSet;
use std::io::BufRead;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::trace::{
    Event, FORMAT, Header, HostDownEvent, HostEvent, JobEvent, KillEvent, MaintenanceEvent, PolicyEvent, Timed,
    UpdateEvent, VERSION,
};

/// A trace that cannot be read, with where.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be read.
    #[error("reading the trace: {0}")]
    Io(#[from] std::io::Error),
    /// A line is wrong; `field` names the part (`spec.default_task.resources.cpu_millis`).
    #[error("line {line}, field `{field}`: {message}")]
    Line {
        /// 1-based line number.
        line: u64,
        /// Dotted path of the field, or `-` for the line as a whole.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The trace has no header line.
    #[error("the trace is empty: its first line must be the header {{\"format\":\"{FORMAT}\",\"version\":{VERSION}}}")]
    Empty,
}

impl TraceError {
    fn at(line: u64, field: impl Into<String>, message: impl Into<String>) -> TraceError {
        TraceError::Line { line, field: field.into(), message: message.into() }
    }

    /// The line the error is on, if it is on one.
    pub fn line(&self) -> Option<u64> {
        match self {
            TraceError::Line { line, .. } => Some(*line),
            _ => None,
        }
    }

    /// The field the error names, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            TraceError::Line { field, .. } => Some(field),
            _ => None,
        }
    }
}

/// Reads a trace: first [`Reader::header`], then events from the iterator.
#[derive(Debug)]
pub struct Reader<R: BufRead> {
    input: R,
    line: u64,
    header: Header,
    last_at: u64,
    jobs: BTreeSet<String>,
    hosts: BTreeSet<String>,
    /// Hosts a `host_down` line took away: a `host` line may bring them back.
    down: BTreeSet<String>,
    buf: String,
    done: bool,
}

/// Deserializes `value` as `T`, naming the failing field under `prefix`.
fn typed<T: DeserializeOwned>(line: u64, prefix: &str, value: Value) -> Result<T, TraceError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let field = match (prefix.is_empty(), path.as_str()) {
            (true, ".") => "-".to_string(),
            (true, p) => p.to_string(),
            (false, ".") => prefix.to_string(),
            (false, p) => format!("{prefix}.{p}"),
        };
        TraceError::at(line, field, e.into_inner().to_string())
    })
}

impl<R: BufRead> Reader<R> {
    /// Reads and checks the header line.
    pub fn new(mut input: R) -> Result<Reader<R>, TraceError> {
        let mut buf = String::new();
        let mut line = 0;
        loop {
            buf.clear();
            if input.read_line(&mut buf)? == 0 {
                return Err(TraceError::Empty);
            }
            line += 1;
            if !buf.trim().is_empty() {
                break;
            }
        }
        let value: Value = serde_json::from_str(buf.trim())
            .map_err(|e| TraceError::at(line, "-", format!("not a JSON object: {e}")))?;
        if value.get("format").and_then(Value::as_str) != Some(FORMAT) {
            return Err(TraceError::at(
                line,
                "format",
                format!("the first line must be the header, with \"format\":\"{FORMAT}\""),
            ));
        }
        match value.get("version").and_then(Value::as_u64) {
            Some(v) if v == u64::from(VERSION) => {}
            Some(v) => {
                return Err(TraceError::at(
                    line,
                    "version",
                    format!("version {v} is not known here; this reader reads version {VERSION}"),
                ));
            }
            None => return Err(TraceError::at(line, "version", "missing or not a number")),
        }
        let header: Header = typed(line, "", value)?;
        Ok(Reader {
            input,
            line,
            header,
            last_at: 0,
            jobs: BTreeSet::new(),
            hosts: BTreeSet::new(),
            down: BTreeSet::new(),
            buf,
            done: false,
        })
    }

    /// The header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The number of the last line read.
    pub fn line(&self) -> u64 {
        self.line
    }

    fn next_event(&mut self) -> Result<Option<Timed>, TraceError> {
        loop {
            self.buf.clear();
            if self.input.read_line(&mut self.buf)? == 0 {
                return Ok(None);
            }
            self.line += 1;
            if !self.buf.trim().is_empty() {
                break;
            }
        }
        let line = self.line;
        let value: Value = serde_json::from_str(self.buf.trim())
            .map_err(|e| TraceError::at(line, "-", format!("not valid JSON: {e}")))?;
        let Value::Object(mut obj) = value else {
            return Err(TraceError::at(line, "-", "each line must be a JSON object"));
        };
        let at = match obj.remove("at") {
            Some(v) => {
                v.as_u64().ok_or_else(|| TraceError::at(line, "at", "must be a whole number of ms, 0 or more"))?
            }
            None => return Err(TraceError::at(line, "at", "missing: every event has a time in ms")),
        };
        if at < self.last_at {
            return Err(TraceError::at(
                line,
                "at",
                format!("{at} ms is before the previous line's {} ms: times must never decrease", self.last_at),
            ));
        }
        self.last_at = at;
        let name = match obj.remove("event") {
            Some(Value::String(s)) => s,
            Some(_) => return Err(TraceError::at(line, "event", "must be a string")),
            None => return Err(TraceError::at(line, "event", "missing: which event the line is")),
        };
        let event = self.event(line, &name, obj)?;
        Ok(Some(Timed { at, event }))
    }

    fn event(&mut self, line: u64, name: &str, mut obj: Map<String, Value>) -> Result<Event, TraceError> {
        let body = |obj: Map<String, Value>| Value::Object(obj);
        Ok(match name {
            "pool" => {
                let pool = obj.remove("pool").ok_or_else(|| TraceError::at(line, "pool", "missing"))?;
                if let Some(k) = obj.keys().next() {
                    return Err(TraceError::at(line, k.clone(), "unknown field; a pool line has `pool` only"));
                }
                let entry: paceline_model::pool::PoolEntry = typed(line, "pool", pool)?;
                if !entry.path.starts_with('/') {
                    return Err(TraceError::at(
                        line,
                        "pool.path",
                        format!("`{}` is not a path starting with /", entry.path),
                    ));
                }
                entry.spec().check().map_err(|e| TraceError::at(line, format!("pool.{}", e.field()), e.to_string()))?;
                Event::Pool(entry)
            }
            "host" => {
                let h: HostEvent = typed(line, "", body(obj))?;
                if h.name.is_empty() {
                    return Err(TraceError::at(line, "name", "must not be empty"));
                }
                // A failed host may join again; a live one may not join twice.
                if !self.hosts.insert(h.name.clone()) && !self.down.remove(&h.name) {
                    return Err(TraceError::at(line, "name", format!("host `{}` joined already", h.name)));
                }
                Event::Host(h)
            }
            "host_down" => {
                let h: HostDownEvent = typed(line, "", body(obj))?;
                if !self.hosts.contains(&h.name) {
                    return Err(TraceError::at(line, "name", format!("no host `{}` joined before this line", h.name)));
                }
                if !self.down.insert(h.name.clone()) {
                    return Err(TraceError::at(line, "name", format!("host `{}` is down already", h.name)));
                }
                Event::HostDown(h)
            }
            "maintenance" => {
                let m: MaintenanceEvent = typed(line, "", body(obj))?;
                if !self.hosts.contains(&m.name) {
                    return Err(TraceError::at(line, "name", format!("no host `{}` joined before this line", m.name)));
                }
                Event::Maintenance(m)
            }
            "job" => {
                let j: JobEvent = typed(line, "", body(obj))?;
                if j.id.is_empty() {
                    return Err(TraceError::at(line, "id", "must not be empty"));
                }
                j.spec.validate().map_err(|e| TraceError::at(line, "spec", e.to_string()))?;
                check_runs(line, &j.runs, j.spec.instance_count)?;
                if !self.jobs.insert(j.id.clone()) {
                    return Err(TraceError::at(line, "id", format!("job `{}` arrived already", j.id)));
                }
                Event::Job(Box::new(j))
            }
            "kill" => {
                let k: KillEvent = typed(line, "", body(obj))?;
                self.known_job(line, "job", &k.job)?;
                Event::Kill(k)
            }
            "update" => {
                let u: UpdateEvent = typed(line, "", body(obj))?;
                self.known_job(line, "job", &u.job)?;
                u.spec.validate().map_err(|e| TraceError::at(line, "spec", e.to_string()))?;
                check_runs(line, &u.runs, u.spec.instance_count)?;
                Event::Update(Box::new(u))
            }
            "policy" => {
                let p: PolicyEvent = typed(line, "", body(obj))?;
                if p.slot != "placement" && p.slot != "preemption" && !p.slot.contains('/') {
                    return Err(TraceError::at(
                        line,
                        "slot",
                        format!(
                            "`{}` is not a slot (placement, placement/batch, preemption, lifecycle/batch, …)",
                            p.slot
                        ),
                    ));
                }
                Event::Policy(p)
            }
            "end" => {
                if let Some(k) = obj.keys().next() {
                    return Err(TraceError::at(line, k.clone(), "unknown field; an end line has `at` only"));
                }
                Event::End
            }
            other => {
                return Err(TraceError::at(
                    line,
                    "event",
                    format!(
                        "`{other}` is not an event of version {VERSION} (pool, host, host_down, maintenance, job, kill, update, policy, end)"
                    ),
                ));
            }
        })
    }

    fn known_job(&self, line: u64, field: &str, id: &str) -> Result<(), TraceError> {
        if self.jobs.contains(id) {
            Ok(())
        } else {
            Err(TraceError::at(line, field, format!("no job `{id}` arrived before this line")))
        }
    }
}

fn check_runs(line: u64, runs: &[crate::trace::RunScript], instances: u32) -> Result<(), TraceError> {
    if !runs.is_empty() && runs.len() != instances as usize {
        return Err(TraceError::at(
            line,
            "runs",
            format!("{} entries for {instances} instances: give one per instance, or none", runs.len()),
        ));
    }
    Ok(())
}

impl<R: BufRead> Iterator for Reader<R> {
    type Item = Result<Timed, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_event() {
            Ok(Some(t)) => Some(Ok(t)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                // Nothing after a broken line is trusted.
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Reads a whole trace into memory (small traces, tests).
pub fn read_all(input: impl BufRead) -> Result<(Header, Vec<Timed>), TraceError> {
    let reader = Reader::new(input)?;
    let header = reader.header().clone();
    let events = reader.collect::<Result<Vec<_>, _>>()?;
    Ok((header, events))
}
