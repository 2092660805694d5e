"""The Python SDK on its own: arithmetic, the round helpers, validation, the
harness and the component glue, against the behaviour of the Rust SDK."""

from enum import Enum
from types import SimpleNamespace

import pytest
from paceline_plugin import (
    AllHosts,
    Assignment,
    ConstraintSet,
    HostCount,
    HostOffer,
    JobCreated,
    JobInfo,
    Launch,
    LifecyclePolicy,
    OnlyHosts,
    PlacementPolicy,
    PlacementRequest,
    PlacementResult,
    Resources,
    Round,
    ScoreScale,
    Task,
    TaskChanged,
    TaskState,
    Unplaced,
    UnplacedReason,
    export_lifecycle,
    export_placement,
    place_gangs,
)
from paceline_plugin import component, resources as r
from paceline_plugin.harness import HarnessError, Scenario, run_placement, run_preemption
from paceline_plugin.validate import Violation, check_placement

U64_MAX = 2**64 - 1


def test_arithmetic_saturates_like_rust():
    a, b = Resources(5, 10, 0, 1), Resources(7, 3, 1, 0)
    assert r.saturating_sub(a, b) == Resources(0, 7, 0, 1)
    assert r.saturating_add(Resources(U64_MAX), b).cpu_millis == U64_MAX
    assert r.times(b, 3) == Resources(21, 9, 3, 0)
    need, have = Resources(500, 1024), Resources(2000, 3000, 10)
    assert r.fits_in(need, have) and not r.fits_in(have, need)
    assert r.copies_in(need, have) == 2
    assert r.copies_in(Resources(), have) == U64_MAX


def test_score_orders_fullness_and_wraps_at_64_bits():
    s = ScoreScale.for_total(Resources(4096, 8192))
    assert s.score(Resources()) == 0
    assert s.score(Resources(1000)) < s.score(Resources(2000))
    assert s.score(Resources(2048)) == s.score(Resources(0, 4096))
    # Rust multiplies with wrapping_mul: so does the SDK.
    huge = ScoreScale.for_total(Resources(1))
    assert huge.score(Resources(2**40)) == (2**40 * 2**32) & U64_MAX


class FirstFit(PlacementPolicy):
    def place(self, request):
        return place_gangs(Round(request), lambda rd, t: rd.pick_min_by_key(t, lambda h: h))


DOC = """
name: two tasks, one fits
input:
  placement:
    hosts:
      - { free: { cpu_millis: 1000, memory_mib: 1024 }, total: { cpu_millis: 1000, memory_mib: 1024 } }
    jobs: [ {} ]
    constraints: [ {} ]
    tasks:
      - { gang: 0, demand: { cpu_millis: 800 } }
      - { gang: 1, demand: { cpu_millis: 800 } }
expect:
  placement:
    assignments: [ { task: 0, host: 0 } ]
    unplaced: [ { task: 1, reason: insufficient_resources } ]
"""


def test_documented_scenario_parses_and_passes():
    run_placement(FirstFit, Scenario.parse(DOC))


def test_a_mismatch_a_wrong_world_and_a_bad_file_are_reported():
    s = Scenario.parse(DOC.replace("{ task: 0, host: 0 }", "{ task: 1, host: 0 }"))
    with pytest.raises(HarnessError, match="expected"):
        run_placement(FirstFit, s)
    with pytest.raises(HarnessError, match="placement world"):
        run_preemption(FirstFit, Scenario.parse(DOC))
    with pytest.raises(HarnessError, match="unknown field"):
        Scenario.parse("name: x\ninput: { placement: { hostz: [] } }")
    with pytest.raises(HarnessError, match="unknown world"):
        Scenario.parse("name: x\ninput: { nonsense: 1 }")
    with pytest.raises(HarnessError, match="cannot read"):
        Scenario.load("/nonexistent/scenario.yaml")


def test_gangs_are_all_or_nothing_and_give_resources_back():
    total = Resources(2000, 2048)
    req = PlacementRequest(
        hosts=[HostOffer(total, total)],
        jobs=[JobInfo()],
        constraints=[ConstraintSet()],
        tasks=[Task(gang=0, demand=Resources(1500, 10)), Task(gang=0, demand=Resources(1500, 10)), Task(gang=1, demand=Resources(2000, 10))],
    )
    res = FirstFit().place(req)
    assert res.assignments == [Assignment(2, 0)]
    assert [(u.task, u.reason) for u in res.unplaced] == [(0, UnplacedReason.GANG_INCOMPLETE), (1, UnplacedReason.INSUFFICIENT_RESOURCES)]
    assert res.unplaced[0].detail == "task 1 of the gang could not be placed"


