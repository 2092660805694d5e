"""`priority-preempt` in Python: the default preemption policy, decision for
decision the same as the Rust one in `plugins/priority-preempt`.

For each need, in order, candidates are the preemptible (or revocable)
running tasks of the pools the need allows; inside the waiting pool itself
only tasks of lower priority than the waiting work qualify (and revocable
ones). They are taken revocable first, then lowest priority, then most
recently started. A non-revocable task of another pool is skipped when taking
it would bring that pool below its reservation in a kind the need is short
of. A candidate is taken only if it frees a kind the need still lacks; once
the need is covered, victims that turned out unnecessary are dropped again,
most valuable first. A need that cannot be covered in full takes no victims.

GPU counts in milli-GPUs when the request carries its GPU side (the
`preemption-gpu` world, WIT 0.1.3): two tasks holding half a device each
free one device, and a need of half a device is not paid with a whole one.
"""

from paceline_plugin import PreemptionPolicy, Victim, VictimReason
from paceline_plugin.resources import fits_in, is_zero, minimum, saturating_add, saturating_sub

U64_MAX = 0xFFFF_FFFF_FFFF_FFFF


def _keeps_reservation(request, allocation, t, need):
    """Taking `t` leaves its pool at or above its reservation in every kind
    `t` holds and the need asks for."""
    if t.revocable or t.pool == need.pool:
        return True
    if not (0 <= t.pool < len(request.pools) and t.pool < len(allocation)):
        return False
    after = saturating_sub(allocation[t.pool], t.resources)
    r = request.pools[t.pool].reservation
    held, wanted = t.resources, need.resources

    def keeps(h, w, a, reserved):
        return h == 0 or w == 0 or a >= reserved

    return (
        keeps(held.cpu_millis, wanted.cpu_millis, after.cpu_millis, r.cpu_millis)
        and keeps(held.memory_mib, wanted.memory_mib, after.memory_mib, r.memory_mib)
        and keeps(held.disk_mib, wanted.disk_mib, after.disk_mib, r.disk_mib)
        and keeps(held.gpus, wanted.gpus, after.gpus, r.gpus)
    )


def _take(allocation, t, take):
    """Subtracts (`take`) or adds back a non-revocable task's resources."""
    if t.revocable or not 0 <= t.pool < len(allocation):
        return
    a = allocation[t.pool]
    allocation[t.pool] = saturating_sub(a, t.resources) if take else saturating_add(a, t.resources)


def select(request):
    request = request.in_milli_gpus()
    running = request.running
    taken = [False] * len(running)
    allocation = [p.allocation for p in request.pools]
    victims = []
    for n, need in enumerate(request.needs):
        candidates = [
            i
            for i, t in enumerate(running)
            if not taken[i]
            and (t.preemptible or t.revocable)
            and (not need.from_pools or t.pool in need.from_pools)
            and (t.pool != need.pool or t.priority < need.priority or t.revocable)
        ]
        candidates.sort(key=lambda i: (not running[i].revocable, running[i].priority, U64_MAX - running[i].started_at_ms, i))

        chosen = []
        freed = saturating_sub(need.resources, need.resources)  # zero
        for c in candidates:
            if fits_in(need.resources, freed):
                break
            t = running[c]
            unmet = saturating_sub(need.resources, freed)
            if is_zero(minimum(t.resources, unmet)):
                continue
            if not _keeps_reservation(request, allocation, t, need):
                continue
            _take(allocation, t, True)
            freed = saturating_add(freed, t.resources)
            chosen.append(c)
        if not fits_in(need.resources, freed):
            for c in chosen:
                _take(allocation, running[c], False)
            continue
        # Drop victims that are not needed, most valuable (last taken) first.
        i = len(chosen)
        while i > 0:
            i -= 1
            t = running[chosen[i]]
            if fits_in(need.resources, saturating_sub(freed, t.resources)):
                freed = saturating_sub(freed, t.resources)
                _take(allocation, t, False)
                del chosen[i]
        for c in chosen:
            taken[c] = True
            t = running[c]
            if t.revocable:
                reason = VictimReason.REVOKED
            elif t.pool == need.pool:
                reason = VictimReason.HIGHER_PRIORITY
            else:
                reason = VictimReason.OVER_ENTITLEMENT
            victims.append(Victim(c, n, reason))
    return victims


class PriorityPreempt(PreemptionPolicy):
    """The priority preemption policy."""

    def select_victims(self, request):
        return select(request)
