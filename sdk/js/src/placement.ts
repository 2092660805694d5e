/**
 * Helpers for placement policies: a working copy of free capacity, per-job
 * host counts, eligibility, preferences and gang bookkeeping, and GPU
 * devices (0.1.2: milli-GPUs free per device, the runtime's default
 * devices, device grants). The same
 * helpers as the Rust SDK's `placement` module, with the same tie-breaking,
 * so a policy ported with them decides the same.
 *
 * @module
 */

import { fitsIn, saturatingAdd, saturatingSub, ScoreScale } from './resources.ts';
import { DEVICE_MILLI, gpuShape, gpuTakes, NO_VALUE } from './types.ts';
import type { Assignment, DeviceGrant, GpuTask, HostFilter, PlacementRequest, PlacementResult, Resources, Task, Unplaced, UnplacedReason } from './types.ts';

/** The ask of a task that asks for no GPU (and of every task of a round without a GPU side). */
export const NO_GPU: GpuTask = Object.freeze({ milli: 0, models: new Uint32Array(0) }) as GpuTask;

/** A sort key for {@link Round.pickMinByKey}: a number, a bigint, or a tuple of them compared in order. */
export type Key = number | bigint | ReadonlyArray<number | bigint>;

/** `a < b` for keys: numbers and bigints exactly, tuples lexicographically. */
export function keyLess(a: Key, b: Key): boolean {
  if (typeof a !== 'object' || typeof b !== 'object') return (a as number) < (b as number);
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    if (a[i] < b[i]) return true;
    if (a[i] > b[i]) return false;
  }
  return a.length < b.length;
}

const ALL: HostFilter = Object.freeze({ tag: 'all' });

/**
 * Mutable state of one placement round: what is still free on each host,
 * how many tasks of each job each host holds, and the answer being built.
 *
 * `new Round(request)` counts tasks per (job, host) only for jobs with a
 * per-host maximum or a spread attribute; `new Round(request, true)` counts
 * them for every job.
 */
export class Round {
  /** Free capacity per host, updated as tasks are assigned. */
  readonly free: Resources[];
  /** Fullness weights per host. */
  readonly scales: ScoreScale[];
  private readonly tracked: boolean[];
  private readonly counts = new Map<number, Map<number, number>>();
  private readonly journalEntries: number[] = [];
  private readonly assignments: Assignment[] = [];
  private readonly unplaced: Unplaced[] = [];
  private readonly grants: DeviceGrant[] = [];
  /** Milli-GPUs free per device, per host (empty when the round has no GPU side), updated as tasks are assigned. */
  readonly gpuFree: number[][];

  constructor(
    /** The request being answered. */
    readonly request: PlacementRequest,
    everyJob = false,
  ) {
    this.free = request.hosts.map((h) => ({ ...h.free }));
    this.scales = request.hosts.map((h) => ScoreScale.forTotal(h.total));
    this.tracked = request.jobs.map((j) => everyJob || j.maxPerHost > 0 || j.spreadOver !== undefined);
    request.jobs.forEach((job, j) => {
      if (this.tracked[j]) for (const hc of job.existing) this.bump(j, hc.host, hc.count);
    });
    this.gpuFree = (request.gpuHosts ?? []).map((h) => h.devices.map((d) => d.freeMilli));
  }

  /** Task `task`'s GPU ask (none when the round carries no GPU side). */
  gpuTask(task: number): GpuTask {
    return this.request.gpuTasks?.[task] ?? NO_GPU;
  }

  /** Whether task `task` fits on `host`: its demand within the host's free capacity and, when it asks for GPU, devices that take it. */
  fits(task: number, host: number): boolean {
    const free = this.free[host];
    const t = this.request.tasks[task];
    return free !== undefined && t !== undefined && fitsIn(t.demand, free) && this.gpuFits(task, host);
  }

