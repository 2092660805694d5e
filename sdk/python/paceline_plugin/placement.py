"""Helpers for placement policies: a working copy of free capacity, per-job
host counts, eligibility, preferences and gang bookkeeping, and GPU devices
(0.1.2): milli-GPUs free per device, the runtime's default devices, device
grants.

The same helpers as the Rust SDK's ``placement`` module, with the same
semantics (tie-breaking included), so a policy ported from Rust with them
gives the same decisions.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterator, List, Optional, Tuple, Union

from .resources import ScoreScale, fits_in, saturating_add, saturating_sub
from .types import (
    DEVICE_MILLI,
    NO_VALUE,
    AllHosts,
    Assignment,
    DeviceGrant,
    GpuTask,
    HostFilter,
    PlacementRequest,
    PlacementResult,
    Resources,
    Task,
    Unplaced,
    UnplacedReason,
)

_ALL = AllHosts()

#: The ask of a task that asks for no GPU (and of every task of a round
#: without a GPU side).
NO_GPU = GpuTask()


class Round:
    """Mutable state of one placement round: what is still free on each host,
    how many tasks of each job each host holds, and the answer being built.

    ``Round(request)`` counts tasks per (job, host) only for jobs with a
    per-host maximum or a spread attribute; ``Round(request, every_job=True)``
    counts them for every job (for policies that score by a job's tasks).
    """

    __slots__ = (
        "request",
        "free",
        "scales",
        "gpu_free",
        "_counts",
        "_tracked",
        "_journal",
        "_assignments",
        "_unplaced",
        "_grants",
    )

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
        self._grants: List[DeviceGrant] = []
        #: Milli-GPUs free per device, per host (empty when the round has
        #: no GPU side), updated as tasks are assigned.
        self.gpu_free: List[List[int]] = [[d.free_milli for d in h.devices] for h in request.gpu_hosts]

    def gpu_task(self, task: int) -> GpuTask:
        """Task ``task``'s GPU ask (none when the round carries no GPU side)."""
        asks = self.request.gpu_tasks
        return asks[task] if 0 <= task < len(asks) else NO_GPU

    def fits(self, task: int, host: int) -> bool:
        """Whether task ``task`` fits on ``host``: its demand within the
        host's free capacity and, when it asks for GPU, devices that take it."""
        if not 0 <= host < len(self.free) or not 0 <= task < len(self.request.tasks):
            return False
        return fits_in(self.request.tasks[task].demand, self.free[host]) and self.gpu_fits(task, host)

    def gpu_fits(self, task: int, host: int) -> bool:
        """Whether ``host`` has devices for task ``task``'s GPU ask (true for
        a task that asks for none)."""
        ask = self.gpu_task(task)
        count, _ = ask.shape()
        if count == 0:
            return True
        if not (0 <= host < len(self.request.gpu_hosts) and host < len(self.gpu_free)):
            return False
        takes = ask.takes
        found = 0
        for d, f in zip(self.request.gpu_hosts[host].devices, self.gpu_free[host]):
            if takes(d, f):
                found += 1
                if found == count:
                    return True
        return False

    def default_devices(self, task: int, host: int) -> Optional[List[int]]:
        """The devices the runtime's default would give task ``task`` on
        ``host``: whole devices from the lowest wholly free ones, a share on
        the device it fills best (least free that takes it, lowest index on
        ties). ``None`` when the host has none that take it."""
        ask = self.gpu_task(task)
        count, each = ask.shape()
        if count == 0:
            return []
        if not (0 <= host < len(self.request.gpu_hosts) and host < len(self.gpu_free)):
            return None
        devices = self.request.gpu_hosts[host].devices
        free = self.gpu_free[host]
        fitting = [i for i in range(len(devices)) if i < len(free) and ask.takes(devices[i], free[i])]
        if each == DEVICE_MILLI:
            return fitting[:count] if len(fitting) >= count else None
        if not fitting:
            return None
        return [min(fitting, key=lambda i: (free[i], i))]

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
        """Records ``task`` (an index into the request) on ``host`` and takes
        its demand; a GPU ask gets :meth:`default_devices` (none when no
        device takes it: the runtime then refuses the answer)."""
        devices = self.default_devices(task, host)
        self.assign_with_devices(task, host, devices or [])

    def assign_with_devices(self, task: int, host: int, devices: List[int]) -> None:
        """:meth:`assign` with the policy's own choice of devices (indices
        into the host's devices; empty for a task that asks for no GPU)."""
        t = self.request.tasks[task]
        if devices:
            _, each = self.gpu_task(task).shape()
            if 0 <= host < len(self.gpu_free):
                free = self.gpu_free[host]
                for d in devices:
                    if 0 <= d < len(free):
                        free[d] = max(free[d] - each, 0)
                # Whole free devices, as the host offer counts them.
                whole = sum(1 for f in free if f == DEVICE_MILLI)
                left = saturating_sub(self.free[host], t.demand)
                left.gpus = whole
                self.free[host] = left
            self._grants.append(DeviceGrant(task, list(devices)))
        else:
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
            g = next((i for i in range(len(self._grants) - 1, -1, -1) if self._grants[i].task == a.task), None)
            if g is not None:
                # swap_remove, as the Rust SDK does: the grants' order matters
                # to an answer compared with the Rust policy's.
                grant = self._grants[g]
                self._grants[g] = self._grants[-1]
                self._grants.pop()
                _, each = self.gpu_task(a.task).shape()
                if 0 <= a.host < len(self.gpu_free):
                    free = self.gpu_free[a.host]
                    for d in grant.devices:
                        if 0 <= d < len(free):
                            free[d] = min(free[d] + each, DEVICE_MILLI)
                    self.free[a.host].gpus = sum(1 for f in free if f == DEVICE_MILLI)
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
        gpu = self.gpu_task(t).milli > 0
        for h in hosts:
            if not 0 <= h < n or not fits_in(demand, free[h]) or (gpu and not self.gpu_fits(t, h)):
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
        return PlacementResult(self._assignments, self._unplaced, self._grants)


def complete_grants(request: PlacementRequest, result: PlacementResult) -> None:
    """Gives every assigned task that asks for GPU and holds no grant the
    runtime's default devices (:meth:`Round.default_devices`, after the
    grants the answer already makes, in assignment order), in place. The
    runtime does this to every answer before checking it, so a policy that
    leaves device choice to the runtime still places GPU tasks; a task no
    device of its host takes keeps no grant, and the check refuses it."""
    if all(t.milli == 0 for t in request.gpu_tasks):
        return
    rd = Round(request)
    granted = [False] * len(request.tasks)
    explicit = result.grants
    result.grants = []
    host_of = {a.task: a.host for a in result.assignments}
    for g in explicit:
        host = host_of.get(g.task)
        if host is not None and 0 <= g.task < len(granted):
            granted[g.task] = True
            rd.assign_with_devices(g.task, host, list(g.devices))
    grants = list(explicit)
    for a in result.assignments:
        done = granted[a.task] if 0 <= a.task < len(granted) else True
        if done or rd.gpu_task(a.task).milli == 0:
            continue
        devices = rd.default_devices(a.task, a.host)
        if devices is not None:
            rd.assign_with_devices(a.task, a.host, list(devices))
            grants.append(DeviceGrant(a.task, devices))
    result.grants = grants


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
    and its gang-mates with ``GANG_INCOMPLETE``. A GPU ask gets the
    runtime's default devices (:meth:`Round.assign`).
    """

    def with_default_devices(rd: Round, t: int) -> Union[Tuple[int, Optional[List[int]]], UnplacedReason]:
        host = choose(rd, t)
        return host if isinstance(host, UnplacedReason) else (host, None)

    return place_gangs_on_devices(round, with_default_devices)


def place_gangs_on_devices(
    round: Round, choose: Callable[[Round, int], Union[Tuple[int, Optional[List[int]]], UnplacedReason]]
) -> PlacementResult:
    """:func:`place_gangs` for a policy that chooses GPU devices too:
    ``choose`` returns ``(host, devices)``, with ``devices`` the indices
    into the host's devices for a GPU ask or ``None`` for the runtime's
    default, or the :class:`UnplacedReason` it found no host."""
    request = round.request
    for start, end in gangs(request.tasks):
        checkpoint = round.checkpoint()
        failed = None
        for t in range(start, end):
            chosen = choose(round, t)
            if isinstance(chosen, UnplacedReason):
                failed = (t, chosen)
                break
            host, devices = chosen
            if devices is None:
                round.assign(t, host)
            else:
                round.assign_with_devices(t, host, devices)
        if failed is not None:
            culprit, reason = failed
            round.undo_since(checkpoint)
            for t in range(start, end):
                if t == culprit:
                    round.leave(t, reason, "")
                else:
                    round.leave(t, UnplacedReason.GANG_INCOMPLETE, f"task {culprit} of the gang could not be placed")
    return round.finish()