def test_round_counts_limits_and_reasons():
    free = Resources(4000, 4096)
    req = PlacementRequest(
        hosts=[HostOffer(free, free), HostOffer(free, free)],
        jobs=[JobInfo(max_per_host=1, existing=[HostCount(0, 1)])],
        constraints=[ConstraintSet(), ConstraintSet(OnlyHosts([]))],
        tasks=[Task(demand=Resources(1)), Task(gang=1, demand=Resources(1)), Task(gang=2, constraints=1)],
    )
    rd = Round(req)
    assert rd.at_max_per_host(0, 0) and not rd.at_max_per_host(0, 1)
    assert rd.pick_min_by_key(0, lambda h: h) == 1
    rd.assign(0, 1)
    assert list(rd.job_hosts(0)) == [(0, 1), (1, 1)]
    assert rd.pick_min_by_key(1, lambda h: h) == UnplacedReason.MAX_PER_HOST
    assert rd.pick_min_by_key(2, lambda h: h) == UnplacedReason.CONSTRAINTS_UNSATISFIABLE
    assert rd.journal() == [1]


def _request():
    host = HostOffer(Resources(1000, 1000), Resources(1000, 1000))
    task = lambda gang: Task(gang=gang, demand=Resources(600, 100))  # noqa: E731
    return PlacementRequest(hosts=[host, host], jobs=[JobInfo()], constraints=[ConstraintSet()], tasks=[task(0), task(1), task(1)])


def _answer(pairs, unplaced):
    return PlacementResult([Assignment(t, h) for t, h in pairs], [Unplaced(t, UnplacedReason.DEFERRED) for t in unplaced])


@pytest.mark.parametrize(
    "pairs,unplaced,kind",
    [
        ([(0, 0)], [1, 2], None),
        ([(7, 0)], [], "unknown_task"),
        ([(0, 9)], [1, 2], "unknown_host"),
        ([(0, 0), (0, 1)], [1, 2], "task_twice"),
        ([(0, 0)], [1], "task_missing"),
        ([(0, 0), (1, 1)], [2], "partial_gang"),
        ([(0, 0), (1, 0), (2, 1)], [], "over_capacity"),
    ],
)
def test_validation_table_matches_the_rust_sdk(pairs, unplaced, kind):
    if kind is None:
        check_placement(_request(), _answer(pairs, unplaced))
    else:
        with pytest.raises(Violation) as e:
            check_placement(_request(), _answer(pairs, unplaced))
        assert e.value.kind == kind


def test_export_checks_the_class_natively_and_returns_none():
    assert export_placement(FirstFit) is None
    with pytest.raises(TypeError):
        export_placement(object)

    class Half(LifecyclePolicy):
        pass

    with pytest.raises(TypeError, match="on_event"):
        export_lifecycle(Half)


def test_on_events_default_keeps_identical_actions_once():
    class Launcher(LifecyclePolicy):
        def on_event(self, job, tasks, event):
            return [Launch(0)] if isinstance(event, (JobCreated, TaskChanged)) else []

    events = [JobCreated(), TaskChanged(0, TaskState.FAILED)]
    assert Launcher().on_events(None, [], events) == [Launch(0)]


class _E(Enum):
    INSUFFICIENT_RESOURCES = 0
    CONSTRAINTS_UNSATISFIABLE = 1
    MAX_PER_HOST = 2
    GANG_INCOMPLETE = 3
    DEFERRED = 4


