"""A native test harness: scenario files, runners that call a policy in
plain CPython, and the expectation check.

Scenario files are the Rust SDK's (``paceline_plugin_sdk::harness``): YAML
or JSON, snake_case keys, omitted fields zero or empty::

    name: two tasks, one fits
    input:
      placement:
        hosts:
          - { free: { cpu_millis: 1000 }, total: { cpu_millis: 1000 } }
        jobs: [ {} ]
        constraints: [ {} ]
        tasks:
          - { gang: 0, demand: { cpu_millis: 800 } }
          - { gang: 1, demand: { cpu_millis: 800 } }
    expect:
      placement:
        assignments: [ { task: 0, host: 0 } ]
        unplaced: [ { task: 1, reason: insufficient_resources } ]

With pytest::

    from paceline_plugin.harness import load_dir, run_placement

    def test_scenarios():
        for s in load_dir("scenarios"):
            run_placement(MyPolicy, s)

``run_*`` call the policy, run the host's validation on the answer
(:mod:`paceline_plugin.validate`), compare it with ``expect`` (placement:
assignments exactly, unplaced tasks by task and reason; preemption: victims
by task and need, order ignored; lifecycle: actions in order), and return
the decision. They raise :class:`HarnessError` (or
:class:`~paceline_plugin.validate.Violation`) otherwise.

GPU worlds: a placement request may carry ``gpu_hosts``, ``gpu_tasks`` and
``gpu_workload`` (0.1.2) and a preemption request ``gpu_pools``,
``gpu_running`` and ``gpu_needs`` (0.1.3), as in the Rust SDK's files; the
answer's device grants are checked as the host checks them, and victims are
judged in milli-GPUs when the request has its GPU side.

Reading YAML needs PyYAML (``pip install paceline-plugin[harness]``); JSON
files need nothing.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from typing import Any, Dict, List, Type, Union

from . import types as t
from . import validate
from .policy import LifecyclePolicy, PlacementPolicy, PreemptionPolicy


class HarnessError(Exception):
    """A scenario could not be read, is for another world, or its decision
    differs from the expectation."""


class _Bad(Exception):
    pass


def _obj(v: Any, where: str) -> Dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise _Bad(f"{where}: expected a mapping, got {v!r}")
    return v


def _int(v: Any, where: str, lo: int = 0, hi: int = t.U64_MAX) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise _Bad(f"{where}: expected an integer in {lo}..={hi}, got {v!r}")
    return v


def _u32(v: Any, where: str) -> int:
    return _int(v, where, 0, 0xFFFF_FFFF)


def _record(cls: type, v: Any, where: str, conv: Dict[str, Any]) -> Any:
    """Builds dataclass ``cls`` from mapping ``v``: unknown keys are errors,
    missing keys take the default, ``conv[name](value, where)`` converts."""
    d = _obj(v, where)
    names = {f.name for f in fields(cls)}
    unknown = set(d) - names
    if unknown:
        raise _Bad(f"{where}: unknown field(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(names))})")
    kwargs = {k: conv[k](val, f"{where}.{k}") for k, val in d.items()}
    return cls(**kwargs)


def _list(item: Any) -> Any:
    def f(v: Any, where: str) -> list:
        if v is None:
            return []
        if not isinstance(v, list):
            raise _Bad(f"{where}: expected a list, got {v!r}")
        return [item(x, f"{where}[{i}]") for i, x in enumerate(v)]

    return f


def _opt(item: Any) -> Any:
    return lambda v, where: None if v is None else item(v, where)


def _enum(cls: Any) -> Any:
    def f(v: Any, where: str) -> Any:
        try:
            return cls(v)
        except ValueError:
            raise _Bad(f"{where}: {v!r} is not one of {', '.join(m.value for m in cls)}") from None

    return f


def _bool(v: Any, where: str) -> bool:
    if not isinstance(v, bool):
        raise _Bad(f"{where}: expected true or false, got {v!r}")
    return v


def _str(v: Any, where: str) -> str:
    if not isinstance(v, str):
        raise _Bad(f"{where}: expected a string, got {v!r}")
    return v


def _resources(v: Any, where: str) -> t.Resources:
    return _record(t.Resources, v, where, {k: _int for k in ("cpu_millis", "memory_mib", "disk_mib", "gpus", "ports")})


def _variant(v: Any, where: str) -> tuple:
    """A serde externally tagged enum value: ``name`` or ``{name: value}``."""
    if isinstance(v, str):
        return v, None
    if isinstance(v, dict) and len(v) == 1:
        ((k, val),) = v.items()
        return k, val
    raise _Bad(f"{where}: expected `name` or `{{name: value}}`, got {v!r}")


def _host_filter(v: Any, where: str) -> t.HostFilter:
    tag, val = _variant(v, where)
    if tag == "all" and val is None:
        return t.AllHosts()
    if tag == "only":
        return t.OnlyHosts(_list(_u32)(val, f"{where}.only"))
    raise _Bad(f"{where}: a host filter is `all` or `{{only: [hosts]}}`, got {v!r}")


def _placement_request(v: Any, where: str) -> t.PlacementRequest:
    host = lambda x, w: _record(t.HostOffer, x, w, {"free": _resources, "total": _resources})  # noqa: E731
    column = lambda x, w: _record(t.AttributeColumn, x, w, {"key": _str, "values": _list(_u32)})  # noqa: E731
    count = lambda x, w: _record(t.HostCount, x, w, {"host": _u32, "count": _u32})  # noqa: E731
    job = lambda x, w: _record(  # noqa: E731
        t.JobInfo,
        x,
        w,
        {"priority": _u32, "max_per_host": _u32, "spread_over": _opt(_u32), "existing": _list(count)},
    )
    s32 = lambda x, w: _int(x, w, -(2**31), 2**31 - 1)  # noqa: E731
    pref = lambda x, w: _record(t.Preference, x, w, {"attribute": _u32, "value": _u32, "weight": s32})  # noqa: E731
    cset = lambda x, w: _record(  # noqa: E731
        t.ConstraintSet, x, w, {"eligible": _host_filter, "preferences": _list(pref)}
    )
    task = lambda x, w: _record(  # noqa: E731
        t.Task,
        x,
        w,
        {
            "job": _u32,
            "instance": _u32,
            "gang": _u32,
            "demand": _resources,
            "constraints": _u32,
            "preferred_host": _opt(_u32),
        },
    )
    # The GPU side (0.1.2): a device's fields are both required, as in the
    # Rust SDK (a device without its free amount is a mistake, not "full").
    def device(x: Any, w: str) -> t.GpuDevice:
        d = _obj(x, w)
        if set(d) != {"free_milli", "model"}:
            raise _Bad(f"{w}: a GPU device has free_milli and model")
        return t.GpuDevice(_u32(d["free_milli"], f"{w}.free_milli"), _u32(d["model"], f"{w}.model"))

    gpu_host = lambda x, w: _record(t.GpuHost, x, w, {"devices": _list(device)})  # noqa: E731
    gpu_task = lambda x, w: _record(t.GpuTask, x, w, {"milli": _u32, "models": _list(_u32)})  # noqa: E731
    task_class = lambda x, w: _record(  # noqa: E731
        t.TaskClass, x, w, {"cpu_millis": _int, "memory_mib": _int, "milli": _u32, "weight": _u32}
    )
    return _record(
        t.PlacementRequest,
        v,
        where,
        {
            "round": _int,
            "hosts": _list(host),
            "attributes": _list(column),
            "symbols": _list(_str),
            "jobs": _list(job),
            "constraints": _list(cset),
            "tasks": _list(task),
            "gpu_hosts": _list(gpu_host),
            "gpu_tasks": _list(gpu_task),
            "gpu_workload": _list(task_class),
        },
    )


def _preemption_request(v: Any, where: str) -> t.PreemptionRequest:
    pool = lambda x, w: _record(  # noqa: E731
        t.PoolView,
        x,
        w,
        {"path": _str, "reservation": _resources, "entitlement": _resources, "allocation": _resources},
    )
    running = lambda x, w: _record(  # noqa: E731
        t.RunningTask,
        x,
        w,
        {
            "pool": _u32,
            "priority": _u32,
            "preemptible": _bool,
            "revocable": _bool,
            "started_at_ms": _int,
            "resources": _resources,
        },
    )
    need = lambda x, w: _record(  # noqa: E731
        t.Need, x, w, {"pool": _u32, "priority": _u32, "resources": _resources, "from_pools": _list(_u32)}
    )
    gpu_pool = lambda x, w: _record(  # noqa: E731
        t.GpuPool, x, w, {"reservation_milli": _int, "entitlement_milli": _int, "allocation_milli": _int}
    )
    return _record(
        t.PreemptionRequest,
        v,
        where,
        {
            "pools": _list(pool),
            "running": _list(running),
            "needs": _list(need),
            "gpu_pools": _list(gpu_pool),
            "gpu_running": _list(_int),
            "gpu_needs": _list(_int),
        },
    )


def _job_view(v: Any, where: str) -> t.JobView:
    update = lambda x, w: _record(  # noqa: E731
        t.UpdateView,
        x,
        w,
        {
            "target_version": _int,
            "batch_size": _u32,
            "max_unavailable": _u32,
            "max_failures": _u32,
            "rollback_on_failure": _bool,
            "paused": _bool,
            "done": _list(_u32),
            "in_flight": _list(_u32),
            "failed": _list(_u32),
        },
    )
    return _record(
        t.JobView,
        v,
        where,
        {
            "kind": _enum(t.JobKind),
            "state": _enum(t.JobState),
            "instance_count": _u32,
            "max_failures_per_instance": _u32,
            "max_run_time_ms": _int,
            "config_version": _int,
            "resources": _resources,
            "update": _opt(update),
            "matching_hosts": _list(_str),
        },
    )


def _task_view(v: Any, where: str) -> t.TaskView:
    return _record(
        t.TaskView,
        v,
        where,
        {
            "instance": _u32,
            "state": _enum(t.TaskState),
            "run": _u32,
            "failures": _u32,
            "healthy": _opt(_bool),
            "config_version": _int,
            "host": _opt(_str),
            "running_for_ms": _opt(_int),
            "exit_code": _opt(lambda x, w: _int(x, w, -(2**31), 2**31 - 1)),
        },
    )


_UNIT_EVENTS = {
    "job_created": t.JobCreated,
    "update_changed": t.UpdateChanged,
    "hosts_changed": t.HostsChanged,
    "scaled": t.Scaled,
    "kill_requested": t.KillRequested,
}


def _event(v: Any, where: str) -> t.Event:
    tag, val = _variant(v, where)
    if tag in _UNIT_EVENTS and val is None:
        return _UNIT_EVENTS[tag]()
    if tag == "task_changed":
        d = _obj(val, where)
        if set(d) != {"instance", "state"}:
            raise _Bad(f"{where}: task_changed takes instance and state")
        return t.TaskChanged(_u32(d["instance"], where), _enum(t.TaskState)(d["state"], where))
    if tag == "timer":
        return t.Timer(_u32(val, where))
    raise _Bad(f"{where}: unknown event {v!r}")


def _action(v: Any, where: str) -> t.Action:
    tag, val = _variant(v, where)
    if tag == "launch":
        return t.Launch(_u32(val, where))
    if tag == "kill":
        return t.Kill(_u32(val, where))
    if tag == "restart_after":
        d = _obj(val, where)
        if set(d) != {"instance", "delay_ms"}:
            raise _Bad(f"{where}: restart_after takes instance and delay_ms")
        return t.RestartAfter(_u32(d["instance"], where), _int(d["delay_ms"], where))
    if tag == "mark_job":
        return t.MarkJob(_enum(t.JobState)(val, where))
    if tag == "update_batch":
        return t.UpdateBatch(tuple(_list(_u32)(val, where)))
    if tag == "update_finished":
        return t.UpdateFinished(_bool(val, where))
    raise _Bad(f"{where}: unknown action {v!r}")


def _victim(v: Any, where: str) -> t.Victim:
    return _record(t.Victim, v, where, {"task": _u32, "need": _u32, "reason": _enum(t.VictimReason)})


@dataclass
class ExpectedPlacement:
    """An expected placement: assignments exactly, unplaced tasks by task and reason."""

    assignments: List[t.Assignment]
    unplaced: List[tuple]


@dataclass
class Scenario:
    """A recorded input for one world, with an optional expected decision."""

    #: What the scenario shows.
    name: str
    #: ``placement``, ``preemption`` or ``lifecycle``.
    world: str
    #: The input: a request, or ``(job, tasks, event)`` for a lifecycle.
    input: Any
    #: ``ExpectedPlacement``, a list of victims, a list of actions, or ``None``.
    expect: Any = None

    @staticmethod
    def parse(text: str, path: str = "<text>") -> "Scenario":
        """Parses scenario text (YAML, or JSON, which is YAML too)."""
        try:
            doc = json.loads(text)
        except ValueError:
            try:
                import yaml
            except ImportError:
                raise HarnessError(f"scenario {path}: reading YAML needs PyYAML (pip install pyyaml)") from None
            try:
                doc = yaml.safe_load(text)
            except yaml.YAMLError as e:
                raise HarnessError(f"scenario {path} is not valid: {e}") from None
        try:
            return Scenario._from_doc(doc)
        except _Bad as e:
            raise HarnessError(f"scenario {path} is not valid: {e}") from None

    @staticmethod
    def load(path: Union[str, "os.PathLike[str]"]) -> "Scenario":
        """Reads a YAML or JSON scenario file."""
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise HarnessError(f"cannot read scenario {path}: {e}") from None
        return Scenario.parse(text, str(path))

    @staticmethod
    def _from_doc(doc: Any) -> "Scenario":
        d = _obj(doc, "scenario")
        unknown = set(d) - {"name", "input", "expect"}
        if unknown:
            raise _Bad(f"unknown field(s) {', '.join(sorted(unknown))}")
        name = _str(d.get("name"), "name")
        world, val = _variant(d.get("input"), "input")
        if world == "placement":
            inp: Any = _placement_request(val, "input.placement")
        elif world == "preemption":
            inp = _preemption_request(val, "input.preemption")
        elif world == "lifecycle":
            lv = _obj(val, "input.lifecycle")
            if set(lv) - {"job", "tasks", "event"} or "event" not in lv:
                raise _Bad("input.lifecycle takes job, tasks and event")
            inp = (
                _job_view(lv.get("job"), "input.lifecycle.job"),
                _list(_task_view)(lv.get("tasks"), "input.lifecycle.tasks"),
                _event(lv["event"], "input.lifecycle.event"),
            )
        else:
            raise _Bad(f"input: unknown world {world!r} (placement, preemption or lifecycle)")
        expect = None
        if d.get("expect") is not None:
            ew, ev = _variant(d["expect"], "expect")
            if ew != world:
                raise _Bad(f"expect is for {ew}, the input for {world}")
            if world == "placement":
                ed = _obj(ev, "expect.placement")
                if set(ed) - {"assignments", "unplaced"}:
                    raise _Bad("expect.placement takes assignments and unplaced")
                assignment = lambda x, w: _record(t.Assignment, x, w, {"task": _u32, "host": _u32})  # noqa: E731

                def unplaced(x: Any, w: str) -> tuple:
                    u = _obj(x, w)
                    if set(u) != {"task", "reason"}:
                        raise _Bad(f"{w}: an expected unplaced task has task and reason")
                    return (_u32(u["task"], w), _enum(t.UnplacedReason)(u["reason"], w))

                expect = ExpectedPlacement(
                    _list(assignment)(ed.get("assignments"), "expect.placement.assignments"),
                    _list(unplaced)(ed.get("unplaced"), "expect.placement.unplaced"),
                )
            elif world == "preemption":
                expect = _list(_victim)(ev, "expect.preemption")
            else:
                expect = _list(_action)(ev, "expect.lifecycle")
        return Scenario(name, world, inp, expect)

    def check(self, decision: Any) -> None:
        """Runs the host's validation on ``decision`` and compares it with
        this scenario's expectation, if any."""
        if self.world == "placement":
            validate.check_placement(self.input, decision)
        elif self.world == "preemption":
            validate.check_victims(self.input, decision)
        else:
            job, tasks, _ = self.input
            validate.check_actions(job, tasks, decision)
        if self.expect is None:
            return
        if self.world == "placement":
            same = sorted(self.expect.assignments) == sorted(decision.assignments) and sorted(
                (task, reason.value) for task, reason in self.expect.unplaced
            ) == sorted((u.task, t.UnplacedReason(u.reason).value) for u in decision.unplaced)
        elif self.world == "preemption":
            same = sorted((v.task, v.need) for v in self.expect) == sorted((v.task, v.need) for v in decision)
        else:
            same = list(self.expect) == list(decision)
        if not same:
            raise HarnessError(f"scenario {self.name}: expected {self.expect!r}, got {decision!r}")


