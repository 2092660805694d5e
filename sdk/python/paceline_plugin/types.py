"""Python mirrors of the ``paceline:scheduler@0.1.3`` WIT types.

Field names and meanings are those of ``wit/types.wit`` (kebab-case there,
snake_case here); see there for the full contract. These are the types a
policy reads and returns, what scenario files hold, and what the component
glue (:mod:`paceline_plugin.component`) converts to and from the bindings that
componentize-py generates, so the same policy code runs in plain CPython and
inside a component.

Integers are Python ints. Fields that are ``u64`` in the WIT hold 0 to
2**64 - 1, ``u32`` fields 0 to 2**32 - 1, ``s32`` fields -2**31 to 2**31 - 1;
the component boundary refuses anything else.

Indices, not names: hosts, tasks, jobs, pools and needs are referred to by
their position in the request's lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import List, Optional, Union

#: Marks a host that has no value for an attribute (``u32::MAX``).
NO_VALUE = 0xFFFF_FFFF

U64_MAX = 0xFFFF_FFFF_FFFF_FFFF


@dataclass(slots=True)
class Resources:
    """An amount of each schedulable resource, in integer units.

    Arithmetic saturates (see :mod:`paceline_plugin.resources`); no
    scheduling decision uses floats.
    """

    #: CPU in millicores: 1000 is one core.
    cpu_millis: int = 0
    #: Memory in MiB.
    memory_mib: int = 0
    #: Disk in MiB.
    disk_mib: int = 0
    #: Whole GPU devices.
    gpus: int = 0
    #: Host ports, as a count.
    ports: int = 0


# ---------------------------------------------------------------- placement


@dataclass(slots=True)
class HostOffer:
    """One host leased to a placement round."""

    #: What is free on the host for this round (already excludes earlier placements).
    free: Resources = field(default_factory=Resources)
    #: The host's whole capacity (used to score how full a host is).
    total: Resources = field(default_factory=Resources)


@dataclass(slots=True)
class AttributeColumn:
    """A host attribute laid out as a column over the request's hosts."""

    #: Attribute name, such as ``zone``.
    key: str = ""
    #: One value per host, in host order: an index into
    #: ``PlacementRequest.symbols``, or :data:`NO_VALUE`.
    values: List[int] = field(default_factory=list)


@dataclass(slots=True)
class HostCount:
    """How many tasks of one job a host already runs."""

    #: Index into ``PlacementRequest.hosts``.
    host: int = 0
    #: Tasks of the job already on that host.
    count: int = 0


@dataclass(slots=True)
class JobInfo:
    """What a policy needs to know about a job whose tasks are in the round."""

    #: Scheduling priority; higher is more important.
    priority: int = 0
    #: At most this many of the job's tasks per host (existing included); 0 is no limit.
    max_per_host: int = 0
    #: Index into ``PlacementRequest.attributes`` to spread the job across, if any.
    spread_over: Optional[int] = None
    #: Hosts that already run tasks of this job, with counts.
    existing: List[HostCount] = field(default_factory=list)


@dataclass(slots=True)
class Preference:
    """A soft constraint: a weighted preference for hosts with an attribute value."""

    #: Index into ``PlacementRequest.attributes``.
    attribute: int = 0
    #: Index into ``PlacementRequest.symbols`` of the preferred value.
    value: int = 0
    #: Added to a matching host's score; negative to avoid such hosts.
    weight: int = 0


@dataclass(slots=True, frozen=True)
class AllHosts:
    """``host-filter.all``: every host of the request is eligible."""


@dataclass(slots=True)
class OnlyHosts:
    """``host-filter.only``: only these host indices, ascending."""

    hosts: List[int] = field(default_factory=list)


#: The hosts a task may run on after its hard constraints.
HostFilter = Union[AllHosts, OnlyHosts]


@dataclass(slots=True)
class ConstraintSet:
    """Constraints shared by tasks with the same needs."""

    #: Hosts that satisfy the hard constraints.
    eligible: HostFilter = field(default_factory=AllHosts)
    #: Soft constraints, summed into a host's score.
    preferences: List[Preference] = field(default_factory=list)