def test_glue_converts_generated_bindings_both_ways():
    # Stand-ins with the shape of componentize-py's generated classes.
    class Only(SimpleNamespace):
        pass

    wire = SimpleNamespace(
        HostFilter_Only=Only,
        Assignment=lambda task, host: ("a", task, host),
        Unplaced=lambda task, reason, detail: ("u", task, reason, detail),
        UnplacedReason=_E,
        PlacementResult=lambda a, u: (a, u),
    )
    res = lambda c: SimpleNamespace(cpu_millis=c, memory_mib=1, disk_mib=2, gpus=0, ports=0)  # noqa: E731
    req = SimpleNamespace(
        round=7,
        hosts=[SimpleNamespace(free=res(10), total=res(20))],
        attributes=[SimpleNamespace(key="zone", values=[0])],
        symbols=["a"],
        jobs=[SimpleNamespace(priority=1, max_per_host=2, spread_over=None, existing=[SimpleNamespace(host=0, count=1)])],
        constraints=[SimpleNamespace(eligible=Only(value=[0]), preferences=[]), SimpleNamespace(eligible=object(), preferences=[])],
        tasks=[SimpleNamespace(job=0, instance=3, gang=4, demand=res(5), constraints=0, preferred_host=0)],
    )
    sdk = component.placement_request_from_wire(wire, req)
    assert sdk.round == 7 and sdk.hosts[0].free == Resources(10, 1, 2)
    assert sdk.constraints[0].eligible == OnlyHosts([0]) and isinstance(sdk.constraints[1].eligible, AllHosts)
    assert sdk.jobs[0].existing == [HostCount(0, 1)] and sdk.tasks[0].preferred_host == 0
    out = component.placement_result_to_wire(wire, _answer([(0, 0)], [1]))
    assert out == ([("a", 0, 0)], [("u", 1, _E.DEFERRED, "")])


def _preemption():
    from paceline_plugin import Need, PoolView, PreemptionRequest, RunningTask

    task = lambda preemptible, cpu: RunningTask(preemptible=preemptible, resources=Resources(cpu))  # noqa: E731
    return PreemptionRequest(
        pools=[PoolView(), PoolView()],
        running=[task(True, 10), task(True, 10), task(False, 10), task(True, 5)],
        needs=[Need(pool=1, resources=Resources(10))],
    )


@pytest.mark.parametrize(
    "victims,kind",
    [
        ([], None),
        ([(0, 0)], None),
        ([(3, 0), (3, 0)], "task_twice"),
        ([(2, 0)], "not_preemptible"),
        ([(0, 0), (1, 0)], "not_needed"),
        ([(3, 0)], "not_enough"),
        ([(0, 4)], "unknown_need"),
    ],
)
def test_victims_table_matches_the_rust_sdk(victims, kind):
    from paceline_plugin import Victim, VictimReason
    from paceline_plugin.validate import check_victims

    answer = [Victim(t, n, VictimReason.OVER_ENTITLEMENT) for t, n in victims]
    if kind is None:
        check_victims(_preemption(), answer)
    else:
        with pytest.raises(Violation) as e:
            check_victims(_preemption(), answer)
        assert e.value.kind == kind


def _actions_case(name):
    from paceline_plugin import JobState, JobView, Kill, MarkJob, RestartAfter, TaskView

    job = lambda state, count: JobView(state=state, instance_count=count)  # noqa: E731
    tasks = lambda *states: [TaskView(instance=i, state=s) for i, s in enumerate(states)]  # noqa: E731
    I, R, S = TaskState.INITIALIZED, TaskState.RUNNING, TaskState.SUCCEEDED  # noqa: E741
    return {
        "launch all": (job(JobState.PENDING, 2), tasks(I, I), [Launch(0), Launch(1)], None),
        "launch past the count": (job(JobState.RUNNING, 2), tasks(R, R, R), [Launch(2)], "outside_job"),
        "kill past the count": (job(JobState.RUNNING, 2), tasks(R, R, R), [Kill(2)], None),
        "kill unknown": (job(JobState.RUNNING, 2), tasks(R, R), [Kill(9)], "unknown_task"),
        "restart a missing instance": (job(JobState.RUNNING, 3), tasks(R), [RestartAfter(2, 1)], "outside_job"),
        "success too early": (job(JobState.RUNNING, 2), tasks(S, R), [MarkJob(JobState.SUCCEEDED)], "premature_success"),
        "success before start": (job(JobState.PENDING, 1), tasks(), [MarkJob(JobState.SUCCEEDED)], "premature_success"),
        "success": (job(JobState.RUNNING, 2), tasks(S, S, R), [MarkJob(JobState.SUCCEEDED)], None),
        "failed with live tasks": (job(JobState.RUNNING, 2), tasks(R, R), [MarkJob(JobState.FAILED)], None),
        "backwards": (job(JobState.RUNNING, 1), tasks(R), [MarkJob(JobState.PENDING)], "illegal_job_state"),
        "launch after the end": (job(JobState.SUCCEEDED, 1), tasks(S), [Launch(0)], "job_ended"),
        "kill after the end": (job(JobState.FAILED, 1), tasks(R), [Kill(0)], None),
    }[name]


