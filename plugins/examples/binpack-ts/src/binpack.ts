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
 *
 * The fast path does not scan every host per task: a `BestFitIndex` keeps
 * the hosts of each weight class (hosts of the same totals) sorted by their
 * score before the demand, and walks each class to its first host that
 * fits. The interpreted engine under Wasm pays about a microsecond per
 * (task, host) pair for the scan (0.6 s for 1,000 tasks on 500 hosts,
 * against the 2 s call deadline). It answers what the scan answers (a test
 * checks both on random rounds).
 */
import { placeGangs, Round, saturatingSub } from '@paceline/plugin-sdk';
import type { PlacementPolicy, PlacementRequest, PlacementResult, Task, UnplacedReason } from '@paceline/plugin-sdk';

const U32_MAX = 0xffff_ffff;
const clamp32 = (v: number) => (v <= U32_MAX ? v : U32_MAX);
const weight = (total: number) => (total === 0 ? 0 : clamp32(Math.floor(2147483648 / total)));
/** Products above this are summed as bigints, so scores stay exact. */
const EXACT = 2 ** 50;

/** Rounds of fewer hosts are scanned (see `bestFitIndexed`). */
export const INDEX_FROM_HOSTS = 64;

/** Free capacity of every host in flat typed arrays, kept in step with the round through its journal. */
export class Compact {
  readonly cpu: Float64Array;
  readonly memory: Float64Array;
  readonly disk: Float64Array;
  readonly gpu: Float64Array;
  readonly scale: Float64Array; // 4 per host: cpu, memory, disk, gpus
  /** 1 where a score term may exceed 2^50 (free far above total): that host is scored with bigints. */
  readonly big: Uint8Array;
  /** Every host whose capacity changed, in order (the round's journal as seen so far). */
  readonly changed: number[] = [];
  /** The least cpu, memory and disk any task of the round asks for: a host below one of them takes no task. */
  readonly least: [number, number, number] = [Infinity, Infinity, Infinity];
  /** The best-fit index: built on first use; `null` where the scan is used instead. */
  index: BestFitIndex | null | undefined = undefined;
  private seen = 0;

  constructor(request: PlacementRequest) {
    const n = request.hosts.length;
    this.cpu = new Float64Array(n);
    this.memory = new Float64Array(n);
    this.disk = new Float64Array(n);
    this.gpu = new Float64Array(n);
    this.scale = new Float64Array(4 * n);
    this.big = new Uint8Array(n);
    for (const t of request.tasks) {
      this.least[0] = Math.min(this.least[0], t.demand.cpuMillis);
      this.least[1] = Math.min(this.least[1], t.demand.memoryMib);
      this.least[2] = Math.min(this.least[2], t.demand.diskMib);
    }
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
      this.changed.push(h);
    }
    this.seen = journal.length;
  }
}

/** Host `h`'s score for a demand, exact (a bigint where a number could round); `undefined` when the demand does not fit. */
function scoreOf(c: Compact, h: number, dc: number, dm: number, dd: number): number | bigint | undefined {
  const f0 = c.cpu[h];
  const f1 = c.memory[h];
  const f2 = c.disk[h];
  if (f0 < dc || f1 < dm || f2 < dd) return undefined;
  const { scale } = c;
  const j = 4 * h;
  if (c.big[h] === 0) {
    return (f0 - dc) * scale[j] + (f1 - dm) * scale[j + 1] + (f2 - dd) * scale[j + 2] + c.gpu[h] * scale[j + 3];
  }
  const b = BigInt;
  return b(f0 - dc) * b(scale[j]) + b(f1 - dm) * b(scale[j + 1]) + b(f2 - dd) * b(scale[j + 2]) + b(c.gpu[h]) * b(scale[j + 3]);
}

/** Best fit over every host for a task that needs no GPU and no port; ties go to the lowest index; -1 when nothing fits. */
export function bestFitAll(c: Compact, dc: number, dm: number, dd: number): number {
  let bestScore: number | bigint = 18446744073709551615n;
  let best = -1;
  const n = c.cpu.length;
  for (let h = 0; h < n; h++) {
    const score = scoreOf(c, h, dc, dm, dd);
    if (score !== undefined && score < bestScore) {
      bestScore = score;
      best = h;
    }
  }
  return best;
}

/**
 * `bestFitAll` without a scan of every host per task. A host's score for a
 * demand is its base (its score for an empty demand) less the demand's share
 * (dc*s0 + dm*s1 + dd*s2), and hosts of the same totals share their weights,
 * so within one weight class the order of scores is the order of bases,
 * whatever the demand. The index keeps each class's hosts sorted by (base,
 * index) and takes, per class, the first host the demand fits; the best of
 * those (score, then index) is the scan's answer. Hosts the round changed
 * are moved when the index next answers. Built only when every score is an
 * exact number (no host's `big` flag; free capacity only falls back to what
 * was offered, so none becomes big later).
 */