  /** Whether `host` has devices for task `task`'s GPU ask (true for a task that asks for none). */
  gpuFits(task: number, host: number): boolean {
    const ask = this.gpuTask(task);
    const [count] = gpuShape(ask);
    if (count === 0) return true;
    const devices = this.request.gpuHosts?.[host]?.devices;
    const free = this.gpuFree[host];
    if (!devices || !free) return false;
    let found = 0;
    for (let i = 0; i < devices.length && i < free.length; i++) {
      if (gpuTakes(ask, devices[i], free[i]) && ++found === count) return true;
    }
    return false;
  }

  /**
   * The devices the runtime's default would give task `task` on `host`:
   * whole devices from the lowest wholly free ones, a share on the device it
   * fills best (least free that takes it, lowest index on ties). `undefined`
   * when the host has none that take it.
   */
  defaultDevices(task: number, host: number): number[] | undefined {
    const ask = this.gpuTask(task);
    const [count, each] = gpuShape(ask);
    if (count === 0) return [];
    const devices = this.request.gpuHosts?.[host]?.devices;
    const free = this.gpuFree[host];
    if (!devices || !free) return undefined;
    const fitting: number[] = [];
    for (let i = 0; i < devices.length && i < free.length; i++) if (gpuTakes(ask, devices[i], free[i])) fitting.push(i);
    if (each === DEVICE_MILLI) return fitting.length >= count ? fitting.slice(0, count) : undefined;
    let best = -1;
    for (const i of fitting) if (best < 0 || free[i] < free[best]) best = i;
    return best < 0 ? undefined : [best];
  }

  private bump(job: number, host: number, by: number): void {
    let m = this.counts.get(job);
    if (!m) this.counts.set(job, (m = new Map()));
    m.set(host, (m.get(host) ?? 0) + by);
  }

  /** `[host, count]` for every host holding tasks of `job` (tracked jobs only), ascending by host. */
  jobHosts(job: number): Array<[number, number]> {
    const m = this.counts.get(job);
    if (!m) return [];
    return [...m.entries()].filter(([, c]) => c > 0).sort((a, b) => a[0] - b[0]);
  }

  /** Tasks of `job` on `host`, counting this round's assignments. */
  jobCount(job: number, host: number): number {
    return this.counts.get(job)?.get(host) ?? 0;
  }

  /** The job has a per-host maximum that `host` has reached. */
  atMaxPerHost(job: number, host: number): boolean {
    const j = this.request.jobs[job];
    return j !== undefined && j.maxPerHost > 0 && this.jobCount(job, host) >= j.maxPerHost;
  }

  /**
   * Records `task` (an index into the request) on `host` and takes its
   * demand; a GPU ask gets {@link defaultDevices} (none when no device takes
   * it: the runtime then refuses the answer).
   */
  assign(task: number, host: number): void {
    this.assignWithDevices(task, host, this.defaultDevices(task, host) ?? []);
  }

  /** {@link assign} with the policy's own choice of devices (indices into the host's devices; empty for a task that asks for no GPU). */
  assignWithDevices(task: number, host: number, devices: ArrayLike<number>): void {
    const t = this.request.tasks[task];
    if (devices.length > 0) {
      const [, each] = gpuShape(this.gpuTask(task));
      const free = this.gpuFree[host];
      if (free) {
        for (let i = 0; i < devices.length; i++) {
          const d = devices[i];
          if (d < free.length) free[d] = Math.max(free[d] - each, 0);
        }
        // Whole free devices, as the host offer counts them.
        const left = saturatingSub(this.free[host], t.demand);
        left.gpus = free.filter((f) => f === DEVICE_MILLI).length;
        this.free[host] = left;
      }
      this.grants.push({ task, devices: Uint32Array.from(devices) });
    } else {
      this.free[host] = saturatingSub(this.free[host], t.demand);
    }
    if (this.tracked[t.job]) this.bump(t.job, host, 1);
    this.journalEntries.push(host);
    this.assignments.push({ task, host });
  }