@pytest.mark.parametrize(
    "name",
    [
        "launch all",
        "launch past the count",
        "kill past the count",
        "kill unknown",
        "restart a missing instance",
        "success too early",
        "success before start",
        "success",
        "failed with live tasks",
        "backwards",
        "launch after the end",
        "kill after the end",
    ],
)
def test_actions_table_matches_the_rust_sdk(name):
    from paceline_plugin.validate import check_actions

    job, tasks, actions, kind = _actions_case(name)
    if kind is None:
        check_actions(job, tasks, actions)
    else:
        with pytest.raises(Violation) as e:
            check_actions(job, tasks, actions)
        assert e.value.kind == kind


def test_messages_say_states_as_the_rust_sdk_does():
    from paceline_plugin import JobState, JobView, MarkJob, TaskView
    from paceline_plugin.validate import check_actions

    with pytest.raises(Violation) as e:
        check_actions(JobView(state=JobState.RUNNING, instance_count=2), [TaskView(0, TaskState.SUCCEEDED)], [MarkJob(JobState.SUCCEEDED)])
    assert str(e.value) == "the job cannot succeed while instance 1 is Initialized"
    with pytest.raises(Violation) as e:
        check_actions(JobView(state=JobState.RUNNING), [], [MarkJob(JobState.PENDING)])
    assert str(e.value) == "the job cannot be marked Pending from Running"


# ------------------------------------------------------------ GPU worlds


def _gpu_request():
    """The Rust SDK's ``gpu_request``: two hosts of two devices (host 0: one
    wholly free, one with 400 free and model ``m``; host 1: two wholly
    free); tasks 0-2 ask for 500, 500 and one whole GPU, task 3 for 300 of
    model ``m``."""
    from paceline_plugin import NO_VALUE, GpuDevice, GpuHost, GpuTask

    r = PlacementRequest(
        hosts=[HostOffer(Resources(8000, 8000, 0, 1), Resources(8000, 8000, 0, 2)), HostOffer(Resources(8000, 8000, 0, 2), Resources(8000, 8000, 0, 2))],
        symbols=["m"],
        jobs=[JobInfo()],
        constraints=[ConstraintSet()],
        tasks=[Task(gang=g, demand=Resources(100, 100)) for g in range(4)],
    )
    r.tasks[2].demand.gpus = 1
    r.gpu_hosts = [
        GpuHost([GpuDevice(1000, NO_VALUE), GpuDevice(400, 0)]),
        GpuHost([GpuDevice(1000, NO_VALUE), GpuDevice(1000, NO_VALUE)]),
    ]
    r.gpu_tasks = [GpuTask(500), GpuTask(500), GpuTask(1000), GpuTask(300, [0])]
    return r


def _with_grants(pairs, grants):
    from paceline_plugin import DeviceGrant

    placed = [t for t, _ in pairs]
    out = _answer(pairs, [t for t in range(4) if t not in placed])
    out.grants = [DeviceGrant(t, list(d)) for t, d in grants]
    return out


def test_gpu_shapes_and_takes_as_the_rust_sdk():
    from paceline_plugin import GpuDevice, GpuTask

    assert GpuTask(0).shape() == (0, 0)
    assert GpuTask(250).shape() == (1, 250)
    assert GpuTask(3000).shape() == (3, 1000)
    dev = GpuDevice(1000, 7)
    assert GpuTask(1000).takes(dev, 1000) and not GpuTask(1000).takes(dev, 999)
    assert GpuTask(400).takes(dev, 400) and not GpuTask(400).takes(dev, 399)
    assert GpuTask(400, [7]).takes(dev, 1000) and not GpuTask(400, [8]).takes(dev, 1000)


