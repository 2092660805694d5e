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
from .resources import fits_in, saturating_add
from .types import (
    Action,
    JobView,
    Kill,
    Launch,
    OnlyHosts,
    PlacementRequest,
    PlacementResult,
    PreemptionRequest,
    Resources,
    RestartAfter,
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
    gangs. Raises :class:`Violation` at the first rule broken."""
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
    preemptible (or revocable) tasks, only from the pools each need allows."""
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


def check_actions(job: JobView, tasks: Sequence[TaskView], actions: Sequence[Action]) -> None:
    """Checks lifecycle actions: every instance they name exists (below the
    larger of the job's instance count and its task list)."""
    bound = max(job.instance_count, len(tasks))

    def known(i: int) -> None:
        if not i < bound:
            raise Violation("unknown_task", f"task index {i} is not in the request")

    for a in actions:
        if isinstance(a, (Launch, Kill, RestartAfter)):
            known(a.instance)
        elif isinstance(a, UpdateBatch):
            for i in a.instances:
                known(i)


def unplaced_by_reason(result: PlacementResult) -> List[Tuple[str, int]]:
    """Counts unplaced tasks by reason, in order of first appearance."""
    out: Dict[str, int] = {}
    for u in result.unplaced:
        out[u.reason.value] = out.get(u.reason.value, 0) + 1
    return list(out.items())
