"""`binpack` in Python: best-fit placement, decision for decision the same
as the Rust policy in `plugins/binpack` (tests assert it, natively here and
through the real host runtime in `host/plugin/tests/all/languages.rs`).

Each task goes to the eligible host whose free capacity, after taking the
task, is smallest (cpu, memory, disk and GPUs, each as a fraction of the
host's total), so hosts fill up one after another. Gangs are placed whole or
not at all. A task's preferred host wins when it fits; soft preferences
outweigh fullness.

Like the Rust policy it has two paths that score slightly differently, and
the port keeps both: a task with no constraint, preference, per-host limit,
GPU or port goes through `best_fit_all` (32-bit free capacity, weights
2**31 // total, the host's free GPUs counted in its score); every other task
through `Round.pick_min_by_key` with the SDK's `ScoreScale`, and for a GPU
ask (world `placement-gpu`) the milli-GPUs left on the host last, the
devices the runtime's default (`Round.assign`).

The fast path does not scan every host per task: `BestFitIndex` keeps, per
demand, the hosts that fit it in a heap by (score, index), and takes in the
hosts the round changed since its last answer. A scan costs about a
microsecond per (task, host) pair in CPython under Wasm: 0.7 s for 1,000
tasks on 500 hosts, against the 2 s call deadline; the heap costs a few
operations per task. It answers what the scan answers (a test checks both
on random rounds).
"""

import bisect

from paceline_plugin import (
    AllHosts,
    PlacementPolicy,
    Round,
    ScoreScale,
    UnplacedReason,
    place_gangs,
)
from paceline_plugin.resources import saturating_sub

U32_MAX = 0xFFFF_FFFF
U64_MAX = 0xFFFF_FFFF_FFFF_FFFF


def _clamp32(v: int) -> int:
    return v if v <= U32_MAX else U32_MAX


