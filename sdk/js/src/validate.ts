/**
 * Checks a policy's answer against its request: the rules the host runs on
 * every answer (the Rust SDK's `validate`), in the same order with the same
 * messages, so an author sees the same verdict before building a component.
 *
 * @module
 */

import { gangs } from './placement.ts';
import { fitsIn, saturatingAdd, saturatingSub, ZERO } from './resources.ts';
import { DEVICE_MILLI, gpuShape, gpuTakes, inMilliGpus } from './types.ts';
import type { Action, JobState, JobView, PlacementRequest, PlacementResult, PreemptionRequest, Resources, TaskState, TaskView, Victim } from './types.ts';

/** What is wrong with an answer: `kind` names the rule (the Rust variant in snake_case). */
export class Violation extends Error {
  constructor(
    readonly kind: string,
    message: string,
  ) {
    super(message);
    this.name = 'Violation';
  }
}

const fmt = (r: Resources) =>
  `Resources { cpu_millis: ${r.cpuMillis}, memory_mib: ${r.memoryMib}, disk_mib: ${r.diskMib}, gpus: ${r.gpus}, ports: ${r.ports} }`;

/**
 * Checks a placement answer; throws {@link Violation} at the first rule
 * broken. GPU devices (0.1.2): every assigned task that asks for GPU holds
 * devices of its host that take it (whole devices wholly free, a share
 * within what its device has left, an accepted model), and no other task
 * holds any.
 */
export function checkPlacement(request: PlacementRequest, result: PlacementResult): void {
  const nTasks = request.tasks.length;
  const nHosts = request.hosts.length;
  const seen = new Uint8Array(nTasks); // 0 unseen, 1 assigned, 2 unplaced
  const used: Resources[] = Array.from({ length: nHosts }, () => ZERO);
  for (const a of result.assignments) {
    const t = request.tasks[a.task];
    if (!Number.isInteger(a.task) || t === undefined) throw new Violation('unknown_task', `task index ${a.task} is not in the request`);
    if (!Number.isInteger(a.host) || a.host < 0 || a.host >= nHosts) throw new Violation('unknown_host', `host index ${a.host} is not in the request`);
    if (seen[a.task] !== 0) throw new Violation('task_twice', `task ${a.task} appears more than once in the answer`);
    seen[a.task] = 1;
    used[a.host] = saturatingAdd(used[a.host], t.demand);
    const set = request.constraints[t.constraints];
    if (set && set.eligible.tag === 'only' && !set.eligible.val.includes(a.host)) {
      throw new Violation('ineligible', `task ${a.task} was put on host ${a.host}, which its hard constraints exclude`);
    }
  }
  for (const u of result.unplaced) {
    if (!Number.isInteger(u.task) || u.task < 0 || u.task >= nTasks) throw new Violation('unknown_task', `task index ${u.task} is not in the request`);
    if (seen[u.task] !== 0) throw new Violation('task_twice', `task ${u.task} appears more than once in the answer`);
    seen[u.task] = 2;
  }
  const missing = seen.indexOf(0);
  if (missing >= 0) throw new Violation('task_missing', `task ${missing} is neither assigned nor unplaced`);
  used.forEach((assigned, h) => {
    const free = request.hosts[h].free;
    if (!fitsIn(assigned, free)) throw new Violation('over_capacity', `host ${h} is over capacity: assigned ${fmt(assigned)}, free ${fmt(free)}`);
  });
  checkMaxPerHost(request, result);
  for (const [start, end] of gangs(request.tasks)) {
    for (let i = start; i < end; i++) {
      if (seen[i] !== seen[start]) throw new Violation('partial_gang', `gang ${request.tasks[start].gang} was placed only in part`);
    }
  }
  checkGrants(request, result);
}