@dataclass(slots=True)
class Task:
    """One task to place."""

    #: Index into ``PlacementRequest.jobs``.
    job: int = 0
    #: The task's instance number within its job.
    instance: int = 0
    #: Gang id, unique within the request: tasks sharing it (contiguous) are
    #: placed all together or not at all.
    gang: int = 0
    #: What the task needs.
    demand: Resources = field(default_factory=Resources)
    #: Index into ``PlacementRequest.constraints``.
    constraints: int = 0
    #: The host the task would like (a stateful task's previous host), if offered.
    preferred_host: Optional[int] = None


@dataclass(slots=True)
class PlacementRequest:
    """Everything a placement policy sees in one round."""

    #: Round number, increasing; for logs and replay.
    round: int = 0
    #: Hosts leased to this round.
    hosts: List[HostOffer] = field(default_factory=list)
    #: Host attributes, one column per key.
    attributes: List[AttributeColumn] = field(default_factory=list)
    #: Interned attribute values referred to by columns and preferences.
    symbols: List[str] = field(default_factory=list)
    #: Jobs whose tasks are in the round.
    jobs: List[JobInfo] = field(default_factory=list)
    #: Constraint sets referred to by ``Task.constraints``.
    constraints: List[ConstraintSet] = field(default_factory=list)
    #: Tasks to place, gangs contiguous, in admission order.
    tasks: List[Task] = field(default_factory=list)
    #: GPU devices per host, in host order (0.1.2, ``gpu-request.hosts``);
    #: empty when no host of the round has a GPU and no task asks for one.
    gpu_hosts: List["GpuHost"] = field(default_factory=list)
    #: GPU ask per task, in task order (0.1.2, ``gpu-request.tasks``; 0 for
    #: a task that asks for none); empty exactly when ``gpu_hosts`` is.
    gpu_tasks: List["GpuTask"] = field(default_factory=list)
    #: The task shapes the runtime has seen lately, most frequent first
    #: (0.1.2, ``gpu-request.workload``; empty without a GPU side).
    gpu_workload: List["TaskClass"] = field(default_factory=list)


#: Milli-GPUs in one device: 1000 is one whole device.
DEVICE_MILLI = 1000


@dataclass(slots=True)
class TaskClass:
    """A shape of task the runtime has seen lately, with how often
    (``gpu-placement-types.task-class``)."""

    #: CPU in millicores.
    cpu_millis: int = 0
    #: Memory in MiB.
    memory_mib: int = 0
    #: GPU ask in milli-GPUs, as in :attr:`GpuTask.milli` (0: none).
    milli: int = 0
    #: Tasks of this shape among those seen (a relative weight).
    weight: int = 0


@dataclass(slots=True)
class GpuDevice:
    """One GPU device of a host (``gpu-placement-types.gpu-device``)."""

    #: Milli-GPUs free on the device for this round (1000: wholly free).
    free_milli: int = DEVICE_MILLI
    #: The device's model: an index into ``PlacementRequest.symbols``, or
    #: :data:`NO_VALUE` when unknown.
    model: int = NO_VALUE


@dataclass(slots=True)
class GpuHost:
    """A host's GPU devices, in the host's device order."""

    #: The devices; empty for a host without GPUs.
    devices: List[GpuDevice] = field(default_factory=list)