def test_gpu_grants_are_checked_per_device():
    r = _gpu_request()
    ok = _with_grants([(0, 1), (1, 1), (2, 0), (3, 0)], [(0, [0]), (1, [0]), (2, [0]), (3, [1])])
    check_placement(r, ok)
    for pairs, grants, needle in [
        ([(0, 1), (1, 1)], [(0, [0]), (1, [0]), (1, [1])], "twice"),
        ([(0, 0), (1, 0)], [(0, [1]), (1, [1])], "400 milli-GPU free"),
        ([(0, 1), (2, 1)], [(0, [0]), (2, [0])], "not wholly free"),
        ([(3, 1)], [(3, [0])], "not of a model"),
        ([(0, 1)], [(0, [5])], "does not exist"),
        ([(0, 1)], [], "without GPU devices"),
        ([(0, 1)], [(0, [0]), (1, [0])], "not assigned"),
        ([(2, 1)], [(2, [0, 1])], "asks for 1 device"),
    ]:
        with pytest.raises(Violation) as e:
            check_placement(r, _with_grants(pairs, grants))
        assert e.value.kind == "bad_grant" and needle in str(e.value), (needle, str(e.value))


def test_missing_grants_are_completed_with_the_runtime_default():
    from paceline_plugin import complete_grants

    r = _gpu_request()
    out = _with_grants([(0, 0), (1, 1), (2, 1), (3, 0)], [])
    complete_grants(r, out)
    check_placement(r, out)
    of = {g.task: g.devices for g in out.grants}
    assert (of[0], of[3]) == ([0], [1])
    assert of[1] != of[2]
    crowded = _with_grants([(0, 0), (2, 0)], [])
    complete_grants(r, crowded)
    with pytest.raises(Violation):
        check_placement(r, crowded)


def test_round_tracks_devices_and_gives_them_back_on_undo():
    r = _gpu_request()
    rd = Round(r)
    assert rd.gpu_free == [[1000, 400], [1000, 1000]]
    # A share goes to the device it fills best; a whole GPU to the lowest
    # wholly free one; a model-bound share only to its model.
    assert rd.default_devices(0, 0) == [0], "400 free cannot take 500: the wholly free device"
    assert rd.default_devices(3, 0) == [1] and rd.default_devices(3, 1) is None
    assert rd.fits(3, 0) and not rd.fits(3, 1)
    cp = rd.checkpoint()
    rd.assign(0, 1)
    rd.assign(1, 1)
    assert rd.gpu_free[1] == [0, 1000], "the second half shares the device the first started"
    assert rd.free[1].gpus == 1
    assert rd.default_devices(2, 0) == [0]
    rd.assign(2, 1)
    assert rd.gpu_free[1] == [0, 0] and rd.free[1].gpus == 0
    assert not rd.fits(0, 1), "no device of host 1 has 500 left"
    assert rd.undo_since(cp) == [0, 1, 2]
    assert rd.gpu_free[1] == [1000, 1000] and rd.free[1].gpus == 2
    assert rd.finish().grants == []


def test_place_gangs_on_devices_keeps_the_policys_devices_and_the_default():
    from paceline_plugin import place_gangs_on_devices

    r = _gpu_request()

    def choose(rd, t):
        # Task 0 on host 1's device 1 by choice, the rest by default.
        return (1, [1]) if t == 0 else (1 if t < 3 else 0, None)

    out = place_gangs_on_devices(Round(r), choose)
    check_placement(r, out)
    assert [(g.task, g.devices) for g in out.grants] == [(0, [1]), (1, [1]), (2, [0]), (3, [1])]


