"""Checks a policy's answer against its request.

The host runtime never trusts a plugin: it runs these checks (the Rust SDK's
``validate`` module) on every answer and discards an answer that breaks one.
The native harness runs this Python copy, with the same rules in the same
order and the same messages, so an author sees the same verdict before
building a component.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from .placement import gangs
from .resources import fits_in, saturating_add, saturating_sub
from .types import (
    DEVICE_MILLI,
    Action,
    JobState,
    JobView,
    Kill,
    Launch,
    MarkJob,
    OnlyHosts,
    PlacementRequest,
    PlacementResult,
    PreemptionRequest,
    Resources,
    RestartAfter,
    TaskState,
    TaskView,
    UpdateBatch,
    Victim,
)


class Violation(Exception):
    """What is wrong with an answer. ``kind`` names the rule (the Rust
    ``Violation`` variant in snake_case); the message says it in words."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _fmt(r: Resources) -> str:
    return (
        f"Resources {{ cpu_millis: {r.cpu_millis}, memory_mib: {r.memory_mib}, disk_mib: {r.disk_mib}, "
        f"gpus: {r.gpus}, ports: {r.ports} }}"
    )


def check_placement(request: PlacementRequest, result: PlacementResult) -> None:
    """Checks a placement answer: known indices, every task exactly once,
    hosts within free capacity, hard constraints, per-host maxima, whole
    gangs, and GPU devices (0.1.2): every assigned task that asks for GPU
    holds devices of its host that take it (whole devices wholly free, a
    share within what its device has left, an accepted model), and no other
    task holds any. Raises :class:`Violation` at the first rule broken."""
    n_tasks = len(request.tasks)
    n_hosts = len(request.hosts)
    seen = [0] * n_tasks  # 0 unseen, 1 assigned, 2 unplaced
    used = [Resources() for _ in range(n_hosts)]
    for a in result.assignments:
        if not 0 <= a.task < n_tasks:
            raise Violation("unknown_task", f"task index {a.task} is not in the request")
        t = request.tasks[a.task]
        if not 0 <= a.host < n_hosts:
            raise Violation("unknown_host", f"host index {a.host} is not in the request")
        if seen[a.task] != 0:
            raise Violation("task_twice", f"task {a.task} appears more than once in the answer")
        seen[a.task] = 1
        used[a.host] = saturating_add(used[a.host], t.demand)
        if 0 <= t.constraints < len(request.constraints):
            eligible = request.constraints[t.constraints].eligible
            if isinstance(eligible, OnlyHosts) and a.host not in eligible.hosts:
                raise Violation(
                    "ineligible", f"task {a.task} was put on host {a.host}, which its hard constraints exclude"
                )
    for u in result.unplaced:
        if not 0 <= u.task < n_tasks:
            raise Violation("unknown_task", f"task index {u.task} is not in the request")
        if seen[u.task] != 0:
            raise Violation("task_twice", f"task {u.task} appears more than once in the answer")
        seen[u.task] = 2
    for i, s in enumerate(seen):
        if s == 0:
            raise Violation("task_missing", f"task {i} is neither assigned nor unplaced")
    for h, assigned in enumerate(used):
        free = request.hosts[h].free
        if not fits_in(assigned, free):
            raise Violation(
                "over_capacity", f"host {h} is over capacity: assigned {_fmt(assigned)}, free {_fmt(free)}"
            )
    _check_max_per_host(request, result)
    for start, end in gangs(request.tasks):
        first = seen[start]
        if any(s != first for s in seen[start:end]):
            raise Violation("partial_gang", f"gang {request.tasks[start].gang} was placed only in part")
    _check_grants(request, result)