def _weight(total: int) -> int:
    return 0 if total == 0 else _clamp32((1 << 31) // total)


class Compact:
    """Free capacity of every host as tuples
    `(cpu, memory, disk, cpu weight, memory weight, disk weight, gpu term)`,
    kept in step with the round through its journal."""

    __slots__ = ("slots", "seen", "changed", "index")

    def __init__(self, request):
        self.slots = []
        for h in request.hosts:
            f, t = h.free, h.total
            self.slots.append(
                (
                    _clamp32(f.cpu_millis),
                    _clamp32(f.memory_mib),
                    _clamp32(f.disk_mib),
                    _weight(t.cpu_millis),
                    _weight(t.memory_mib),
                    _weight(t.disk_mib),
                    _clamp32(f.gpus) * _weight(t.gpus),
                    _weight(t.gpus),
                )
            )
        self.seen = 0
        # Every host whose slot changed, in order (the round's journal as
        # seen so far), and the best-fit index, built on first use.
        self.changed = []
        self.index = None

    def sync(self, round):
        journal = round.journal()
        for h in journal[self.seen :]:
            f = round.free[h]
            _, _, _, s0, s1, s2, _, s3 = self.slots[h]
            self.slots[h] = (
                _clamp32(f.cpu_millis),
                _clamp32(f.memory_mib),
                _clamp32(f.disk_mib),
                s0,
                s1,
                s2,
                _clamp32(f.gpus) * s3,
                s3,
            )
            self.changed.append(h)
        self.seen = len(journal)


def best_fit_all(slots, dc, dm, dd):
    """Best fit over every host for a task that needs no GPU and no port;
    ties go to the lowest index. Returns -1 when nothing fits."""
    best_score = U64_MAX
    best = -1
    h = -1
    for f0, f1, f2, s0, s1, s2, g, _ in slots:
        h += 1
        if f0 < dc or f1 < dm or f2 < dd:
            continue
        score = (f0 - dc) * s0 + (f1 - dm) * s1 + (f2 - dd) * s2 + g
        if score < best_score:
            best_score = score
            best = h
    return best


class BestFitIndex:
    """`best_fit_all` without a scan of every host per task.

    A host's score for a demand is its base (f0*s0 + f1*s1 + f2*s2 + g, the
    score of an empty demand) less the demand's share (dc*s0 + dm*s1 +
    dd*s2), and hosts of the same totals share their weights, so within one
    weight class the order of scores is the order of bases, whatever the
    demand. The index keeps each class's hosts sorted by (base, index) and
    takes, per class, the first host the demand fits; the best of those
    (score, then index) is the scan's answer. Hosts the round changed are
    moved when the index next answers. A class's walk stops at its first
    fitting host, so it is short unless the tightest hosts of a class are
    too small for the task."""

    __slots__ = ("classes", "class_of", "base", "seen")

    def __init__(self, compact):
        classes = {}
        self.class_of = []
        self.base = []
        for h, (f0, f1, f2, s0, s1, s2, g, _) in enumerate(compact.slots):
            b = f0 * s0 + f1 * s1 + f2 * s2 + g
            hosts = classes.setdefault((s0, s1, s2), [])
            hosts.append((b, h))
            self.base.append(b)
            self.class_of.append(hosts)
        for hosts in classes.values():
            hosts.sort()
        self.classes = list(classes.items())
        self.seen = len(compact.changed)

    def best(self, compact, dc, dm, dd):
        """The host `best_fit_all(compact.slots, dc, dm, dd)` picks, or -1."""
        slots, changed, base = compact.slots, compact.changed, self.base
        for k in range(self.seen, len(changed)):
            h = changed[k]
            f0, f1, f2, s0, s1, s2, g, _ = slots[h]
            b = f0 * s0 + f1 * s1 + f2 * s2 + g
            if b != base[h]:
                hosts = self.class_of[h]
                del hosts[bisect.bisect_left(hosts, (base[h], h))]
                bisect.insort(hosts, (b, h))
                base[h] = b
        self.seen = len(changed)
        best, best_score = -1, 0
        for (s0, s1, s2), hosts in self.classes:
            for b, h in hosts:
                f = slots[h]
                if f[0] >= dc and f[1] >= dm and f[2] >= dd:
                    score = b - (dc * s0 + dm * s1 + dd * s2)
                    if best < 0 or score < best_score or score == best_score and h < best:
                        best, best_score = h, score
                    break
        return best


#: Rounds of fewer hosts are scanned: building the index costs more there.
INDEX_FROM_HOSTS = 64


def best_fit_indexed(compact, dc, dm, dd):
    """`best_fit_all(compact.slots, dc, dm, dd)` from the round's index
    (built on first use; the scan on fewer than `INDEX_FROM_HOSTS` hosts).
    Call `compact.sync` first."""
    if len(compact.slots) < INDEX_FROM_HOSTS:
        return best_fit_all(compact.slots, dc, dm, dd)
    if compact.index is None:
        compact.index = BestFitIndex(compact)
    return compact.index.best(compact, dc, dm, dd)


def _eligible_host(round, task, host):
    e = round.eligible(task)
    return isinstance(e, AllHosts) or host in e.hosts


def best_fit(round, compact, t):
    """The best-fit host for task `t`, or the reason there is none."""
    request = round.request
    task = request.tasks[t]
    demand = task.demand
    gpu = round.gpu_task(t).milli
    p = task.preferred_host
    if p is not None and round.fits(t, p):
        if not round.at_max_per_host(task.job, p) and _eligible_host(round, task, p):
            return p
    jobs = request.jobs
    limited = task.job < len(jobs) and jobs[task.job].max_per_host > 0
    cs = request.constraints
    has_preferences = task.constraints < len(cs) and len(cs[task.constraints].preferences) > 0
    fast = (
        isinstance(round.eligible(task), AllHosts)
        and not limited
        and not has_preferences
        and demand.gpus == 0
        and gpu == 0
        and demand.ports == 0
        and demand.cpu_millis <= U32_MAX
        and demand.memory_mib <= U32_MAX
        and demand.disk_mib <= U32_MAX
    )
    if fast:
        h = best_fit_indexed(compact, demand.cpu_millis, demand.memory_mib, demand.disk_mib)
        return h if h >= 0 else UnplacedReason.INSUFFICIENT_RESOURCES
    free, scales = round.free, round.scales

    def key(h):
        leftover = saturating_sub(free[h], demand)
        # For a GPU ask, then the host with the fewest milli-GPUs left
        # (shares pack onto started devices), as the Rust policy.
        gpu_left = sum(round.gpu_free[h]) if gpu > 0 and h < len(round.gpu_free) else 0
        return (-round.preference_score(task, h), scales[h].score(leftover), gpu_left)

    return round.pick_min_by_key(t, key)


class Binpack(PlacementPolicy):
    """The best-fit policy."""

    def place(self, request):
        compact = Compact(request)

        def choose(round, t):
            compact.sync(round)
            return best_fit(round, compact, t)

        return place_gangs(Round(request), choose)


# ScoreScale is what the scored path uses through Round.scales.
__all__ = ["BestFitIndex", "Binpack", "Compact", "ScoreScale", "best_fit", "best_fit_all", "best_fit_indexed"]