def test_preemption_in_milli_gpus_as_the_rust_sdk():
    from paceline_plugin import GpuPool, Need, PoolView, PreemptionRequest, RunningTask, Victim, VictimReason
    from paceline_plugin.validate import check_victims

    def req(need):
        task = RunningTask(preemptible=True, resources=Resources(0, 0, 0, 1))
        return PreemptionRequest(
            pools=[PoolView(), PoolView()],
            running=[task, task, task],
            needs=[Need(pool=1, resources=Resources(0, 0, 0, -(-need // 1000)))],
            gpu_pools=[GpuPool(), GpuPool()],
            gpu_running=[500, 500, 1000],
            gpu_needs=[need],
        )

    v = lambda *ts: [Victim(t, 0, VictimReason.OVER_ENTITLEMENT) for t in ts]  # noqa: E731
    for name, need, victims, kind in [
        ("two halves free a device", 1000, v(0, 1), None),
        ("one half does not", 1000, v(0), "not_enough"),
        ("a whole device does", 1000, v(2), None),
        ("a half for a half", 500, v(0), None),
        ("a whole for a half", 500, v(2), None),
        ("a whole beside a half is one too many", 500, v(0, 2), "not_needed"),
        ("three for one and a half", 1500, v(0, 1, 2), "not_needed"),
    ]:
        if kind is None:
            check_victims(req(need), victims)
        else:
            with pytest.raises(Violation) as e:
                check_victims(req(need), victims)
            assert e.value.kind == kind, name
    whole = req(1000).in_whole_gpus()
    assert not whole.has_gpu_side()
    check_victims(whole, v(0))
    with pytest.raises(Violation, match="not needed"):
        check_victims(whole, v(0, 1))
    milli = req(1000).in_milli_gpus()
    assert [t.resources.gpus for t in milli.running] == [500, 500, 1000] and milli.needs[0].resources.gpus == 1000
    assert req(1000).running[0].resources.gpus == 1, "the request itself is not changed"


GPU_DOC = """
name: a GPU share on the device it fills best
input:
  placement:
    hosts:
      - { free: { cpu_millis: 1000, memory_mib: 1024, gpus: 1 }, total: { cpu_millis: 1000, memory_mib: 1024, gpus: 2 } }
    jobs: [ {} ]
    constraints: [ {} ]
    tasks: [ { gang: 0, demand: { cpu_millis: 100 } } ]
    gpu_hosts: [ { devices: [ { free_milli: 1000, model: 4294967295 }, { free_milli: 300, model: 4294967295 } ] } ]
    gpu_tasks: [ { milli: 250 } ]
    gpu_workload: [ { cpu_millis: 100, milli: 250, weight: 3 } ]
expect:
  placement:
    assignments: [ { task: 0, host: 0 } ]
"""


def test_harness_reads_gpu_scenarios_and_checks_grants():
    s = Scenario.parse(GPU_DOC)
    assert s.input.gpu_hosts[0].devices[1].free_milli == 300 and s.input.gpu_workload[0].weight == 3
    out = run_placement(FirstFit, s)
    assert [(g.task, g.devices) for g in out.grants] == [(0, [1])]

    class NoDevices(PlacementPolicy):
        def place(self, request):
            return PlacementResult([Assignment(0, 0)], [])

    with pytest.raises(Violation, match="without GPU devices"):
        run_placement(NoDevices, s)
    with pytest.raises(HarnessError, match="free_milli and model"):
        Scenario.parse(GPU_DOC.replace(", model: 4294967295 }, { free_milli: 300", " }, { free_milli: 300"))
    pre = Scenario.parse(
        "name: g\ninput: { preemption: { pools: [ {} ], gpu_pools: [ { allocation_milli: 500 } ], gpu_running: [], gpu_needs: [] } }"
    )
    assert pre.input.gpu_pools[0].allocation_milli == 500 and pre.input.has_gpu_side()


def test_glue_puts_the_gpu_side_into_the_request_and_grants_on_the_wire():
    from paceline_plugin import DeviceGrant

    ns = SimpleNamespace
    gpu = ns(
        hosts=[ns(devices=[ns(free_milli=300, model=2)])],
        tasks=[ns(milli=250, models=[2])],
        workload=[ns(cpu_millis=1, memory_mib=2, milli=250, weight=9)],
    )
    req = component.add_gpu_request_from_wire(PlacementRequest(), gpu)
    assert req.gpu_hosts[0].devices[0].free_milli == 300 and req.gpu_tasks[0].models == [2]
    assert req.gpu_workload[0].weight == 9
    wire = SimpleNamespace(
        Assignment=lambda task, host: ("a", task, host),
        Unplaced=lambda task, reason, detail: ("u", task, reason, detail),
        UnplacedReason=_E,
        PlacementResult=lambda a, u: (a, u),
    )
    g = ns(DeviceGrant=lambda task, devices: ("g", task, devices), GpuPlacementResult=lambda p, grants: (p, grants))
    result = _answer([(0, 0)], [])
    result.grants = [DeviceGrant(0, [1])]
    assert component.gpu_placement_result_to_wire(wire, g, result) == (([("a", 0, 0)], []), [("g", 0, [1])])
    pre = component.add_gpu_preemption_from_wire(
        _preemption(), ns(pools=[ns(reservation_milli=1, entitlement_milli=2, allocation_milli=3)], running=[500], needs=[1000])
    )
    assert pre.gpu_pools[0].allocation_milli == 3 and pre.gpu_running == [500] and pre.gpu_needs == [1000]