@dataclass(slots=True)
class GpuTask:
    """One task's GPU ask (``gpu-placement-types.gpu-task``)."""

    #: Milli-GPUs: 0 for none, below 1000 for a share of one device, a
    #: multiple of 1000 for that many whole devices.
    milli: int = 0
    #: Models the task accepts (indices into ``PlacementRequest.symbols``);
    #: empty: any model.
    models: List[int] = field(default_factory=list)

    def shape(self) -> "tuple[int, int]":
        """Devices the task needs and milli-GPUs on each: ``(n, 1000)`` for
        n whole devices, ``(1, share)`` for a share, ``(0, 0)`` for none."""
        m = self.milli
        if m == 0:
            return (0, 0)
        if m < DEVICE_MILLI:
            return (1, m)
        return (m // DEVICE_MILLI, DEVICE_MILLI)

    def takes(self, device: GpuDevice, free: int) -> bool:
        """Whether ``device`` takes the task's per-device ask with ``free``
        milli-GPUs left on it: whole devices only when wholly free, a share
        when it fits; and of an accepted model."""
        _, each = self.shape()
        room = free == DEVICE_MILLI if each == DEVICE_MILLI else free >= each
        return room and (not self.models or device.model in self.models)


@dataclass(slots=True)
class DeviceGrant:
    """The devices an assigned task gets on its host (``device-grant``)."""

    #: Index into ``PlacementRequest.tasks``; the task must be assigned.
    task: int = 0
    #: Indices into that host's :attr:`GpuHost.devices`: as many as whole
    #: devices asked for, or one for a share.
    devices: List[int] = field(default_factory=list)


@dataclass(slots=True, frozen=True, order=True)
class Assignment:
    """Task ``task`` goes to host ``host``."""

    #: Index into ``PlacementRequest.tasks``.
    task: int
    #: Index into ``PlacementRequest.hosts``.
    host: int


class UnplacedReason(str, Enum):
    """Why a task was not placed. Values are the stable snake_case names."""

    #: No eligible host had enough free resources.
    INSUFFICIENT_RESOURCES = "insufficient_resources"
    #: No host satisfied the task's constraints.
    CONSTRAINTS_UNSATISFIABLE = "constraints_unsatisfiable"
    #: The job reached its per-host maximum on every host that fits.
    MAX_PER_HOST = "max_per_host"
    #: Another task of the same gang could not be placed.
    GANG_INCOMPLETE = "gang_incomplete"
    #: The policy chose not to place it this round.
    DEFERRED = "deferred"


@dataclass(slots=True)
class Unplaced:
    """A task left unplaced, with the reason."""

    #: Index into ``PlacementRequest.tasks``.
    task: int
    #: Category of the reason, for metrics and "why pending".
    reason: UnplacedReason
    #: Human-readable detail; may be empty.
    detail: str = ""


@dataclass(slots=True)
class PlacementResult:
    """A policy's answer: every task exactly once, assigned or unplaced."""

    #: Tasks placed, with their hosts.
    assignments: List[Assignment] = field(default_factory=list)
    #: Tasks not placed, with reasons.
    unplaced: List[Unplaced] = field(default_factory=list)
    #: Device grants of assigned tasks that ask for GPU (0.1.2, the
    #: ``grants`` of ``gpu-placement-result``); a task without one gets
    #: devices chosen by the runtime (whole: the lowest wholly free; a
    #: share: the fullest device it fits on).
    grants: List[DeviceGrant] = field(default_factory=list)


# --------------------------------------------------------------- preemption


@dataclass(slots=True)
class PoolView:
    """A resource pool as the resource manager sees it now."""

    #: Pool path, such as ``/ml/training``.
    path: str = ""
    #: Guaranteed resources.
    reservation: Resources = field(default_factory=Resources)
    #: What the pool is entitled to now.
    entitlement: Resources = field(default_factory=Resources)
    #: What its running non-revocable tasks hold.
    allocation: Resources = field(default_factory=Resources)


@dataclass(slots=True)
class RunningTask:
    """A running task that could be preempted."""

    #: Index into ``PreemptionRequest.pools``.
    pool: int = 0
    #: The task's job priority; higher is more important.
    priority: int = 0
    #: The task's job allows preemption.
    preemptible: bool = False
    #: The task runs on revocable (slack) resources.
    revocable: bool = False
    #: Start time in virtual milliseconds (larger is more recent).
    started_at_ms: int = 0
    #: What the task holds.
    resources: Resources = field(default_factory=Resources)


@dataclass(slots=True)
class Need:
    """Work that is waiting and the resources it needs freed."""

    #: Index into ``PreemptionRequest.pools`` of the pool that waits.
    pool: int = 0
    #: Priority of the waiting work.
    priority: int = 0
    #: Resources that must be freed for it.
    resources: Resources = field(default_factory=Resources)
    #: Victims may come only from these pools (indices); empty means any.
    from_pools: List[int] = field(default_factory=list)


@dataclass(slots=True)
class PreemptionRequest:
    """Everything a preemption policy sees."""

    #: Pools involved.
    pools: List[PoolView] = field(default_factory=list)
    #: Candidate tasks.
    running: List[RunningTask] = field(default_factory=list)
    #: What must be freed, most important first.
    needs: List[Need] = field(default_factory=list)
    #: GPU amounts of each pool in milli-GPUs, in pool order (0.1.3,
    #: ``gpu-preemption-request.pools``); empty when nothing in the request
    #: holds or needs GPU. The ``gpus`` fields above stay whole devices, a
    #: share rounded up.
    gpu_pools: List["GpuPool"] = field(default_factory=list)
    #: Milli-GPUs each running task holds, in ``running`` order (0.1.3);
    #: empty exactly when ``gpu_pools`` is.
    gpu_running: List[int] = field(default_factory=list)
    #: Milli-GPUs each need must have freed, in ``needs`` order (0.1.3);
    #: empty exactly when ``gpu_pools`` is.
    gpu_needs: List[int] = field(default_factory=list)

    def has_gpu_side(self) -> bool:
        """Whether the request carries its GPU side in milli-GPUs (0.1.3)."""
        return bool(self.gpu_pools or self.gpu_running or self.gpu_needs)

    def in_milli_gpus(self) -> "PreemptionRequest":
        """The request with every ``gpus`` field in milli-GPUs, taken from
        the GPU side: the one unit in which "enough" and "no more than
        needed" are right for shares of a device (two 500-milli tasks free
        one device). Without a GPU side it is this request itself, whole
        devices throughout. Compare amounts in this view; the runtime
        checks answers in it. A copy: the request is not changed."""
        if not self.has_gpu_side():
            return self

        def res(r: Resources, gpus: int) -> Resources:
            return Resources(r.cpu_millis, r.memory_mib, r.disk_mib, gpus, r.ports)

        # A missing entry (a malformed side) counts as none: the checks then
        # see less GPU, never more (as the Rust SDK does).
        def at(xs: list, i: int, default: object) -> object:
            return xs[i] if i < len(xs) else default

        pools = []
        for i, p in enumerate(self.pools):
            g = at(self.gpu_pools, i, GpuPool())
            pools.append(
                PoolView(
                    p.path,
                    res(p.reservation, g.reservation_milli),
                    res(p.entitlement, g.entitlement_milli),
                    res(p.allocation, g.allocation_milli),
                )
            )
        running = [
            RunningTask(t.pool, t.priority, t.preemptible, t.revocable, t.started_at_ms, res(t.resources, at(self.gpu_running, i, 0)))
            for i, t in enumerate(self.running)
        ]
        needs = [
            Need(n.pool, n.priority, res(n.resources, at(self.gpu_needs, i, 0)), list(n.from_pools))
            for i, n in enumerate(self.needs)
        ]
        return PreemptionRequest(pools, running, needs)

    def in_whole_gpus(self) -> "PreemptionRequest":
        """The request as a component built before 0.1.3 sees it: without
        its GPU side, GPUs in whole devices (a share rounded up)."""
        if not self.has_gpu_side():
            return self
        return PreemptionRequest(self.pools, self.running, self.needs)


@dataclass(slots=True)
class GpuPool:
    """A pool's GPU amounts in milli-GPUs (``gpu-preemption-types.gpu-pool``)."""

    #: Guaranteed milli-GPUs.
    reservation_milli: int = 0
    #: Milli-GPUs the pool is entitled to now.
    entitlement_milli: int = 0
    #: Milli-GPUs its running non-revocable tasks hold.
    allocation_milli: int = 0


class VictimReason(str, Enum):
    """Why a task was chosen as a victim."""

    #: Its pool is above entitlement and another pool needs the resources.
    OVER_ENTITLEMENT = "over_entitlement"
    #: Higher-priority work in the same pool needs them.
    HIGHER_PRIORITY = "higher_priority"
    #: It ran on revocable resources that are needed now.
    REVOKED = "revoked"


@dataclass(slots=True, frozen=True)
class Victim:
    """A task to preempt."""

    #: Index into ``PreemptionRequest.running``.
    task: int
    #: Index into ``PreemptionRequest.needs`` of the need this frees.
    need: int
    #: Why.
    reason: VictimReason


# ---------------------------------------------------------------- lifecycle


class JobKind(str, Enum):
    """The kinds of job Paceline runs."""

    #: Runs to completion.
    BATCH = "batch"
    #: Long-running, interchangeable instances.
    STATELESS = "stateless"
    #: Long-running instances with a sticky host and a persistent volume.
    STATEFUL = "stateful"
    #: One instance per matching host.
    DAEMON = "daemon"


class TaskState(str, Enum):
    """Task states, as in the job manager's state table."""

    INITIALIZED = "initialized"
    PENDING = "pending"
    READY = "ready"
    PLACING = "placing"
    PLACED = "placed"
    LAUNCHING = "launching"
    LAUNCHED = "launched"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    LOST = "lost"
    KILLED = "killed"
    PREEMPTING = "preempting"
    KILLING = "killing"


class JobState(str, Enum):
    """Job states."""

    INITIALIZED = "initialized"
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    KILLED = "killed"
    KILLING = "killing"


@dataclass(slots=True)
class UpdateView:
    """A rolling update in progress."""

    #: Configuration version the update moves to.
    target_version: int = 0
    #: Instances updated per batch.
    batch_size: int = 0
    #: Most instances that may be unavailable at once.
    max_unavailable: int = 0
    #: Failed instances that abort the update.
    max_failures: int = 0
    #: Roll back to the previous version on failure.
    rollback_on_failure: bool = False
    #: The update is paused.
    paused: bool = False
    #: Instances already moved to the target version.
    done: List[int] = field(default_factory=list)
    #: Instances in the current batch.
    in_flight: List[int] = field(default_factory=list)
    #: Instances that failed during the update.
    failed: List[int] = field(default_factory=list)


@dataclass(slots=True)
class JobView:
    """The job as the lifecycle sees it."""

    #: The job's kind.
    kind: JobKind = JobKind.BATCH
    #: Current job state.
    state: JobState = JobState.INITIALIZED
    #: Desired instance count.
    instance_count: int = 0
    #: Failures allowed per instance before the job fails (batch).
    max_failures_per_instance: int = 0
    #: Maximum run time in milliseconds; 0 means none.
    max_run_time_ms: int = 0
    #: Current configuration version.
    config_version: int = 0
    #: Resources of one instance.
    resources: Resources = field(default_factory=Resources)
    #: The update in progress, if any.
    update: Optional[UpdateView] = None
    #: Hosts that match a daemon job's constraints (names).
    matching_hosts: List[str] = field(default_factory=list)


@dataclass(slots=True)
class TaskView:
    """One instance as the lifecycle sees it."""

    #: Instance number.
    instance: int = 0
    #: Current state.
    state: TaskState = TaskState.INITIALIZED
    #: Run number: a restart makes a new run.
    run: int = 0
    #: Failures so far.
    failures: int = 0
    #: Health, if the task has a health check and reported it.
    healthy: Optional[bool] = None
    #: Configuration version the instance runs.
    config_version: int = 0
    #: Host name, when placed.
    host: Optional[str] = None
    #: Virtual milliseconds since the current run started, when running.
    running_for_ms: Optional[int] = None
    #: Exit code of the last run, when it exited.
    exit_code: Optional[int] = None


# Events: what happened to a job (the WIT variant ``event``).


@dataclass(slots=True, frozen=True)
class JobCreated:
    """The job was created."""


@dataclass(slots=True, frozen=True)
class TaskChanged:
    """A task changed state."""

    #: Instance number.
    instance: int
    #: New state.
    state: TaskState


@dataclass(slots=True, frozen=True)
class Timer:
    """A timer the plugin asked for fired, for this instance."""

    instance: int


@dataclass(slots=True, frozen=True)
class UpdateChanged:
    """An update was started, paused, resumed or aborted."""


@dataclass(slots=True, frozen=True)
class HostsChanged:
    """A host joined or left the set matching a daemon job."""


@dataclass(slots=True, frozen=True)
class Scaled:
    """The job's instance count changed."""


@dataclass(slots=True, frozen=True)
class KillRequested:
    """Someone asked to kill the job."""


Event = Union[JobCreated, TaskChanged, Timer, UpdateChanged, HostsChanged, Scaled, KillRequested]


# Actions: what the runtime should do (the WIT variant ``action``). A plugin
# never performs I/O; it asks. Actions are hashable so repeats can be dropped.


@dataclass(slots=True, frozen=True)
class Launch:
    """Start a new run of an instance."""

    instance: int


@dataclass(slots=True, frozen=True)
class Kill:
    """Kill an instance."""

    instance: int


@dataclass(slots=True, frozen=True)
class RestartAfter:
    """Restart an instance after a delay."""

    #: Instance number.
    instance: int
    #: Delay in milliseconds.
    delay_ms: int


@dataclass(slots=True, frozen=True)
class MarkJob:
    """Set the job's state."""

    state: JobState


@dataclass(slots=True, frozen=True)
class UpdateBatch:
    """Start the next update batch with these instances."""

    instances: tuple


@dataclass(slots=True, frozen=True)
class UpdateFinished:
    """The update finished; roll back when ``rollback`` is true."""

    rollback: bool


Action = Union[Launch, Kill, RestartAfter, MarkJob, UpdateBatch, UpdateFinished]