/** Each assigned task that asks for GPU has exactly one grant, on devices of its host that take it given the grants before it; no other task has one. */
function checkGrants(request: PlacementRequest, result: PlacementResult): void {
  const bad = (task: number, why: string) => new Violation('bad_grant', `task ${task}'s GPU devices: ${why}`);
  const asks = request.gpuTasks ?? [];
  const grants = result.grants ?? [];
  if (asks.length === 0 && grants.length === 0) return;
  const hostOf: Array<number | undefined> = new Array(request.tasks.length).fill(undefined);
  for (const a of result.assignments) hostOf[a.task] = a.host;
  const gpuHosts = request.gpuHosts ?? [];
  const free = gpuHosts.map((h) => h.devices.map((d) => d.freeMilli));
  const granted = new Array<boolean>(request.tasks.length).fill(false);
  for (const g of grants) {
    if (!Number.isInteger(g.task) || g.task < 0 || g.task >= hostOf.length) throw bad(g.task, 'not a task of the request');
    const host = hostOf[g.task];
    if (host === undefined) throw bad(g.task, 'granted devices but not assigned');
    if (granted[g.task]) throw bad(g.task, 'granted devices twice');
    granted[g.task] = true;
    const ask = asks[g.task];
    if (ask === undefined || ask.milli === 0) throw bad(g.task, 'granted devices but asks for no GPU');
    const [count, each] = gpuShape(ask);
    if (g.devices.length !== count) throw bad(g.task, `asks for ${count} device(s), granted ${g.devices.length}`);
    const devices = gpuHosts[host]?.devices ?? [];
    g.devices.forEach((d, i) => {
      const device = devices[d];
      if (!Number.isInteger(d) || device === undefined) throw bad(g.task, `device ${d} does not exist on host ${host}`);
      if (g.devices.slice(0, i).includes(d)) throw bad(g.task, `device ${d} granted twice`);
      const left = free[host][d];
      if (!gpuTakes(ask, device, left)) {
        let why: string;
        if (ask.models.length > 0 && !ask.models.includes(device.model)) why = `device ${d} of host ${host} is not of a model the task accepts`;
        else if (each === DEVICE_MILLI) why = `whole device ${d} of host ${host} is not wholly free (${left} milli-GPU free)`;
        else why = `device ${d} of host ${host} has ${left} milli-GPU free, the share needs ${each}`;
        throw bad(g.task, why);
      }
      free[host][d] = left - each;
    });
  }
  hostOf.forEach((host, t) => {
    if (host !== undefined && (asks[t]?.milli ?? 0) > 0 && !granted[t]) throw bad(t, 'assigned without GPU devices (none of its host takes it)');
  });
}

function checkMaxPerHost(request: PlacementRequest, result: PlacementResult): void {
  if (request.jobs.every((j) => j.maxPerHost === 0)) return;
  const counts = new Map<string, number>();
  request.jobs.forEach((job, j) => {
    if (job.maxPerHost > 0) for (const hc of job.existing) counts.set(`${j}/${hc.host}`, (counts.get(`${j}/${hc.host}`) ?? 0) + hc.count);
  });
  for (const a of result.assignments) {
    const job = request.tasks[a.task].job;
    const info = request.jobs[job];
    if (!info || info.maxPerHost === 0) continue;
    const c = (counts.get(`${job}/${a.host}`) ?? 0) + 1;
    counts.set(`${job}/${a.host}`, c);
    if (c > info.maxPerHost) throw new Violation('max_per_host', `job ${job} has ${c} tasks on host ${a.host}, above its per-host maximum`);
  }
}

/**
 * Checks a preemption answer: known indices, no victim twice, only preemptible (or revocable) tasks,
 * only from the pools each need allows, and for each need with victims: they cover it, and none of
 * them could be spared. No victims at all is always allowed.
 *
 * GPU is counted in milli-GPUs when the request carries its GPU side (0.1.3, {@link inMilliGpus}): two
 * 500-milli victims cover a need of 1000. To judge an answer of a component that saw whole devices only,
 * pass {@link inWholeGpus}'s view.
 */
