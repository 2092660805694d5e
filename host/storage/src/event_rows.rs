//! Task events as stored rows (decision 0072): the events of one run of one
//! task that a single store call appends are stored as one row, not one row
//! each. A task passes through PLACED and LAUNCHING in one write, LAUNCHED
//! in another, STARTING and RUNNING often in a third: three rows on its way
//! to RUNNING instead of five, and a kill's KILLING and KILLED one.
//!
//! A row's body is the event's JSON object when it holds one (as every row
//! did before schema 6 on SQLite, 10 on Cassandra), or a JSON array of the
//! events, oldest first; at most [`MAX_EVENTS_PER_ROW`] of them, and never
//! more than half a record's size by a bound on their JSON, so a row is
//! never refused as too large where its events one by one would not be.
//!
//! A row's key (`at_ms`, `run`, `to_state`) is that of its **oldest**
//! event. An identical retry replaces its own row, as a single event's
//! did; a retry that repeats only some of a row's events adds a row and
//! never replaces (so loses) the others: reads drop the repeats
//! ([`newest_first`]).

use paceline_model::task::TaskEvent;
use serde::Deserialize;

use crate::error::Result;
use crate::types::{decode, encode, limits};

/// The events of one call, grouped by (instance, run) in the order given.
/// Sorting indices keeps the events where they are: no copy per event.
pub(crate) struct EventRows<'a> {
    events: &'a [(u32, TaskEvent)],
    order: Vec<u32>,
}

impl<'a> EventRows<'a> {
    pub(crate) fn new(events: &'a [(u32, TaskEvent)]) -> EventRows<'a> {
        let mut order: Vec<u32> = (0..events.len() as u32).collect();
        // Stable: a group's events stay in the order the caller gave them.
        order.sort_by_key(|&k| key(events, k));
        EventRows { events, order }
    }

    /// Each row: its instance, its events and the encoded body.
    pub(crate) fn rows(&self) -> impl Iterator<Item = Row<'_>> {
        let events = self.events;
        let mut rest: &[u32] = &self.order;
        std::iter::from_fn(move || {
            let (&first, _) = rest.split_first()?;
            let mut size = json_bound(&events[first as usize].1);
            let mut n = 1;
            while let Some(&next) = rest.get(n) {
                let more = json_bound(&events[next as usize].1);
                if key(events, next) != key(events, first)
                    || n == MAX_EVENTS_PER_ROW
                    || size + more > limits::MAX_RECORD / 2
                {
                    break;
                }
                size += more;
                n += 1;
            }
            let (idx, tail) = rest.split_at(n);
            rest = tail;
            Some(Row { events, idx })
        })
    }
}

/// Events a row holds at most.
pub(crate) const MAX_EVENTS_PER_ROW: usize = 16;

/// An upper bound on an event's JSON: its fixed fields, and its strings as
/// if every byte were escaped (`\u00XX`, six bytes).
fn json_bound(e: &TaskEvent) -> usize {
    let strings = e.reason.len() + e.message.len() + e.host.as_ref().map_or(0, String::len);
    256 + 6 * strings
}

fn key(events: &[(u32, TaskEvent)], k: u32) -> (u32, u64) {
    let (instance, e) = &events[k as usize];
    (*instance, e.run)
}

/// How many rows events are stored as, from their (instance, run) pairs
/// (the metered store's count).
pub(crate) fn row_count(runs: impl Iterator<Item = (u32, u64)>) -> usize {
    let mut keys: Vec<(u32, u64)> = runs.collect();
    keys.sort_unstable();
    keys.dedup();
    keys.len()
}

/// One stored row: the events of one run of one task, in the order given.
pub(crate) struct Row<'a> {
    events: &'a [(u32, TaskEvent)],
    idx: &'a [u32],
}

impl Row<'_> {
    pub(crate) fn instance(&self) -> u32 {
        self.events[self.idx[0] as usize].0
    }

    /// The event whose key the row takes: the first one given.
    pub(crate) fn oldest(&self) -> &TaskEvent {
        &self.events[self.idx[0] as usize].1
    }

    /// The row's body: one event's JSON object, or an array of them.
    pub(crate) fn encode(&self, what: impl Fn() -> String) -> Result<String> {
        if let [only] = self.idx {
            return encode(what, &self.events[*only as usize].1, limits::MAX_RECORD);
        }
        let events: Vec<&TaskEvent> = self.idx.iter().map(|&k| &self.events[k as usize].1).collect();
        encode(what, &events, limits::MAX_RECORD)
    }
}

/// A stored row's body, as written by any version.
#[derive(Deserialize)]
#[serde(untagged)]
enum Body {
    Many(Vec<TaskEvent>),
    One(TaskEvent),
}

/// Decodes a row's body and appends its events to `out` newest first
/// (rows are read newest first; [`newest_first`] finishes the list).
pub(crate) fn decode_newest_first(what: impl FnOnce() -> String, body: &str, out: &mut Vec<TaskEvent>) -> Result<()> {
    match decode(what, body)? {
        Body::One(e) => out.push(e),
        Body::Many(events) => out.extend(events.into_iter().rev()),
    }
    Ok(())
}

