// The Rust policy's scenario table, run natively on the TypeScript port.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { loadDir, runPlacement } from '@paceline/plugin-sdk/harness';
import { resources } from '@paceline/plugin-sdk';
import { binpack, bestFitAll, Compact } from '../src/binpack.ts';

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