def _check_grants(request: PlacementRequest, result: PlacementResult) -> None:
    """Each assigned task that asks for GPU has exactly one grant, on
    devices of its host that take it given the grants before it; no other
    task has one (the Rust SDK's ``check_grants``)."""

    def bad(task: int, why: str) -> Violation:
        return Violation("bad_grant", f"task {task}'s GPU devices: {why}")

    if not request.gpu_tasks and not result.grants:
        return
    host_of = [None] * len(request.tasks)
    for a in result.assignments:
        host_of[a.task] = a.host
    free = [[d.free_milli for d in h.devices] for h in request.gpu_hosts]
    granted = [False] * len(request.tasks)
    for g in result.grants:
        if not 0 <= g.task < len(host_of):
            raise bad(g.task, "not a task of the request")
        host = host_of[g.task]
        if host is None:
            raise bad(g.task, "granted devices but not assigned")
        if granted[g.task]:
            raise bad(g.task, "granted devices twice")
        granted[g.task] = True
        ask = request.gpu_tasks[g.task] if g.task < len(request.gpu_tasks) else None
        if ask is None or ask.milli == 0:
            raise bad(g.task, "granted devices but asks for no GPU")
        count, each = ask.shape()
        if len(g.devices) != count:
            raise bad(g.task, f"asks for {count} device(s), granted {len(g.devices)}")
        devices = request.gpu_hosts[host].devices if host < len(request.gpu_hosts) else []
        for i, d in enumerate(g.devices):
            if not 0 <= d < len(devices):
                raise bad(g.task, f"device {d} does not exist on host {host}")
            if d in g.devices[:i]:
                raise bad(g.task, f"device {d} granted twice")
            device = devices[d]
            left = free[host][d]
            if not ask.takes(device, left):
                if ask.models and device.model not in ask.models:
                    why = f"device {d} of host {host} is not of a model the task accepts"
                elif each == DEVICE_MILLI:
                    why = f"whole device {d} of host {host} is not wholly free ({left} milli-GPU free)"
                else:
                    why = f"device {d} of host {host} has {left} milli-GPU free, the share needs {each}"
                raise bad(g.task, why)
            free[host][d] = left - each
    for task, host in enumerate(host_of):
        asks = task < len(request.gpu_tasks) and request.gpu_tasks[task].milli > 0
        if host is not None and asks and not granted[task]:
            raise bad(task, "assigned without GPU devices (none of its host takes it)")


def _check_max_per_host(request: PlacementRequest, result: PlacementResult) -> None:
    if all(j.max_per_host == 0 for j in request.jobs):
        return
    counts: Dict[Tuple[int, int], int] = {}
    for j, job in enumerate(request.jobs):
        if job.max_per_host > 0:
            for hc in job.existing:
                counts[(j, hc.host)] = counts.get((j, hc.host), 0) + hc.count
    for a in result.assignments:
        job = request.tasks[a.task].job
        if not 0 <= job < len(request.jobs):
            continue
        info = request.jobs[job]
        if info.max_per_host == 0:
            continue
        c = counts.get((job, a.host), 0) + 1
        counts[(job, a.host)] = c
        if c > info.max_per_host:
            raise Violation("max_per_host", f"job {job} has {c} tasks on host {a.host}, above its per-host maximum")


def check_victims(request: PreemptionRequest, victims: Sequence[Victim]) -> None:
    """Checks a preemption answer: known indices, no victim twice, only
    preemptible (or revocable) tasks, only from the pools each need allows,
    and for each need with victims: they cover it, and none of them could be
    spared. No victims at all is always allowed.

    GPU is counted in milli-GPUs when the request carries its GPU side
    (0.1.3, :meth:`~paceline_plugin.types.PreemptionRequest.in_milli_gpus`):
    two 500-milli victims cover a need of 1000, and a 1000-milli victim
    beside a 500-milli one for a need of 500 is one too many. To judge an
    answer of a component that saw whole devices only, pass
    :meth:`~paceline_plugin.types.PreemptionRequest.in_whole_gpus`."""
    request = request.in_milli_gpus()
    _check_victim_indices(request, victims)
    for n, need in enumerate(request.needs):
        mine = [v for v in victims if v.need == n]
        if not mine:
            continue
        freed = Resources()
        for v in mine:
            freed = saturating_add(freed, request.running[v.task].resources)
        if not fits_in(need.resources, freed):
            raise Violation("not_enough", f"the victims of need {n} do not free what it asks for")
        for v in mine:
            without = saturating_sub(freed, request.running[v.task].resources)
            if fits_in(need.resources, without):
                raise Violation("not_needed", f"victim {v.task} is not needed: need {n} is covered without it")


