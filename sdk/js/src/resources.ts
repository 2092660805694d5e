/**
 * Saturating resource arithmetic and integer scoring: the Rust SDK's
 * `Resources` and `ScoreScale`, with the same results. Scores that a double
 * cannot hold exactly are computed with `bigint` (mixed `<` comparisons of
 * `number` and `bigint` are exact in JavaScript), so tie-breaking matches.
 *
 * @module
 */

import type { Resources } from './types.ts';

/** Nothing of anything. */
export const ZERO: Resources = Object.freeze({ cpuMillis: 0, memoryMib: 0, diskMib: 0, gpus: 0, ports: 0 });

/** A resource vector; omitted kinds are zero. */
export function resources(r: Partial<Resources> = {}): Resources {
  return { cpuMillis: r.cpuMillis ?? 0, memoryMib: r.memoryMib ?? 0, diskMib: r.diskMib ?? 0, gpus: r.gpus ?? 0, ports: r.ports ?? 0 };
}

/** `need` fits within `available` in every kind. */
export function fitsIn(need: Resources, available: Resources): boolean {
  return (
    need.cpuMillis <= available.cpuMillis &&
    need.memoryMib <= available.memoryMib &&
    need.diskMib <= available.diskMib &&
    need.gpus <= available.gpus &&
    need.ports <= available.ports
  );
}

/** Every kind is zero. */
export function isZero(r: Resources): boolean {
  return r.cpuMillis === 0 && r.memoryMib === 0 && r.diskMib === 0 && r.gpus === 0 && r.ports === 0;
}

/** Kind-wise sum. */
export function saturatingAdd(a: Resources, b: Resources): Resources {
  return {
    cpuMillis: a.cpuMillis + b.cpuMillis,
    memoryMib: a.memoryMib + b.memoryMib,
    diskMib: a.diskMib + b.diskMib,
    gpus: a.gpus + b.gpus,
    ports: a.ports + b.ports,
  };
}

/** Kind-wise difference, saturating at zero. */
export function saturatingSub(a: Resources, b: Resources): Resources {
  return {
    cpuMillis: a.cpuMillis > b.cpuMillis ? a.cpuMillis - b.cpuMillis : 0,
    memoryMib: a.memoryMib > b.memoryMib ? a.memoryMib - b.memoryMib : 0,
    diskMib: a.diskMib > b.diskMib ? a.diskMib - b.diskMib : 0,
    gpus: a.gpus > b.gpus ? a.gpus - b.gpus : 0,
    ports: a.ports > b.ports ? a.ports - b.ports : 0,
  };
}

/** Kind-wise minimum. */
export function min(a: Resources, b: Resources): Resources {
  return {
    cpuMillis: Math.min(a.cpuMillis, b.cpuMillis),
    memoryMib: Math.min(a.memoryMib, b.memoryMib),
    diskMib: Math.min(a.diskMib, b.diskMib),
    gpus: Math.min(a.gpus, b.gpus),
    ports: Math.min(a.ports, b.ports),
  };
}

/** Kind-wise multiplication by a count. */
export function times(r: Resources, n: number): Resources {
  return { cpuMillis: r.cpuMillis * n, memoryMib: r.memoryMib * n, diskMib: r.diskMib * n, gpus: r.gpus * n, ports: r.ports * n };
}

const U64_MAX = 0xffff_ffff_ffff_ffffn;

/** How many copies of `need` fit in `available` (`Infinity` if `need` is zero). */
export function copiesIn(need: Resources, available: Resources): number {
  const per = (n: number, have: number) => (n === 0 ? Infinity : Math.floor(have / n));
  return Math.min(
    per(need.cpuMillis, available.cpuMillis),
    per(need.memoryMib, available.memoryMib),
    per(need.diskMib, available.diskMib),
    per(need.gpus, available.gpus),
    per(need.ports, available.ports),
  );
}

/**
 * Fixed-point weights that turn a resource vector into a fullness score
 * without division in the loop: `weight = floor(2^32 / total)` per kind (0
 * for a kind with zero capacity).
 */
export class ScoreScale {
  constructor(
    readonly cpu: number,
    readonly memory: number,
    readonly disk: number,
    readonly gpus: number,
  ) {}

  /** Weights for a host of capacity `total`. */
  static forTotal(total: Resources): ScoreScale {
    const w = (t: number) => (t === 0 ? 0 : Math.floor(4294967296 / t));
    return new ScoreScale(w(total.cpuMillis), w(total.memoryMib), w(total.diskMib), w(total.gpus));
  }

  /**
   * Sum over kinds of `amount / total` in 2^-32 units (0 is empty), wrapping
   * at 2^64 like the Rust SDK. A `number` when exact, else a `bigint`.
   */
  score(a: Resources): number | bigint {
    const s = a.cpuMillis * this.cpu + a.memoryMib * this.memory + a.diskMib * this.disk + a.gpus * this.gpus;
    if (s <= Number.MAX_SAFE_INTEGER) return s;
    const b = (x: number) => BigInt(x);
    return (
      (b(a.cpuMillis) * b(this.cpu) + b(a.memoryMib) * b(this.memory) + b(a.diskMib) * b(this.disk) + b(a.gpus) * b(this.gpus)) &
      U64_MAX
    );
  }
}