export function checkVictims(original: PreemptionRequest, victims: readonly Victim[]): void {
  const request = inMilliGpus(original);
  checkVictimIndices(request, victims);
  request.needs.forEach((need, n) => {
    const mine = victims.filter((v) => v.need === n);
    if (mine.length === 0) return;
    const freed = mine.reduce((acc, v) => saturatingAdd(acc, request.running[v.task].resources), ZERO);
    if (!fitsIn(need.resources, freed)) throw new Violation('not_enough', `the victims of need ${n} do not free what it asks for`);
    for (const v of mine) {
      const without = saturatingSub(freed, request.running[v.task].resources);
      if (fitsIn(need.resources, without)) {
        throw new Violation('not_needed', `victim ${v.task} is not needed: need ${n} is covered without it`);
      }
    }
  });
}

function checkVictimIndices(request: PreemptionRequest, victims: readonly Victim[]): void {
  const seen = new Uint8Array(request.running.length);
  for (const v of victims) {
    const task = request.running[v.task];
    if (!Number.isInteger(v.task) || task === undefined) throw new Violation('unknown_task', `task index ${v.task} is not in the request`);
    const need = request.needs[v.need];
    if (!Number.isInteger(v.need) || need === undefined) throw new Violation('unknown_need', `need index ${v.need} is not in the request`);
    if (seen[v.task]) throw new Violation('task_twice', `task ${v.task} appears more than once in the answer`);
    seen[v.task] = 1;
    if (!task.preemptible && !task.revocable) throw new Violation('not_preemptible', `victim ${v.task} is not preemptible`);
    if (need.fromPools.length > 0 && !need.fromPools.includes(task.pool)) {
      throw new Violation('wrong_pool', `victim ${v.task} is from a pool that need ${v.need} does not allow`);
    }
  }
}

/** A state as the Rust SDK's messages print it (its variant name). */
const stateName = (s: JobState | TaskState): string => s.charAt(0).toUpperCase() + s.slice(1);

/**
 * Checks lifecycle actions against the views they answer, as the host does (the Rust SDK's `check_actions`):
 * once the job has ended, only kills; `launch`, `restart-after` and `update-batch` only below the job's
 * count (for a daemon job, its matching hosts); a restart only of an instance the job has; a kill of any
 * instance the job has or counts; `mark-job` never back to initialized or pending, and succeeded only when
 * every counted instance has succeeded (failed and killed are accepted with live tasks: the runtime stops them).
 */
export function checkActions(job: JobView, tasks: readonly TaskView[], actions: readonly Action[]): void {
  const ended = job.state === 'succeeded' || job.state === 'failed' || job.state === 'killed';
  const count = Math.max(job.instanceCount, job.matchingHosts.length);
  const bound = Math.max(count, tasks.length);
  const known = (i: number) => {
    if (!(i < bound)) throw new Violation('unknown_task', `task index ${i} is not in the request`);
  };
  const counted = (i: number) => {
    if (!(i < count)) throw new Violation('outside_job', `instance ${i} is outside the job's instances`);
  };
  const has = (i: number) => {
    if (!tasks.some((t) => t.instance === i)) throw new Violation('outside_job', `instance ${i} is outside the job's instances`);
  };
  for (const a of actions) {
    if (ended && a.tag !== 'kill') {
      throw new Violation('job_ended', `the job has ended (${stateName(job.state)}); only kills are allowed`);
    }
    if (a.tag === 'kill') known(a.val);
    else if (a.tag === 'launch') counted(a.val);
    else if (a.tag === 'restart-after') {
      counted(a.val.instance);
      has(a.val.instance);
    } else if (a.tag === 'update-batch') a.val.forEach(counted);
    else if (a.tag === 'mark-job') {
      if (a.val === 'initialized' || a.val === 'pending') {
        throw new Violation('illegal_job_state', `the job cannot be marked ${stateName(a.val)} from ${stateName(job.state)}`);
      }
      if (a.val === 'succeeded') checkSuccess(job, tasks);
    }
  }
}

/** Succeeded needs every counted instance succeeded; live instances above the count are being removed. */
function checkSuccess(job: JobView, tasks: readonly TaskView[]): void {
  for (let i = 0; i < job.instanceCount; i++) {
    const state: TaskState = tasks.find((t) => t.instance === i)?.state ?? 'initialized';
    if (state !== 'succeeded') {
      throw new Violation('premature_success', `the job cannot succeed while instance ${i} is ${stateName(state)}`);
    }
  }
}
