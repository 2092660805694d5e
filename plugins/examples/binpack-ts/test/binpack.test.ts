// The Rust policy's scenario table, run natively on the TypeScript port.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { loadDir, runPlacement } from '@paceline/plugin-sdk/harness';
import { resources, Round } from '@paceline/plugin-sdk';
import { binpack, bestFitAll, bestFitIndexed, Compact } from '../src/binpack.ts';

const repo = process.env.PACELINE_REPO ?? process.cwd();

for (const s of loadDir(join(repo, 'plugins', 'binpack', 'scenarios'))) {
  test(`binpack-ts: ${s.name}`, () => {
    runPlacement(binpack, s);
  });
}

test('bestFitAll picks the tightest host and breaks ties low', () => {
  const total = resources({ cpuMillis: 4000, memoryMib: 4096 });
  const host = (c: number, m: number) => ({ free: resources({ cpuMillis: c, memoryMib: m }), total });
  const hosts = [host(4000, 4096), host(1000, 1024), host(1000, 1024), host(4000, 4096), host(4000, 4096), host(4000, 4096), host(600, 600)];
  const c = new Compact({ round: 0, hosts, attributes: [], symbols: [], jobs: [], constraints: [], tasks: [] });
  assert.equal(bestFitAll(c, 500, 512, 0), 6);
  assert.equal(bestFitAll(c, 700, 512, 0), 1);
  assert.equal(bestFitAll(c, 2000, 512, 0), 0);
  assert.equal(bestFitAll(c, 5000, 0, 0), -1);
});

test('the index answers as the scan on random rounds', () => {
  // Random hosts (some alike, so ties happen) and demands; each answer is
  // assigned in the round, and now and then the last assignments are undone
  // (a gang that failed): the index and the scan agree throughout.
  let seed = 7;
  const rand = () => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed / 2147483648;
  };
  const pick = <T,>(xs: T[]) => xs[Math.floor(rand() * xs.length)];
  for (let round = 0; round < 40; round++) {
    const hosts = Array.from({ length: 80 }, () => {
      const total = resources({ cpuMillis: pick([4000, 8000]), memoryMib: pick([4096, 16384]), diskMib: 1000 });
      return { free: { ...total }, total };
    });
    const demands = Array.from({ length: 3 }, () =>
      resources({ cpuMillis: pick([100, 500, 1500]), memoryMib: pick([64, 512, 2048]), diskMib: 10 }),
    );
    const tasks = demands.map((demand, i) => ({ job: 0, instance: i, gang: i, demand, constraints: 0, preferredHost: undefined }));
    const request = { round: 0, hosts, attributes: [], symbols: [], jobs: [], constraints: [], tasks };
    const compact = new Compact(request);
    const r = new Round(request);
    for (let step = 0; step < 300; step++) {
      const t = Math.floor(rand() * demands.length);
      const d = demands[t];
      compact.sync(r);
      const got = bestFitIndexed(compact, d.cpuMillis, d.memoryMib, d.diskMib);
      assert.equal(got, bestFitAll(compact, d.cpuMillis, d.memoryMib, d.diskMib), `round ${round} step ${step}`);
      if (got >= 0) r.assign(t, got);
      if (rand() < 0.1) r.undoSince(Math.max(0, r.checkpoint() - 3));
    }
  }
});
