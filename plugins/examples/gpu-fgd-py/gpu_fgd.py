"""`gpu-fgd` in Python: placement by fragmentation gradient descent for
GPU-sharing workloads, decision for decision the same as the Rust policy
(`plugins/gpu-policies/src/fgd.rs`; the choices the paper leaves open are
stated there).

The fragmentation of a host for one class of task is the GPU capacity of
the host that class cannot use:
- the whole of the host's free GPU when the class does not fit the host at
  all (CPU, memory, or no device that takes it);
- else the free GPU on devices that cannot take it: for a share of one
  device, the devices with less free than the share; for whole devices, the
  devices not wholly free.

A host's fragmentation is the sum over the workload's classes of their
weight x that amount, in integers. Each task goes where its placement makes
the fragmentation grow least, device included. Hosts are compared on the
growth of the *expected* fragmentation (the sum divided by the classes'
total weight) floored to steps of `STEP_MILLI` milli-GPU, then by the
tie-breakers: least GPU left on the host, fullest device, least CPU left,
lowest index.

Every amount here is an integer and every division a floor division by a
positive integer, as in the Rust policy (decision 0056): Python's ints do
not overflow, the Rust one's do not reach its bounds, and `//` by a
positive divisor is Rust's `div_euclid`, so both compute the same numbers.
"""

from paceline_plugin import (
    DEVICE_MILLI,
    AllHosts,
    PlacementPolicy,
    Round,
    UnplacedReason,
    place_gangs_on_devices,
)

#: The step, in milli-GPU of expected fragmentation, in which gradients are
#: compared (the Rust policy's `STEP_MILLI`).
STEP_MILLI = 40

#: Most devices a host is scored with (the Rust policy's guard).
MAX_DEVICES = 64

U64_MAX = 0xFFFF_FFFF_FFFF_FFFF


class Frag:
    """The workload's GPU classes, as fragmentation is measured against them."""

    __slots__ = ("classes", "total")

    def __init__(self, workload):
        #: (cpu millis, memory MiB, milli-GPU, weight), weight > 0.
        self.classes = [(c.cpu_millis, c.memory_mib, c.milli, c.weight) for c in workload if c.weight > 0]
        self.total = sum(c[3] for c in self.classes)

    def step(self, grown):
        """The step on which a growth of `grown` falls: its expected value
        in milli-GPU, floored to a multiple of `STEP_MILLI`, divided by it."""
        return grown // (max(self.total, 1) * STEP_MILLI)

    def of(self, cpu, memory, devices):
        """The fragmentation of a host with `cpu` and `memory` free and its
        devices' free milli-GPU in `devices`."""
        free = sum(devices)
        if free == 0:
            return 0
        whole = devices.count(DEVICE_MILLI)
        most = max(devices)
        lost_below = {}
        total = 0
        for c, m, milli, w in self.classes:
            if milli == 0:
                gpu_fits = True
            elif milli < DEVICE_MILLI:
                gpu_fits = most >= milli
            else:
                gpu_fits = whole >= milli // DEVICE_MILLI
            if c > cpu or m > memory or not gpu_fits:
                lost = free
            else:
                need = milli if milli < DEVICE_MILLI else DEVICE_MILLI
                lost = lost_below.get(need)
                if lost is None:
                    lost = sum(f for f in devices if f < need)
                    lost_below[need] = lost
            # Saturating, as the Rust policy's u64 sum.
            total = min(total + min(w * lost, U64_MAX), U64_MAX)
        return total


def candidates(round, t):
    """The hosts task `t` may go to now: eligible, fitting (devices
    included) and below its job's per-host maximum; else the reason."""
    task = round.request.tasks[t]
    eligible = round.eligible(task)
    if isinstance(eligible, AllHosts):
        hosts = range(len(round.free))
    elif not eligible.hosts:
        return UnplacedReason.CONSTRAINTS_UNSATISFIABLE
    else:
        hosts = eligible.hosts
    blocked_by_max = False
    out = []
    for h in hosts:
        if not round.fits(t, h):
            continue
        if round.at_max_per_host(task.job, h):
            blocked_by_max = True
            continue
        out.append(h)
    if out:
        return out
    return UnplacedReason.MAX_PER_HOST if blocked_by_max else UnplacedReason.INSUFFICIENT_RESOURCES


def choose(round, frag, t):
    """The host and devices where task `t` grows fragmentation least."""
    request = round.request
    task = request.tasks[t]
    ask = round.gpu_task(t)
    count, each = ask.shape()
    hosts = candidates(round, t)
    if isinstance(hosts, UnplacedReason):
        return hosts
    demand = task.demand
    best_key = None
    best = None
    for h in hosts:
        free = round.free[h]
        cpu_after = max(free.cpu_millis - demand.cpu_millis, 0)
        mem_after = max(free.memory_mib - demand.memory_mib, 0)
        devices = round.gpu_free[h][:MAX_DEVICES] if h < len(round.gpu_free) else []
        before = frag.of(free.cpu_millis, free.memory_mib, devices)
        after = list(devices)
        if count == 0:
            options = [[]]
        elif each == DEVICE_MILLI:
            d = round.default_devices(t, h)
            options = [] if d is None else [d]
        else:
            # One option per distinct free amount (the lowest index of
            # each): devices alike score alike.
            info = request.gpu_hosts[h].devices
            seen = set()
            options = []
            for i, f in enumerate(devices):
                if f not in seen and ask.takes(info[i], f):
                    seen.add(f)
                    options.append([i])
        # The host's best devices: the least growth, exactly, then the
        # fullest device.
        here = None
        for option in options:
            for d in option:
                after[d] -= each
            grown = frag.of(cpu_after, mem_after, after) - before
            gpu_left = sum(after)
            dev_left = after[option[0]] if option else 0
            for d in option:
                after[d] += each
            if here is None or (grown, dev_left) < here[0]:
                here = ((grown, dev_left), gpu_left, option)
        if here is not None:
            (grown, dev_left), gpu_left, option = here
            key = (frag.step(grown), gpu_left, dev_left, cpu_after, h)
            if best_key is None or key < best_key:
                best_key = key
                best = (h, option)
    if best is None:
        return UnplacedReason.INSUFFICIENT_RESOURCES
    return best


class Fgd(PlacementPolicy):
    """The fragmentation gradient descent policy."""

    def place(self, request):
        frag = Frag(request.gpu_workload)
        return place_gangs_on_devices(Round(request), lambda rd, t: choose(rd, frag, t))


__all__ = ["Fgd", "Frag", "MAX_DEVICES", "STEP_MILLI", "candidates", "choose"]
