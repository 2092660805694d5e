//! What runs actually use: CPU and memory, sampled for every running run in
//! one pass (no thread or timer per run) and reported on heartbeats
//! (`Heartbeat.usage`).
//!
//! A run with a cgroup of its own (cgroup v2 isolation) is read from that
//! cgroup: `cpu.stat`'s `usage_usec` and `memory.current`, which count
//! everything the run started, wherever it moved. Otherwise `/proc` is
//! scanned once per pass and each process is credited to the run whose
//! process group it is in (the launch wrapper leads a group of its own,
//! pgid = its pid, and the task inherits it): CPU is utime + stime of the
//! live processes plus cutime + cstime (children they waited for, which
//! were in the group too), memory the sum of their resident set sizes.
//! A process that leaves the group (`setsid`, `setpgid`) is not counted
//! under /proc; cgroups do not have that gap.
//!
//! CPU use is a rate: millicores = Δcpu_µs / Δwall_µs × 1000 between two
//! samples, so a run is reported from its second sample on.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// One run to sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    /// The run.
    pub run_id: String,
    /// Its process group (the launch wrapper's pid).
    pub pgid: u32,
    /// Its own cgroup, under cgroup v2 isolation.
    pub cgroup: Option<PathBuf>,
}

/// A run's measured use, as the heartbeat carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunUsage {
    /// CPU between the last two samples, millicores.
    pub cpu_millis: u64,
    /// Memory at the last sample, MiB.
    pub memory_mib: u64,
    /// When the last sample was taken, ms since the Unix epoch.
    pub sampled_at_ms: u64,
}

/// One reading of a run: cumulative CPU time and current memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reading {
    /// CPU time used so far, µs.
    pub cpu_usec: u64,
    /// Memory now, bytes.
    pub memory_bytes: u64,
}

/// What one `/proc/<pid>/stat` line says that sampling needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcStat {
    /// Process group.
    pub pgid: u32,
    /// utime + stime + cutime + cstime, clock ticks.
    pub cpu_ticks: u64,
    /// Resident set size, pages.
    pub rss_pages: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) may hold spaces
/// and parentheses, so fields are counted from after the last `)`.
pub(crate) fn parse_proc_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    // Index 0 is field 3 (state): field n is at n - 3.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |field: usize| f.get(field - 3).and_then(|v| v.parse::<i64>().ok());
    let pgid = u32::try_from(num(5)?).ok()?;
    // cutime and cstime are signed in the kernel's format; never negative in practice.
    let cpu_ticks = [14, 15, 16, 17].iter().map(|&i| num(i).map(|v| v.max(0) as u64)).sum::<Option<u64>>()?;
    let rss_pages = num(24)?.max(0) as u64;
    Some(ProcStat { pgid, cpu_ticks, rss_pages })
}

/// `usage_usec` of a cgroup's `cpu.stat`.
pub(crate) fn parse_cpu_stat(text: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix("usage_usec ")).and_then(|v| v.trim().parse().ok())
}