export class BestFitIndex {
  /**
   * Per class: its weights, and the first `len` entries of its hosts' bases
   * and indices, sorted by (base, index). A host that fits no task of the
   * round (below the least demand) is left out, so the full hosts binpack
   * leaves at the front of a class are not walked past by every later task;
   * it comes back if an undo gives it room again.
   */
  private readonly classes: { s0: number; s1: number; s2: number; bases: Float64Array; hosts: Int32Array; len: number }[] = [];
  private readonly classOf: Int32Array;
  private readonly base: Float64Array;
  private readonly listed: Uint8Array;
  private seen: number;

  constructor(c: Compact) {
    const n = c.cpu.length;
    this.classOf = new Int32Array(n);
    this.base = new Float64Array(n);
    this.listed = new Uint8Array(n);
    const byWeights = new Map<string, number>();
    const members: number[][] = [];
    for (let h = 0; h < n; h++) {
      const j = 4 * h;
      const key = `${c.scale[j]},${c.scale[j + 1]},${c.scale[j + 2]}`;
      let k = byWeights.get(key);
      if (k === undefined) {
        k = this.classes.length;
        byWeights.set(key, k);
        this.classes.push({ s0: c.scale[j], s1: c.scale[j + 1], s2: c.scale[j + 2], bases: new Float64Array(0), hosts: new Int32Array(0), len: 0 });
        members.push([]);
      }
      this.classOf[h] = k;
      this.base[h] = this.baseOf(c, h);
      members[k].push(h);
    }
    members.forEach((hs, k) => {
      const cl = this.classes[k];
      cl.bases = new Float64Array(hs.length);
      cl.hosts = new Int32Array(hs.length);
      const listed = hs.filter((h) => this.takesATask(c, h));
      listed.sort((a, b) => this.base[a] - this.base[b] || a - b);
      listed.forEach((h, i) => {
        cl.hosts[i] = h;
        cl.bases[i] = this.base[h];
        this.listed[h] = 1;
      });
      cl.len = listed.length;
    });
    this.seen = c.changed.length;
  }

  private baseOf(c: Compact, h: number): number {
    const j = 4 * h;
    return c.cpu[h] * c.scale[j] + c.memory[h] * c.scale[j + 1] + c.disk[h] * c.scale[j + 2] + c.gpu[h] * c.scale[j + 3];
  }

  private takesATask(c: Compact, h: number): boolean {
    return c.cpu[h] >= c.least[0] && c.memory[h] >= c.least[1] && c.disk[h] >= c.least[2];
  }

  /** Where (base, h) is or goes among a class's listed entries. */
  private static position(cl: { bases: Float64Array; hosts: Int32Array; len: number }, b: number, h: number): number {
    let lo = 0;
    let hi = cl.len;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cl.bases[mid] < b || (cl.bases[mid] === b && cl.hosts[mid] < h)) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** The host `bestFitAll(c, dc, dm, dd)` picks, or -1. Sync `c` first; the demand must be one of the round's tasks'. */
  best(c: Compact, dc: number, dm: number, dd: number): number {
    for (let k = this.seen; k < c.changed.length; k++) {
      const h = c.changed[k];
      const cl = this.classes[this.classOf[h]];
      // Out of its place (copyWithin: a native move, cheap even where the
      // engine interprets), then in at its new one if it still takes a task.
      if (this.listed[h] === 1) {
        const at = BestFitIndex.position(cl, this.base[h], h);
        cl.bases.copyWithin(at, at + 1, cl.len);
        cl.hosts.copyWithin(at, at + 1, cl.len);
        cl.len -= 1;
        this.listed[h] = 0;
      }
      const b = this.baseOf(c, h);
      this.base[h] = b;
      if (this.takesATask(c, h)) {
        const to = BestFitIndex.position(cl, b, h);
        cl.bases.copyWithin(to + 1, to, cl.len);
        cl.hosts.copyWithin(to + 1, to, cl.len);
        cl.bases[to] = b;
        cl.hosts[to] = h;
        cl.len += 1;
        this.listed[h] = 1;
      }
    }
    this.seen = c.changed.length;
    const { cpu, memory, disk } = c;
    let best = -1;
    let bestScore = 0;
    for (const cl of this.classes) {
      const { bases, hosts, len } = cl;
      for (let i = 0; i < len; i++) {
        const h = hosts[i];
        if (cpu[h] < dc || memory[h] < dm || disk[h] < dd) continue;
        const score = bases[i] - (dc * cl.s0 + dm * cl.s1 + dd * cl.s2);
        if (best < 0 || score < bestScore || (score === bestScore && h < best)) {
          best = h;
          bestScore = score;
        }
        break;
      }
    }
    return best;
  }
}

/** `bestFitAll(c, dc, dm, dd)`, from the round's index (built on first use; the scan on fewer than `INDEX_FROM_HOSTS` hosts or where a score may not be an exact number). Sync `c` first. */
export function bestFitIndexed(c: Compact, dc: number, dm: number, dd: number): number {
  // On a few hosts the scan is cheaper than building the index.
  if (c.index === undefined) c.index = c.big.includes(1) || c.cpu.length < INDEX_FROM_HOSTS ? null : new BestFitIndex(c);
  return c.index === null ? bestFitAll(c, dc, dm, dd) : c.index.best(c, dc, dm, dd);
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
    const h = bestFitIndexed(compact, demand.cpuMillis, demand.memoryMib, demand.diskMib);
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
