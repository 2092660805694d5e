/**
 * `priority-preempt` in TypeScript: the default preemption policy, decision
 * for decision the same as the Rust one in `plugins/priority-preempt`.
 *
 * For each need, in order, candidates are the preemptible (or revocable)
 * running tasks of the pools the need allows; inside the waiting pool only
 * tasks of lower priority than the waiting work (and revocable ones)
 * qualify. They are taken revocable first, then lowest priority, then most
 * recently started. A non-revocable task of another pool is skipped when
 * taking it would bring that pool below its reservation in a kind the need
 * is short of. A candidate is taken only if it frees a kind the need still
 * lacks; once covered, victims that turned out unnecessary are dropped
 * again, most valuable first. A need that cannot be covered takes no victims.
 *
 * GPU counts in milli-GPUs when the request carries its GPU side (world
 * `preemption-gpu`, WIT 0.1.3): two tasks holding half a device each free
 * one device, and a need of half a device is not paid with a whole one.
 */
import { fitsIn, inMilliGpus, isZero, min, saturatingAdd, saturatingSub, ZERO } from '@paceline/plugin-sdk';
import type { Need, PreemptionPolicy, PreemptionRequest, Resources, RunningTask, Victim, VictimReason } from '@paceline/plugin-sdk';

function keepsReservation(request: PreemptionRequest, allocation: Resources[], t: RunningTask, need: Need): boolean {
  if (t.revocable || t.pool === need.pool) return true;
  const pool = request.pools[t.pool];
  const alloc = allocation[t.pool];
  if (pool === undefined || alloc === undefined) return false;
  const after = saturatingSub(alloc, t.resources);
  const r = pool.reservation;
  const held = t.resources;
  const wanted = need.resources;
  const keeps = (h: number, w: number, a: number, reserved: number) => h === 0 || w === 0 || a >= reserved;
  return (
    keeps(held.cpuMillis, wanted.cpuMillis, after.cpuMillis, r.cpuMillis) &&
    keeps(held.memoryMib, wanted.memoryMib, after.memoryMib, r.memoryMib) &&
    keeps(held.diskMib, wanted.diskMib, after.diskMib, r.diskMib) &&
    keeps(held.gpus, wanted.gpus, after.gpus, r.gpus)
  );
}

function take(allocation: Resources[], t: RunningTask, taking: boolean): void {
  const a = allocation[t.pool];
  if (t.revocable || a === undefined) return;
  allocation[t.pool] = taking ? saturatingSub(a, t.resources) : saturatingAdd(a, t.resources);
}

/** Orders candidates: revocable first, then lowest priority, then most recent, then index. */
function compare(running: RunningTask[], a: number, b: number): number {
  const x = running[a];
  const y = running[b];
  if (x.revocable !== y.revocable) return x.revocable ? -1 : 1;
  if (x.priority !== y.priority) return x.priority - y.priority;
  if (x.startedAtMs !== y.startedAtMs) return x.startedAtMs > y.startedAtMs ? -1 : 1;
  return a - b;
}

export function select(original: PreemptionRequest): Victim[] {
  const request = inMilliGpus(original);
  const running = request.running;
  const taken = new Uint8Array(running.length);
  const allocation = request.pools.map((p) => p.allocation);
  const victims: Victim[] = [];
  request.needs.forEach((need, n) => {
    const candidates: number[] = [];
    running.forEach((t, i) => {
      if (
        !taken[i] &&
        (t.preemptible || t.revocable) &&
        (need.fromPools.length === 0 || need.fromPools.includes(t.pool)) &&
        (t.pool !== need.pool || t.priority < need.priority || t.revocable)
      ) {
        candidates.push(i);
      }
    });
    candidates.sort((a, b) => compare(running, a, b));

    const chosen: number[] = [];
    let freed = ZERO;
    for (const c of candidates) {
      if (fitsIn(need.resources, freed)) break;
      const t = running[c];
      if (isZero(min(t.resources, saturatingSub(need.resources, freed)))) continue;
      if (!keepsReservation(request, allocation, t, need)) continue;
      take(allocation, t, true);
      freed = saturatingAdd(freed, t.resources);
      chosen.push(c);
    }
    if (!fitsIn(need.resources, freed)) {
      for (const c of chosen) take(allocation, running[c], false);
      return;
    }
    // Drop victims that are not needed, most valuable (last taken) first.
    for (let i = chosen.length - 1; i >= 0; i--) {
      const t = running[chosen[i]];
      if (fitsIn(need.resources, saturatingSub(freed, t.resources))) {
        freed = saturatingSub(freed, t.resources);
        take(allocation, t, false);
        chosen.splice(i, 1);
      }
    }
    for (const c of chosen) {
      taken[c] = 1;
      const t = running[c];
      const reason: VictimReason = t.revocable ? 'revoked' : t.pool === need.pool ? 'higher-priority' : 'over-entitlement';
      victims.push({ task: c, need: n, reason });
    }
  });
  return victims;
}

/** The priority preemption policy. */
export const priorityPreempt: PreemptionPolicy = { selectVictims: select };