def _check_victim_indices(request: PreemptionRequest, victims: Sequence[Victim]) -> None:
    seen = [False] * len(request.running)
    for v in victims:
        if not 0 <= v.task < len(request.running):
            raise Violation("unknown_task", f"task index {v.task} is not in the request")
        task = request.running[v.task]
        if not 0 <= v.need < len(request.needs):
            raise Violation("unknown_need", f"need index {v.need} is not in the request")
        need = request.needs[v.need]
        if seen[v.task]:
            raise Violation("task_twice", f"task {v.task} appears more than once in the answer")
        seen[v.task] = True
        if not task.preemptible and not task.revocable:
            raise Violation("not_preemptible", f"victim {v.task} is not preemptible")
        if need.from_pools and task.pool not in need.from_pools:
            raise Violation("wrong_pool", f"victim {v.task} is from a pool that need {v.need} does not allow")


def _name(state: "JobState | TaskState") -> str:
    """A state as the Rust SDK's messages print it (its variant name)."""
    return state.value.capitalize()


_ENDED = (JobState.SUCCEEDED, JobState.FAILED, JobState.KILLED)


def check_actions(job: JobView, tasks: Sequence[TaskView], actions: Sequence[Action]) -> None:
    """Checks lifecycle actions against the views they answer, as the host
    does (the Rust SDK's ``check_actions``):

    - once the job has ended, only kills;
    - ``Launch``, ``RestartAfter`` and ``UpdateBatch`` only below the job's
      count (for a daemon job, its matching hosts); a restart only of an
      instance the job has; a kill of any instance the job has or counts;
    - ``MarkJob``: never back to INITIALIZED or PENDING; SUCCEEDED only when
      every instance below the count has succeeded. FAILED and KILLED are
      accepted with live tasks: the runtime stops them."""
    ended = job.state in _ENDED
    count = max(job.instance_count, len(job.matching_hosts))
    bound = max(count, len(tasks))

    def known(i: int) -> None:
        if not i < bound:
            raise Violation("unknown_task", f"task index {i} is not in the request")

    def counted(i: int) -> None:
        if not i < count:
            raise Violation("outside_job", f"instance {i} is outside the job's instances")

    def has(i: int) -> None:
        if not any(t.instance == i for t in tasks):
            raise Violation("outside_job", f"instance {i} is outside the job's instances")

    for a in actions:
        if ended and not isinstance(a, Kill):
            raise Violation("job_ended", f"the job has ended ({_name(job.state)}); only kills are allowed")
        if isinstance(a, Kill):
            known(a.instance)
        elif isinstance(a, Launch):
            counted(a.instance)
        elif isinstance(a, RestartAfter):
            counted(a.instance)
            has(a.instance)
        elif isinstance(a, UpdateBatch):
            for i in a.instances:
                counted(i)
        elif isinstance(a, MarkJob):
            if a.state in (JobState.INITIALIZED, JobState.PENDING):
                raise Violation(
                    "illegal_job_state", f"the job cannot be marked {_name(a.state)} from {_name(job.state)}"
                )
            if a.state == JobState.SUCCEEDED:
                _check_success(job, tasks)


def _check_success(job: JobView, tasks: Sequence[TaskView]) -> None:
    """SUCCEEDED needs every counted instance succeeded; live instances
    above the count (a job that shrank) are being removed."""
    for i in range(job.instance_count):
        state = next((t.state for t in tasks if t.instance == i), TaskState.INITIALIZED)
        if state != TaskState.SUCCEEDED:
            raise Violation(
                "premature_success", f"the job cannot succeed while instance {i} is {_name(state)}"
            )


def unplaced_by_reason(result: PlacementResult) -> List[Tuple[str, int]]:
    """Counts unplaced tasks by reason, in order of first appearance."""
    out: Dict[str, int] = {}
    for u in result.unplaced:
        out[u.reason.value] = out.get(u.reason.value, 0) + 1
    return list(out.items())