def load_dir(path: Union[str, "os.PathLike[str]"]) -> List[Scenario]:
    """Loads every scenario file (``.yaml``, ``.yml``, ``.json``) of a
    directory, in name order. Fails on a bad file or none at all."""
    try:
        names = sorted(n for n in os.listdir(path) if n.endswith((".yaml", ".yml", ".json")))
    except OSError as e:
        raise HarnessError(f"cannot read scenario directory {path}: {e}") from None
    if not names:
        raise HarnessError(f"scenario directory {path}: no scenario files")
    return [Scenario.load(os.path.join(path, n)) for n in names]


def _world(scenario: Scenario, policy_world: str) -> None:
    if scenario.world != policy_world:
        raise HarnessError(f"scenario is for the {scenario.world} world, the policy for {policy_world}")


def run_placement(policy: Type[PlacementPolicy], scenario: Scenario) -> t.PlacementResult:
    """Runs a placement policy natively on a scenario and checks the answer."""
    _world(scenario, "placement")
    decision = policy().place(scenario.input)
    scenario.check(decision)
    return decision


def run_preemption(policy: Type[PreemptionPolicy], scenario: Scenario) -> List[t.Victim]:
    """Runs a preemption policy natively on a scenario and checks the answer."""
    _world(scenario, "preemption")
    decision = list(policy().select_victims(scenario.input))
    scenario.check(decision)
    return decision


def run_lifecycle(policy: Type[LifecyclePolicy], scenario: Scenario) -> List[t.Action]:
    """Runs a lifecycle policy natively on a scenario and checks the answer."""
    _world(scenario, "lifecycle")
    job, tasks, event = scenario.input
    decision = list(policy().on_event(job, tasks, event))
    scenario.check(decision)
    return decision


def run(policy: type, scenario: Scenario) -> Any:
    """Runs whichever runner fits ``policy``'s interface."""
    if issubclass(policy, PlacementPolicy):
        return run_placement(policy, scenario)
    if issubclass(policy, PreemptionPolicy):
        return run_preemption(policy, scenario)
    if issubclass(policy, LifecyclePolicy):
        return run_lifecycle(policy, scenario)
    raise HarnessError(f"{policy!r} is not a Paceline policy class")


__all__ = [
    "ExpectedPlacement",
    "HarnessError",
    "Scenario",
    "load_dir",
    "run",
    "run_lifecycle",
    "run_placement",
    "run_preemption",
]
