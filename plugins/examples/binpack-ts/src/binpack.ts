/**
 * `binpack` in TypeScript: best-fit placement, decision for decision the
 * same as the Rust policy in `plugins/binpack` (tests assert it, natively
 * here and through the real host runtime in
 * `host/plugin/tests/all/languages.rs`).
 *
 * Each task goes to the eligible host whose free capacity, after taking the
 * task, is smallest (cpu, memory, disk and GPUs, each as a fraction of the
 * host's total). Gangs are placed whole or not at all. A task's preferred
 * host wins when it fits; soft preferences outweigh fullness. Like the Rust
 * policy it has two paths that score slightly differently, and the port
 * keeps both: a task with no constraint, preference, per-host limit, GPU or
 * port goes through `bestFitAll` (32-bit free capacity, weights
 * floor(2^31 / total), the host's free GPUs counted in its score); every
 * other task through `Round.pickMinByKey` with the SDK's `ScoreScale`.
 */
import { placeGangs, Round, saturatingSub } from '@paceline/plugin-sdk';
import type { PlacementPolicy, PlacementRequest, PlacementResult, Task, UnplacedReason } from '@paceline/plugin-sdk';

const U32_MAX = 0xffff_ffff;
const clamp32 = (v: number) => (v <= U32_MAX ? v : U32_MAX);
const weight = (total: number) => (total === 0 ? 0 : clamp32(Math.floor(2147483648 / total)));
/** Products above this are summed as bigints, so scores stay exact. */
const EXACT = 2 ** 50;

/** Free capacity of every host in flat typed arrays, kept in step with the round through its journal. */
export class Compact {
  readonly cpu: Float64Array;
  readonly memory: Float64Array;
  readonly disk: Float64Array;
  readonly gpu: Float64Array;
  readonly scale: Float64Array; // 4 per host: cpu, memory, disk, gpus
  /** 1 where a score term may exceed 2^50 (free far above total): that host is scored with bigints. */
  readonly big: Uint8Array;
  private seen = 0;

  constructor(request: PlacementRequest) {
    const n = request.hosts.length;
    this.cpu = new Float64Array(n);
    this.memory = new Float64Array(n);
    this.disk = new Float64Array(n);
    this.gpu = new Float64Array(n);
    this.scale = new Float64Array(4 * n);
    this.big = new Uint8Array(n);
    request.hosts.forEach((h, i) => {
      this.scale[4 * i] = weight(h.total.cpuMillis);
      this.scale[4 * i + 1] = weight(h.total.memoryMib);
      this.scale[4 * i + 2] = weight(h.total.diskMib);
      this.scale[4 * i + 3] = weight(h.total.gpus);
      this.set(i, h.free.cpuMillis, h.free.memoryMib, h.free.diskMib, h.free.gpus);
    });
  }

  private set(i: number, cpu: number, memory: number, disk: number, gpus: number): void {
    this.cpu[i] = clamp32(cpu);
    this.memory[i] = clamp32(memory);
    this.disk[i] = clamp32(disk);
    this.gpu[i] = clamp32(gpus);
    const s = this.scale;
    this.big[i] =
      this.cpu[i] * s[4 * i] > EXACT || this.memory[i] * s[4 * i + 1] > EXACT || this.disk[i] * s[4 * i + 2] > EXACT || this.gpu[i] * s[4 * i + 3] > EXACT ? 1 : 0;
  }

  /** Applies the round's changes made since the last sync. */
  sync(round: Round): void {
    const journal = round.journal();
    for (let k = this.seen; k < journal.length; k++) {
      const h = journal[k];
      const f = round.free[h];
      this.set(h, f.cpuMillis, f.memoryMib, f.diskMib, f.gpus);
    }
    this.seen = journal.length;
  }
}

/** Best fit over every host for a task that needs no GPU and no port; ties go to the lowest index; -1 when nothing fits. */
export function bestFitAll(c: Compact, dc: number, dm: number, dd: number): number {
  let bestScore: number | bigint = 18446744073709551615n;
  let best = -1;
  const { cpu, memory, disk, gpu, scale, big } = c;
  const n = cpu.length;
  for (let h = 0; h < n; h++) {
    const f0 = cpu[h];
    const f1 = memory[h];
    const f2 = disk[h];
    if (f0 < dc || f1 < dm || f2 < dd) continue;
    const j = 4 * h;
    let score: number | bigint;
    if (big[h] === 0) {
      score = (f0 - dc) * scale[j] + (f1 - dm) * scale[j + 1] + (f2 - dd) * scale[j + 2] + gpu[h] * scale[j + 3];
    } else {
      const b = BigInt;
      score = b(f0 - dc) * b(scale[j]) + b(f1 - dm) * b(scale[j + 1]) + b(f2 - dd) * b(scale[j + 2]) + b(gpu[h]) * b(scale[j + 3]);
    }
    if (score < bestScore) {
      bestScore = score;
      best = h;
    }
  }
  return best;
}

function eligibleHost(round: Round, task: Task, host: number): boolean {
  const e = round.eligible(task);
  return e.tag === 'all' || e.val.includes(host);
}

/** The best-fit host for task `t`, or the reason there is none. */
export function bestFit(round: Round, compact: Compact, t: number): number | UnplacedReason {
  const request = round.request;
  const task = request.tasks[t];
  const demand = task.demand;
  const gpu = round.gpuTask(t).milli;
  const p = task.preferredHost;
  if (p !== undefined && round.fits(t, p) && !round.atMaxPerHost(task.job, p) && eligibleHost(round, task, p)) return p;
  const limited = (request.jobs[task.job]?.maxPerHost ?? 0) > 0;
  const hasPreferences = (request.constraints[task.constraints]?.preferences.length ?? 0) > 0;
  const fast =
    round.eligible(task).tag === 'all' &&
    !limited &&
    !hasPreferences &&
    demand.gpus === 0 &&
    gpu === 0 &&
    demand.ports === 0 &&
    demand.cpuMillis <= U32_MAX &&
    demand.memoryMib <= U32_MAX &&
    demand.diskMib <= U32_MAX;
  if (fast) {
    const h = bestFitAll(compact, demand.cpuMillis, demand.memoryMib, demand.diskMib);
    return h >= 0 ? h : 'insufficient-resources';
  }
  // For a GPU ask, then the host with the fewest milli-GPUs left (shares
  // pack onto started devices), as the Rust policy.
  const gpuLeft = (h: number) => (gpu > 0 ? (round.gpuFree[h] ?? []).reduce((a, f) => a + f, 0) : 0);
  return round.pickMinByKey(t, (h) => [-round.preferenceScore(task, h), round.scales[h].score(saturatingSub(round.free[h], demand)), gpuLeft(h)]);
}

/** The best-fit policy. */
export const binpack: PlacementPolicy = {
  place(request: PlacementRequest): PlacementResult {
    const compact = new Compact(request);
    return placeGangs(new Round(request), (round, t) => {
      compact.sync(round);
      return bestFit(round, compact, t);
    });
  },
};