  /** Marks `task` unplaced. */
  leave(task: number, reason: UnplacedReason, detail = ''): void {
    this.unplaced.push({ task, reason, detail });
  }

  /** Number of assignments made so far; pass it to {@link undoSince}. */
  checkpoint(): number {
    return this.assignments.length;
  }

  /** Undoes every assignment since `checkpoint` (a gang that failed), giving their resources back. Returns the tasks undone. */
  undoSince(checkpoint: number): number[] {
    const undone = this.assignments.splice(checkpoint);
    const tasks: number[] = [];
    for (const a of undone) {
      const t = this.request.tasks[a.task];
      this.free[a.host] = saturatingAdd(this.free[a.host], t.demand);
      let g = -1;
      for (let i = this.grants.length - 1; i >= 0; i--) {
        if (this.grants[i].task === a.task) {
          g = i;
          break;
        }
      }
      if (g >= 0) {
        // Rust's swap_remove: the grants' order is part of an answer compared with the Rust policy's.
        const grant = this.grants[g];
        this.grants[g] = this.grants[this.grants.length - 1];
        this.grants.pop();
        const [, each] = gpuShape(this.gpuTask(a.task));
        const free = this.gpuFree[a.host];
        if (free) {
          for (const d of grant.devices) if (d < free.length) free[d] = Math.min(free[d] + each, DEVICE_MILLI);
          this.free[a.host].gpus = free.filter((f) => f === DEVICE_MILLI).length;
        }
      }
      this.journalEntries.push(a.host);
      if (this.tracked[t.job]) {
        const m = this.counts.get(t.job);
        const c = m?.get(a.host);
        if (m && c !== undefined) m.set(a.host, Math.max(c - 1, 0));
      }
      tasks.push(a.task);
    }
    return tasks;
  }

  /** Every host whose free capacity changed (by an assignment or an undo), in order. */
  journal(): readonly number[] {
    return this.journalEntries;
  }

  /** The hosts `task` may use after its hard constraints. */
  eligible(task: Task): HostFilter {
    return this.request.constraints[task.constraints]?.eligible ?? ALL;
  }

  /** Sum of the weights of `task`'s soft preferences that `host` matches. */
  preferenceScore(task: Task, host: number): number {
    const set = this.request.constraints[task.constraints];
    if (!set) return 0;
    let s = 0;
    for (const p of set.preferences) if (this.attribute(p.attribute, host) === p.value) s += p.weight;
    return s;
  }

  /** The value (a symbol index) of attribute column `column` on `host`, or `undefined`. */
  attribute(column: number, host: number): number | undefined {
    const v = this.request.attributes[column]?.values[host];
    return v === undefined || v === NO_VALUE ? undefined : v;
  }

  /**
   * The eligible host where task `t` fits and its job is below its per-host
   * maximum with the smallest `key(host)`; ties go to the lowest index (the
   * first seen). Without one, the reason.
   */
  pickMinByKey(t: number, key: (host: number) => Key): number | UnplacedReason {
    const task = this.request.tasks[t];
    const e = this.eligible(task);
    let hosts: ArrayLike<number> | null = null;
    if (e.tag === 'only') {
      if (e.val.length === 0) return 'constraints-unsatisfiable';
      hosts = e.val;
    }
    const n = hosts ? hosts.length : this.free.length;
    let best = -1;
    let bestKey: Key = 0;
    let blockedByMax = false;
    const gpu = this.gpuTask(t).milli > 0;
    for (let i = 0; i < n; i++) {
      const h = hosts ? hosts[i] : i;
      const free = this.free[h];
      if (free === undefined || !fitsIn(task.demand, free) || (gpu && !this.gpuFits(t, h))) continue;
      if (this.atMaxPerHost(task.job, h)) {
        blockedByMax = true;
        continue;
      }
      const k = key(h);
      if (best < 0 || keyLess(k, bestKey)) {
        best = h;
        bestKey = k;
      }
    }
    if (best >= 0) return best;
    return blockedByMax ? 'max-per-host' : 'insufficient-resources';
  }

