//! The pools' CPU and memory entitlement and allocation over the last hour,
//! for the pool page's chart: one sample of every pool (the first
//! [`MAX_POOLS`]) every [`INTERVAL`], the newest [`KEEP`] kept in memory.
//! Read through `PoolService`, as the page's own list is.
//!
//! With a file (`<data_dir>/pool-history.jsonl`), each sample is also
//! appended to it as a JSON line, and a starting server reads back the
//! samples of the last hour, so a restart keeps the chart (decision 0031).
//! The file is rewritten with only the kept samples when it has grown to
//! twice that many lines, and at start; a line that does not parse (a
//! sample cut by a crash) is skipped.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Weak};
use std::time::Duration;

use paceline_proto::v1 as pb;
use paceline_proto::v1::pool_service_server::PoolService;
use tonic::Request;

use crate::pools::PoolApi;

/// Time between samples.
pub(super) const INTERVAL: Duration = Duration::from_secs(30);
/// Samples kept: an hour of them.
const KEEP: usize = 120;
/// Pools sampled, in the tree's order; a larger tree's others have no chart
/// (an hour of 1,000 pools is about 4 MB).
const MAX_POOLS: usize = 1_000;

/// Entitlement and allocation of one pool at one time: CPU millicores and
/// memory MiB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Point {
    entitlement_cpu: u64,
    entitlement_memory: u64,
    allocation_cpu: u64,
    allocation_memory: u64,
}

/// One sample as a line of the file.
#[derive(serde::Serialize, serde::Deserialize)]
struct Line {
    at_ms: u64,
    pools: HashMap<String, Point>,
}

/// The samples, oldest first, and the file they are kept in.
#[derive(Debug, Default)]
pub(super) struct PoolHistory {
    samples: Mutex<VecDeque<(u64, HashMap<String, Point>)>>,
    file: Option<Kept>,
}

/// The file and how many lines it has.
#[derive(Debug)]
struct Kept {
    path: PathBuf,
    lines: Mutex<usize>,
}