/// A cgroup's `memory.current` (bytes).
pub(crate) fn parse_memory_current(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// Millicores used between two readings `wall_us` apart; 0 when no time
/// passed or the counter went back (a process left the group unreaped).
pub(crate) fn millicores(prev_cpu_usec: u64, cpu_usec: u64, wall_us: u64) -> u64 {
    if wall_us == 0 {
        return 0;
    }
    let used = u128::from(cpu_usec.saturating_sub(prev_cpu_usec));
    u64::try_from(used * 1000 / u128::from(wall_us)).unwrap_or(u64::MAX)
}

/// Clock ticks per second and the page size, from the process's auxiliary
/// vector (`AT_CLKTCK`, `AT_PAGESZ`: what `sysconf` reads), else Linux's
/// fixed USER_HZ 100 and 4 KiB.
fn ticks_and_page() -> (u64, u64) {
    static CACHE: OnceLock<(u64, u64)> = OnceLock::new();
    *CACHE.get_or_init(|| {
        let auxv = std::fs::read("/proc/self/auxv").unwrap_or_default();
        parse_auxv(&auxv)
    })
}

fn parse_auxv(auxv: &[u8]) -> (u64, u64) {
    const AT_PAGESZ: u64 = 6;
    const AT_CLKTCK: u64 = 17;
    let (mut ticks, mut page) = (100, 4096);
    let word = std::mem::size_of::<usize>();
    for pair in auxv.chunks_exact(2 * word) {
        let read = |b: &[u8]| {
            let mut a = [0u8; 8];
            a[..word].copy_from_slice(b);
            u64::from_ne_bytes(a)
        };
        let (key, value) = (read(&pair[..word]), read(&pair[word..]));
        match key {
            AT_PAGESZ if value > 0 => page = value,
            AT_CLKTCK if value > 0 => ticks = value,
            _ => {}
        }
    }
    (ticks, page)
}

/// Keeps the previous reading of each run and the usage derived from the
/// last two.
#[derive(Debug)]
pub(crate) struct Sampler {
    proc_root: PathBuf,
    /// Run → (monotonic µs, reading) of its last sample.
    prev: HashMap<String, (u64, Reading)>,
    latest: HashMap<String, RunUsage>,
}

impl Sampler {
    /// A sampler reading `proc_root` (`/proc`; a fixture dir in tests).
    pub(crate) fn new(proc_root: impl Into<PathBuf>) -> Self {
        Sampler { proc_root: proc_root.into(), prev: HashMap::new(), latest: HashMap::new() }
    }

    /// Samples `targets` (every running run) at monotonic `mono_us` and
    /// wall clock `now_ms`; forgets runs no longer among them.
    pub(crate) fn sample(&mut self, targets: &[Target], mono_us: u64, now_ms: u64) {
        let readings = self.read(targets);
        self.record(readings, mono_us, now_ms);
    }

    /// Reads every target: cgroups one by one, the rest in one /proc scan.
    fn read(&self, targets: &[Target]) -> Vec<(String, Reading)> {
        let mut out = Vec::with_capacity(targets.len());
        let mut by_pgid: HashMap<u32, &str> = HashMap::new();
        for t in targets {
            match &t.cgroup {
                Some(cg) => {
                    if let Some(r) = read_cgroup(cg) {
                        out.push((t.run_id.clone(), r));
                    }
                }
                // pgid 0 or 1 would be the kernel's or init's group.
                None if t.pgid > 1 => {
                    by_pgid.insert(t.pgid, &t.run_id);
                }
                None => {}
            }
        }
        if by_pgid.is_empty() {
            return out;
        }
        let (ticks, page) = ticks_and_page();
        let mut sums: HashMap<u32, (u64, u64)> = HashMap::new();
        let Ok(dir) = std::fs::read_dir(&self.proc_root) else { return out };
        for entry in dir.flatten() {
            let name = entry.file_name();
            if !name.to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())) {
                continue;
            }
            // A process may exit between the listing and the read.
            let Ok(text) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
            let Some(s) = parse_proc_stat(&text) else { continue };
            if by_pgid.contains_key(&s.pgid) {
                let sum = sums.entry(s.pgid).or_default();
                sum.0 += s.cpu_ticks;
                sum.1 += s.rss_pages;
            }
        }
        for (pgid, (cpu_ticks, rss_pages)) in sums {
            if let Some(run_id) = by_pgid.get(&pgid) {
                let reading = Reading {
                    cpu_usec: cpu_ticks.saturating_mul(1_000_000) / ticks.max(1),
                    memory_bytes: rss_pages.saturating_mul(page),
                };
                out.push(((*run_id).to_owned(), reading));
            }
        }
        out
    }

    fn record(&mut self, readings: Vec<(String, Reading)>, mono_us: u64, now_ms: u64) {
        let mut prev = HashMap::with_capacity(readings.len());
        let mut latest = HashMap::with_capacity(readings.len());
        for (run_id, r) in readings {
            if let Some((then, before)) = self.prev.get(&run_id) {
                let usage = RunUsage {
                    cpu_millis: millicores(before.cpu_usec, r.cpu_usec, mono_us.saturating_sub(*then)),
                    memory_mib: r.memory_bytes / (1024 * 1024),
                    sampled_at_ms: now_ms,
                };
                latest.insert(run_id.clone(), usage);
            }
            prev.insert(run_id, (mono_us, r));
        }
        // Runs not read this time (ended, unreadable) drop out of both.
        self.prev = prev;
        self.latest = latest;
    }

    /// The latest usage of each run sampled twice or more.
    pub(crate) fn latest(&self) -> impl Iterator<Item = (&String, &RunUsage)> {
        self.latest.iter()
    }
}