  /** Finishes the round. */
  finish(): PlacementResult {
    return this.grants.length > 0 ? { assignments: this.assignments, unplaced: this.unplaced, grants: this.grants } : { assignments: this.assignments, unplaced: this.unplaced };
  }
}

/**
 * Gives every assigned task that asks for GPU and holds no grant the
 * runtime's default devices ({@link Round.defaultDevices}, after the grants
 * the answer already makes, in assignment order), in place. The runtime
 * does this to every answer before checking it; a task no device of its
 * host takes keeps no grant, and the check refuses the answer.
 */
export function completeGrants(request: PlacementRequest, result: PlacementResult): void {
  if ((request.gpuTasks ?? []).every((t) => t.milli === 0)) return;
  const round = new Round(request);
  const granted = new Array<boolean>(request.tasks.length).fill(false);
  const explicit = result.grants ?? [];
  const hostOf = new Map(result.assignments.map((a) => [a.task, a.host]));
  for (const g of explicit) {
    const host = hostOf.get(g.task);
    if (host !== undefined && g.task < granted.length) {
      granted[g.task] = true;
      round.assignWithDevices(g.task, host, g.devices);
    }
  }
  const grants = [...explicit];
  for (const a of result.assignments) {
    if ((granted[a.task] ?? true) || round.gpuTask(a.task).milli === 0) continue;
    const devices = round.defaultDevices(a.task, a.host);
    if (devices !== undefined) {
      round.assignWithDevices(a.task, a.host, devices);
      grants.push({ task: a.task, devices: Uint32Array.from(devices) });
    }
  }
  result.grants = grants;
}

/** Splits tasks into gangs: runs of consecutive tasks with the same gang id, as `[start, end)` index pairs. */
export function gangs(tasks: readonly Task[]): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  let start = 0;
  while (start < tasks.length) {
    const gang = tasks[start].gang;
    let end = start + 1;
    while (end < tasks.length && tasks[end].gang === gang) end++;
    out.push([start, end]);
    start = end;
  }
  return out;
}

/**
 * Places each gang with `choose`, all or nothing. `choose(round, t)` returns
 * a host index or the reason it found none; then the gang's earlier
 * assignments are undone, that task is left with the reason and its
 * gang-mates with `'gang-incomplete'`.
 */
export function placeGangs(round: Round, choose: (round: Round, task: number) => number | UnplacedReason): PlacementResult {
  return placeGangsOnDevices(round, (r, t) => {
    const host = choose(r, t);
    return typeof host === 'string' ? host : [host, undefined];
  });
}

/**
 * {@link placeGangs} for a policy that chooses GPU devices too: `choose`
 * returns `[host, devices]`, `devices` the indices into the host's devices
 * for a GPU ask or `undefined` for the runtime's default, or the reason it
 * found no host.
 */
export function placeGangsOnDevices(
  round: Round,
  choose: (round: Round, task: number) => [number, number[] | undefined] | UnplacedReason,
): PlacementResult {
  for (const [start, end] of gangs(round.request.tasks)) {
    const checkpoint = round.checkpoint();
    let culprit = -1;
    let reason: UnplacedReason = 'deferred';
    for (let t = start; t < end; t++) {
      const chosen = choose(round, t);
      if (typeof chosen === 'string') {
        culprit = t;
        reason = chosen;
        break;
      }
      const [host, devices] = chosen;
      if (devices === undefined) round.assign(t, host);
      else round.assignWithDevices(t, host, devices);
    }
    if (culprit >= 0) {
      round.undoSince(checkpoint);
      for (let t = start; t < end; t++) {
        if (t === culprit) round.leave(t, reason, '');
        else round.leave(t, 'gang-incomplete', `task ${culprit} of the gang could not be placed`);
      }
    }
  }
  return round.finish();
}