impl PoolHistory {
    /// A history kept in `path` too: the samples of the hour before `now_ms`
    /// read back from it (a missing or unreadable file starts empty, with a
    /// warning for the latter), and the file rewritten with only those.
    pub(super) fn kept_in(path: &Path, now_ms: u64) -> PoolHistory {
        let since = now_ms.saturating_sub(KEEP as u64 * INTERVAL.as_millis() as u64);
        let mut samples = VecDeque::new();
        match std::fs::File::open(path) {
            Ok(file) => {
                for line in std::io::BufReader::new(file).lines().map_while(Result::ok) {
                    if let Ok(Line { at_ms, pools }) = serde_json::from_str::<Line>(&line)
                        && at_ms >= since
                        && at_ms <= now_ms
                    {
                        samples.push_back((at_ms, pools));
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(file = %path.display(), error = %e, "pool history: not read back"),
        }
        while samples.len() > KEEP {
            samples.pop_front();
        }
        let history = PoolHistory {
            samples: Mutex::new(samples),
            file: Some(Kept { path: path.to_path_buf(), lines: Mutex::new(0) }),
        };
        history.rewrite();
        history
    }

    /// Replaces the file with the kept samples (written aside, then renamed).
    fn rewrite(&self) {
        let Some(kept) = &self.file else { return };
        let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let mut text = String::new();
        for (at_ms, pools) in samples.iter() {
            if let Ok(line) = serde_json::to_string(&Line { at_ms: *at_ms, pools: pools.clone() }) {
                text.push_str(&line);
                text.push('\n');
            }
        }
        let aside = kept.path.with_extension("jsonl.new");
        let written = std::fs::write(&aside, text).and_then(|()| std::fs::rename(&aside, &kept.path));
        match written {
            Ok(()) => *kept.lines.lock().unwrap_or_else(|e| e.into_inner()) = samples.len(),
            Err(e) => tracing::warn!(file = %kept.path.display(), error = %e, "pool history: not saved"),
        }
    }

    /// Appends the sample to the file; rewrites it once it holds twice the kept samples.
    fn save(&self, at_ms: u64, pools: &HashMap<String, Point>) {
        let Some(kept) = &self.file else { return };
        let Ok(mut line) = serde_json::to_string(&Line { at_ms, pools: pools.clone() }) else { return };
        line.push('\n');
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&kept.path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = appended {
            tracing::warn!(file = %kept.path.display(), error = %e, "pool history: sample not saved");
            return;
        }
        let lines = {
            let mut lines = kept.lines.lock().unwrap_or_else(|e| e.into_inner());
            *lines += 1;
            *lines
        };
        if lines >= 2 * KEEP {
            self.rewrite();
        }
    }

    fn record(&self, at_ms: u64, pools: &[pb::Pool]) {
        let point = |p: &pb::Pool| {
            let (e, a) = (p.entitlement.unwrap_or_default(), p.allocation.unwrap_or_default());
            Point {
                entitlement_cpu: e.cpu,
                entitlement_memory: e.memory,
                allocation_cpu: a.cpu,
                allocation_memory: a.memory,
            }
        };
        let sample: HashMap<String, Point> = pools.iter().take(MAX_POOLS).map(|p| (p.path.clone(), point(p))).collect();
        {
            let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
            samples.push_back((at_ms, sample.clone()));
            while samples.len() > KEEP {
                samples.pop_front();
            }
        }
        self.save(at_ms, &sample);
    }

    /// `path`'s samples as the page reads them, oldest first.
    pub(super) fn of(&self, path: &str) -> serde_json::Value {
        let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let points: Vec<serde_json::Value> = samples
            .iter()
            .filter_map(|(at, pools)| {
                pools.get(path).map(|p| {
                    serde_json::json!({
                        "at_ms": at,
                        "entitlement": {"cpu": p.entitlement_cpu, "memory": p.entitlement_memory},
                        "allocation": {"cpu": p.allocation_cpu, "memory": p.allocation_memory},
                    })
                })
            })
            .collect();
        serde_json::json!({ "interval_ms": INTERVAL.as_millis() as u64, "samples": points })
    }
}

/// Samples now and every [`INTERVAL`] while `history` is alive (the web
/// routes hold it); without a tokio runtime there is nothing to run on and
/// no history. Samples are recorded (and saved) on the blocking pool: the
/// file is written there, never on an async worker.
pub(super) fn start(history: Weak<PoolHistory>, pools: PoolApi) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(INTERVAL);
        loop {
            tick.tick().await;
            let Some(history) = history.upgrade() else { return };
            match pools.list_pools(Request::new(pb::ListPoolsRequest {})).await {
                Ok(list) => {
                    let pools = list.into_inner().pools;
                    let recorded = tokio::task::spawn_blocking(move || history.record(crate::audit::now_ms(), &pools));
                    if let Err(e) = recorded.await {
                        tracing::debug!(error = %e, "pool history: sample not recorded");
                    }
                }
                Err(e) => tracing::debug!(error = %e, "pool history: no sample"),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(path: &str, alloc_cpu: u64) -> pb::Pool {
        pb::Pool {
            path: path.into(),
            entitlement: Some(pb::PerKind { cpu: 4000, memory: 8192, disk: 0, gpu: 0, gpu_milli: 0 }),
            allocation: Some(pb::PerKind { cpu: alloc_cpu, memory: 64, disk: 0, gpu: 0, gpu_milli: 0 }),
            ..Default::default()
        }
    }

    #[test]
    fn an_hour_of_samples_is_kept_per_pool_oldest_first() {
        let h = PoolHistory::default();
        for i in 0..(KEEP as u64 + 5) {
            h.record(i * 30_000, &[pool("/a", i), pool("/b", 1)]);
        }
        let a = h.of("/a");
        let samples = a["samples"].as_array().expect("samples");
        assert_eq!(samples.len(), KEEP, "the oldest went");
        assert_eq!(samples[0]["allocation"]["cpu"], 5);
        assert_eq!(samples[KEEP - 1]["at_ms"], (KEEP as u64 + 4) * 30_000);
        assert_eq!(samples[0]["entitlement"]["memory"], 8192);
        assert!(h.of("/nope")["samples"].as_array().is_some_and(Vec::is_empty));
    }

    #[test]
    fn a_kept_history_is_read_back_after_a_restart_without_older_samples() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pool-history.jsonl");
        let hour = KEEP as u64 * INTERVAL.as_millis() as u64;
        let t0 = 10 * hour;
        let h = PoolHistory::kept_in(&path, t0);
        // Two hours of samples: the first hour's are too old once read back.
        for i in 0..(2 * KEEP as u64 + 3) {
            h.record(t0 + i * 30_000, &[pool("/a", i)]);
        }
        drop(h);
        let lines = std::fs::read_to_string(&path).expect("the file").lines().count();
        assert!(lines <= 2 * KEEP, "the file is rewritten as it grows: {lines} lines");
        // A sample cut by a crash, and a stranger's line, are skipped.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(b"{\"at_ms\": 1, \"pools\": {\"/a\": {\"entitle\nnot json\n"))
            .expect("append");
        let now = t0 + (2 * KEEP as u64 + 2) * 30_000;
        let back = PoolHistory::kept_in(&path, now);
        let samples = back.of("/a")["samples"].as_array().cloned().expect("samples");
        assert_eq!(samples.len(), KEEP, "the last hour, not the first");
        assert_eq!(samples.last().expect("one")["allocation"]["cpu"], 2 * KEEP as u64 + 2);
        assert_eq!(samples[0]["at_ms"], now - hour + 30_000);
        // Recording goes on after the read-back, oldest dropped.
        back.record(now + 30_000, &[pool("/a", 7)]);
        let samples = back.of("/a")["samples"].as_array().cloned().expect("samples");
        assert_eq!(samples.len(), KEEP);
        assert_eq!(samples.last().expect("one")["allocation"]["cpu"], 7);
        // A history without a file writes nothing.
        let plain = PoolHistory::default();
        plain.record(0, &[pool("/a", 1)]);
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 1, "only the kept file");
    }
}