fn read_cgroup(cg: &Path) -> Option<Reading> {
    let cpu = parse_cpu_stat(&std::fs::read_to_string(cg.join("cpu.stat")).ok()?)?;
    let memory = parse_memory_current(&std::fs::read_to_string(cg.join("memory.current")).ok()?)?;
    Some(Reading { cpu_usec: cpu, memory_bytes: memory })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stat line as the kernel writes it, with a command name holding
    /// spaces and a parenthesis.
    fn stat_line(pid: u32, pgid: u32, utime: u64, stime: u64, cutime: u64, rss: u64) -> String {
        format!(
            "{pid} (my (odd) task) S 1 {pgid} {pgid} 0 -1 4194560 100 0 0 0 {utime} {stime} {cutime} 0 20 0 1 0 \
             12345 10485760 {rss} 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0"
        )
    }

    #[test]
    fn proc_stat_fields_are_counted_after_the_last_parenthesis() {
        let s = parse_proc_stat(&stat_line(42, 40, 150, 50, 25, 2560)).unwrap_or_else(|| panic!("unparsed"));
        assert_eq!(s, ProcStat { pgid: 40, cpu_ticks: 225, rss_pages: 2560 });
        assert_eq!(parse_proc_stat("42 (truncated) S 1"), None);
        assert_eq!(parse_proc_stat(""), None);
    }

    #[test]
    fn cgroup_files_are_parsed() {
        let cpu = "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 0\n";
        assert_eq!(parse_cpu_stat(cpu), Some(2_500_000));
        assert_eq!(parse_cpu_stat("user_usec 1\n"), None);
        assert_eq!(parse_memory_current("209715200\n"), Some(200 << 20));
        assert_eq!(parse_memory_current("max\n"), None);
    }

    #[test]
    fn cpu_use_is_a_rate_between_two_readings() {
        // 1.5 s of CPU in 2 s of wall time: 750 millicores.
        assert_eq!(millicores(1_000_000, 2_500_000, 2_000_000), 750);
        // Two cores busy.
        assert_eq!(millicores(0, 10_000_000, 5_000_000), 2000);
        assert_eq!(millicores(5, 5, 0), 0);
        // A counter that went back (a process gone unreaped) is no use at all, not a wrap.
        assert_eq!(millicores(9_000, 1_000, 1_000_000), 0);
    }

    #[test]
    fn auxv_gives_ticks_and_page_size() {
        let word = std::mem::size_of::<usize>();
        let mut auxv = Vec::new();
        for (k, v) in [(6u64, 16384u64), (17, 250), (0, 0)] {
            auxv.extend_from_slice(&k.to_ne_bytes()[..word]);
            auxv.extend_from_slice(&v.to_ne_bytes()[..word]);
        }
        assert_eq!(parse_auxv(&auxv), (250, 16384));
        assert_eq!(parse_auxv(&[]), (100, 4096));
        let (ticks, page) = ticks_and_page();
        assert!(ticks > 0 && page >= 4096);
    }

    #[test]
    fn a_proc_fixture_is_summed_per_group_and_a_cgroup_read_directly() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let proc_root = dir.path().join("proc");
        let write = |pid: u32, line: String| {
            let d = proc_root.join(pid.to_string());
            std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(d.join("stat"), line).unwrap_or_else(|e| panic!("{e}"));
        };
        let (ticks, page) = ticks_and_page();
        // Run a: wrapper 100 and task 101 in group 100; someone else's 200.
        write(100, stat_line(100, 100, 0, 0, 0, 100));
        write(101, stat_line(101, 100, ticks, 0, 0, (150 << 20) / page));
        write(200, stat_line(200, 200, 99 * ticks, 0, 0, 1 << 20));
        std::fs::create_dir_all(proc_root.join("self")).unwrap_or_else(|e| panic!("{e}"));
        let cg = dir.path().join("cg");
        std::fs::create_dir_all(&cg).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(cg.join("cpu.stat"), "usage_usec 1000000\n").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(cg.join("memory.current"), format!("{}\n", 64u64 << 20)).unwrap_or_else(|e| panic!("{e}"));
        let targets = vec![
            Target { run_id: "a".into(), pgid: 100, cgroup: None },
            Target { run_id: "b".into(), pgid: 300, cgroup: Some(cg.clone()) },
        ];
        let mut s = Sampler::new(&proc_root);
        s.sample(&targets, 0, 1_000);
        assert_eq!(s.latest().count(), 0, "one sample gives no rate");
        // One second later: a used half a core more, b a quarter.
        write(101, stat_line(101, 100, ticks + ticks / 2, 0, 0, (150 << 20) / page));
        std::fs::write(cg.join("cpu.stat"), "usage_usec 1250000\n").unwrap_or_else(|e| panic!("{e}"));
        s.sample(&targets, 1_000_000, 2_000);
        let latest: HashMap<&String, &RunUsage> = s.latest().collect();
        let a = latest.get(&"a".to_owned()).unwrap_or_else(|| panic!("a not sampled"));
        assert_eq!((a.cpu_millis, a.memory_mib, a.sampled_at_ms), (500, 150, 2_000));
        let b = latest.get(&"b".to_owned()).unwrap_or_else(|| panic!("b not sampled"));
        assert_eq!((b.cpu_millis, b.memory_mib), (250, 64));
        // A run that is no longer a target is forgotten.
        s.sample(&targets[..1], 2_000_000, 3_000);
        assert_eq!(s.latest().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), vec!["a"]);
    }
}
