"""Helpers for placement policies: a working copy of free capacity, per-job
host counts, eligibility, preferences and gang bookkeeping.

The same helpers as the Rust SDK's ``placement`` module, with the same
semantics (tie-breaking included), so a policy ported from Rust with them
gives the same decisions.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterator, List, Optional, Tuple, Union

from .resources import ScoreScale, fits_in, saturating_add, saturating_sub
from .types import (
    NO_VALUE,
    AllHosts,
    Assignment,
    HostFilter,
    PlacementRequest,
    PlacementResult,
    Resources,
    Task,
    Unplaced,
    UnplacedReason,
)

_ALL = AllHosts()


class Round:
    """Mutable state of one placement round: what is still free on each host,
    how many tasks of each job each host holds, and the answer being built.

    ``Round(request)`` counts tasks per (job, host) only for jobs with a
    per-host maximum or a spread attribute; ``Round(request, every_job=True)``
    counts them for every job (for policies that score by a job's tasks).
    """

    __slots__ = ("request", "free", "scales", "_counts", "_tracked", "_journal", "_assignments", "_unplaced")

    def __init__(self, request: PlacementRequest, every_job: bool = False) -> None:
        #: The request being answered.
        self.request = request
        #: Free capacity per host, updated as tasks are assigned.
        self.free: List[Resources] = [
            Resources(h.free.cpu_millis, h.free.memory_mib, h.free.disk_mib, h.free.gpus, h.free.ports)
            for h in request.hosts
        ]
        #: Fullness weights per host.
        self.scales: List[ScoreScale] = [ScoreScale.for_total(h.total) for h in request.hosts]
        self._tracked = [every_job or j.max_per_host > 0 or j.spread_over is not None for j in request.jobs]
        self._counts: Dict[Tuple[int, int], int] = {}
        for j, job in enumerate(request.jobs):
            if self._tracked[j]:
                for hc in job.existing:
                    key = (j, hc.host)
                    self._counts[key] = self._counts.get(key, 0) + hc.count
        self._journal: List[int] = []
        self._assignments: List[Assignment] = []
        self._unplaced: List[Unplaced] = []

    def job_hosts(self, job: int) -> Iterator[Tuple[int, int]]:
        """``(host, count)`` for every host holding tasks of ``job`` (tracked
        jobs only), ascending by host, counting this round's assignments."""
        for (j, h), c in sorted(self._counts.items()):
            if j == job and c > 0:
                yield h, c

    def job_count(self, job: int, host: int) -> int:
        """Tasks of ``job`` on ``host``, counting this round's assignments."""
        return self._counts.get((job, host), 0)

    def at_max_per_host(self, job: int, host: int) -> bool:
        """The job has a per-host maximum that ``host`` has reached."""
        jobs = self.request.jobs
        if 0 <= job < len(jobs) and jobs[job].max_per_host > 0:
            return self.job_count(job, host) >= jobs[job].max_per_host
        return False

    def assign(self, task: int, host: int) -> None:
        """Records ``task`` (an index into the request) on ``host`` and takes its demand."""
        t = self.request.tasks[task]
        self.free[host] = saturating_sub(self.free[host], t.demand)
        if 0 <= t.job < len(self._tracked) and self._tracked[t.job]:
            key = (t.job, host)
            self._counts[key] = self._counts.get(key, 0) + 1
        self._journal.append(host)
        self._assignments.append(Assignment(task, host))

    def leave(self, task: int, reason: UnplacedReason, detail: str = "") -> None:
        """Marks ``task`` unplaced."""
        self._unplaced.append(Unplaced(task, reason, detail))

    def checkpoint(self) -> int:
        """Number of assignments made so far; pass it to :meth:`undo_since`."""
        return len(self._assignments)

    def undo_since(self, checkpoint: int) -> List[int]:
        """Undoes every assignment made since ``checkpoint`` (a gang that
        failed), giving their resources back. Returns the tasks undone."""
        undone = self._assignments[checkpoint:]
        del self._assignments[checkpoint:]
        tasks = []
        for a in undone:
            t = self.request.tasks[a.task]
            self.free[a.host] = saturating_add(self.free[a.host], t.demand)
            self._journal.append(a.host)
            if 0 <= t.job < len(self._tracked) and self._tracked[t.job]:
                key = (t.job, a.host)
                if key in self._counts:
                    self._counts[key] = max(self._counts[key] - 1, 0)
            tasks.append(a.task)
        return tasks

    def journal(self) -> List[int]:
        """Every host whose free capacity changed (by an assignment or an
        undo), in order. A policy that keeps its own copy of free capacity
        replays the entries it has not seen yet."""
        return self._journal

    def eligible(self, task: Task) -> HostFilter:
        """The hosts ``task`` may use after its hard constraints."""
        cs = self.request.constraints
        if 0 <= task.constraints < len(cs):
            return cs[task.constraints].eligible
        return _ALL

    def preference_score(self, task: Task, host: int) -> int:
        """Sum of the weights of ``task``'s soft preferences that ``host`` matches."""
        cs = self.request.constraints
        if not 0 <= task.constraints < len(cs):
            return 0
        return sum(p.weight for p in cs[task.constraints].preferences if self.attribute(p.attribute, host) == p.value)

    def attribute(self, column: int, host: int) -> Optional[int]:
        """The value (a symbol index) of attribute column ``column`` on ``host``."""
        attrs = self.request.attributes
        if not 0 <= column < len(attrs):
            return None
        values = attrs[column].values
        if not 0 <= host < len(values):
            return None
        v = values[host]
        return None if v == NO_VALUE else v

    def pick_min_by_key(self, t: int, key: Callable[[int], object]) -> Union[int, UnplacedReason]:
        """The eligible host where task ``t`` fits and its job is below its
        per-host maximum with the smallest ``key(host)``; ties go to the
        lowest index (the first seen). Without one, the reason: no eligible
        host at all, only hosts at the job's maximum, or not enough resources.
        """
        task = self.request.tasks[t]
        eligible = self.eligible(task)
        if isinstance(eligible, AllHosts):
            hosts = range(len(self.free))
        elif not eligible.hosts:
            return UnplacedReason.CONSTRAINTS_UNSATISFIABLE
        else:
            hosts = eligible.hosts
        best_key = None
        best = -1
        blocked_by_max = False
        free = self.free
        n = len(free)
        demand = task.demand
        for h in hosts:
            if not 0 <= h < n or not fits_in(demand, free[h]):
                continue
            if self.at_max_per_host(task.job, h):
                blocked_by_max = True
                continue
            k = key(h)
            if best < 0 or k < best_key:
                best_key = k
                best = h
        if best >= 0:
            return best
        return UnplacedReason.MAX_PER_HOST if blocked_by_max else UnplacedReason.INSUFFICIENT_RESOURCES

    def finish(self) -> PlacementResult:
        """Finishes the round."""
        return PlacementResult(self._assignments, self._unplaced)


def gangs(tasks: List[Task]) -> Iterator[Tuple[int, int]]:
    """Splits the tasks into gangs: runs of consecutive tasks with the same
    gang id, as ``(start, end)`` index ranges."""
    start = 0
    n = len(tasks)
    while start < n:
        gang = tasks[start].gang
        end = start + 1
        while end < n and tasks[end].gang == gang:
            end += 1
        yield start, end
        start = end


def place_gangs(round: Round, choose: Callable[[Round, int], Union[int, UnplacedReason]]) -> PlacementResult:
    """Places each gang with ``choose``, all or nothing.

    ``choose(round, task_index)`` returns a host index or the
    :class:`UnplacedReason` it found none. When it finds none for a task, the
    gang's earlier assignments are undone, that task is left with the reason
    and its gang-mates with ``GANG_INCOMPLETE``.
    """
    request = round.request
    for start, end in gangs(request.tasks):
        checkpoint = round.checkpoint()
        failed = None
        for t in range(start, end):
            host = choose(round, t)
            if isinstance(host, UnplacedReason):
                failed = (t, host)
                break
            round.assign(t, host)
        if failed is not None:
            culprit, reason = failed
            round.undo_since(checkpoint)
            for t in range(start, end):
                if t == culprit:
                    round.leave(t, reason, "")
                else:
                    round.leave(t, UnplacedReason.GANG_INCOMPLETE, f"task {culprit} of the gang could not be placed")
    return round.finish()