/// The events of the rows read (newest row first, each row's events
/// newest first) as one list newest first, an event repeated by a partial
/// retry once, at most `limit`. Events of one instant keep the order their
/// rows gave them (a sort by time and run only, stable).
pub(crate) fn newest_first(mut events: Vec<TaskEvent>, limit: usize) -> Vec<TaskEvent> {
    events.sort_by_key(|e| std::cmp::Reverse((e.at_ms, e.run)));
    events.dedup_by(|a, b| (a.at_ms, a.run, a.to) == (b.at_ms, b.run, b.to));
    events.truncate(limit);
    events
}

#[cfg(test)]
mod tests {
    use paceline_model::task::{TaskEvent, TaskState};

    use super::{EventRows, MAX_EVENTS_PER_ROW, decode_newest_first, newest_first, row_count};
    use crate::types::limits;

    fn event(run: u64, to: TaskState, at_ms: u64) -> TaskEvent {
        TaskEvent { run, from: None, to, at_ms, host: None, reason: to.as_str().to_string(), message: String::new() }
    }

    #[test]
    fn one_row_per_run_of_a_task_its_events_in_the_order_given_read_back_newest_first() {
        use TaskState::*;
        // A launch's call: every task's PLACED first, then every LAUNCHING;
        // task 3 also ends run 1 and starts run 2 in the same call.
        let events = vec![
            (0, event(1, Placed, 10)),
            (3, event(1, Failed, 10)),
            (1, event(1, Placed, 10)),
            (0, event(1, Launching, 11)),
            (3, event(2, Pending, 11)),
            (1, event(1, Launching, 11)),
        ];
        let rows = EventRows::new(&events);
        let got: Vec<(u32, u64, TaskState, String)> = rows
            .rows()
            .map(|r| (r.instance(), r.oldest().run, r.oldest().to, r.encode(|| "test".into()).expect("encodes")))
            .collect();
        let shape: Vec<(u32, u64, TaskState)> = got.iter().map(|(i, run, to, _)| (*i, *run, *to)).collect();
        assert_eq!(shape, [(0, 1, Placed), (1, 1, Placed), (3, 1, Failed), (3, 2, Pending)]);
        assert_eq!(row_count(events.iter().map(|(i, e)| (*i, e.run))), 4);
        // A group is an array; a single event stays the object older
        // versions wrote, and both read back newest first.
        assert!(got[0].3.starts_with('[') && got[2].3.starts_with('{'), "{got:?}");
        let mut read = Vec::new();
        for (_, _, _, body) in got.iter().take(2) {
            decode_newest_first(|| "test".into(), body, &mut read).expect("decodes");
        }
        let order: Vec<TaskState> = read.iter().map(|e| e.to).collect();
        assert_eq!(order, [Launching, Placed, Launching, Placed]);
    }

    #[test]
    fn a_row_holds_at_most_sixteen_events_and_never_more_than_half_a_record() {
        let many: Vec<(u32, TaskEvent)> = (0..40).map(|k| (0, event(1, TaskState::Running, k))).collect();
        let sizes: Vec<usize> = EventRows::new(&many).rows().map(|r| r.idx.len()).collect();
        assert_eq!(sizes, [MAX_EVENTS_PER_ROW, MAX_EVENTS_PER_ROW, 8]);
        // Messages of 10 KB: a row takes as many as their escaped bound fits in half a record.
        let big: Vec<(u32, TaskEvent)> = (0..8)
            .map(|k| {
                let mut e = event(1, TaskState::Running, k);
                e.message = "x".repeat(10_000);
                (0, e)
            })
            .collect();
        let rows = EventRows::new(&big);
        let sizes: Vec<usize> = rows.rows().map(|r| r.idx.len()).collect();
        assert_eq!(sizes, [2, 2, 2, 2]);
        for r in rows.rows() {
            assert!(r.encode(|| "big".into()).expect("fits").len() <= limits::MAX_RECORD / 2);
        }
    }

    #[test]
    fn a_partial_retry_adds_a_row_and_reads_show_each_event_once() {
        use TaskState::*;
        // First call: PLACED, LAUNCHING; a retry repeats LAUNCHING alone.
        let first = vec![(0, event(1, Placed, 10)), (0, event(1, Launching, 11))];
        let retry = vec![(0, event(1, Launching, 11))];
        let mut read = Vec::new();
        for call in [&retry, &first] {
            for r in EventRows::new(call).rows() {
                decode_newest_first(|| "test".into(), &r.encode(|| "test".into()).expect("encodes"), &mut read)
                    .expect("decodes");
            }
        }
        let got: Vec<TaskState> = newest_first(read, 10).iter().map(|e| e.to).collect();
        assert_eq!(got, [Launching, Placed]);
    }

    #[test]
    fn a_body_that_is_neither_an_event_nor_a_list_is_corrupt() {
        let mut out = Vec::new();
        let got = decode_newest_first(|| "event of job j instance 0".into(), "{\"nope\":1}", &mut out);
        assert!(got.is_err_and(|e| e.to_string().contains("job j instance 0")));
        assert!(out.is_empty());
    }
}
