// The TypeScript SDK on its own: arithmetic, the round helpers, validation,
// the harness and the component glue, against the behaviour of the Rust SDK.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  exportLifecycle,
  exportPlacement,
  placeGangs,
  resources,
  Round,
  saturatingSub,
  ScoreScale,
  checkPlacement,
  Violation,
} from '@paceline/plugin-sdk';
import type { PlacementPolicy, PlacementRequest, PlacementResult } from '@paceline/plugin-sdk';
import { HarnessError, parseScenario, runPlacement, runPreemption } from '@paceline/plugin-sdk/harness';

const firstFit: PlacementPolicy = {
  place: (request) => placeGangs(new Round(request), (round, t) => round.pickMinByKey(t, (h) => h)),
};

const DOC = `
name: two tasks, one fits
input:
  placement:
    hosts:
      - { free: { cpu_millis: 1000, memory_mib: 1024 }, total: { cpu_millis: 1000, memory_mib: 1024 } }
    jobs: [ {} ]
    constraints: [ {} ]
    tasks:
      - { gang: 0, demand: { cpu_millis: 800 } }
      - { gang: 1, demand: { cpu_millis: 800 } }
expect:
  placement:
    assignments: [ { task: 0, host: 0 } ]
    unplaced: [ { task: 1, reason: insufficient_resources } ]
`;

test('arithmetic and scores follow the Rust SDK', () => {
  assert.deepEqual(saturatingSub(resources({ cpuMillis: 5, memoryMib: 10 }), resources({ cpuMillis: 7, memoryMib: 3 })), resources({ memoryMib: 7 }));
  const s = ScoreScale.forTotal(resources({ cpuMillis: 4096, memoryMib: 8192 }));
  assert.equal(s.score(resources({ cpuMillis: 2048 })), s.score(resources({ memoryMib: 4096 })));
  // Past 2^53 the score is an exact bigint, wrapped at 2^64 like Rust's.
  const huge = ScoreScale.forTotal(resources({ cpuMillis: 1 }));
  assert.equal(huge.score(resources({ cpuMillis: 2 ** 40 })), (2n ** 40n * 2n ** 32n) & (2n ** 64n - 1n));
});

test('the documented scenario parses and passes; mistakes are reported', () => {
  runPlacement(firstFit, parseScenario(DOC));
  assert.throws(() => runPlacement(firstFit, parseScenario(DOC.replace('{ task: 0, host: 0 }', '{ task: 1, host: 0 }'))), HarnessError);
  assert.throws(() => runPreemption({ selectVictims: () => [] }, parseScenario(DOC)), /placement world/);
  assert.throws(() => parseScenario('name: x\ninput: { placement: { hostz: [] } }'), /unknown field/);
  assert.throws(() => parseScenario('name: x\ninput: { nonsense: 1 }'), /unknown world/);
});

test('gangs are all or nothing and give their resources back', () => {
  const total = resources({ cpuMillis: 2000, memoryMib: 2048 });
  const task = (gang: number, cpu: number) => ({ job: 0, instance: 0, gang, demand: resources({ cpuMillis: cpu, memoryMib: 10 }), constraints: 0 });
  const req: PlacementRequest = {
    round: 0,
    hosts: [{ free: total, total }],
    attributes: [],
    symbols: [],
    jobs: [{ priority: 0, maxPerHost: 0, existing: [] }],
    constraints: [{ eligible: { tag: 'all' }, preferences: [] }],
    tasks: [task(0, 1500), task(0, 1500), task(1, 2000)],
  };
  const r = firstFit.place(req);
  assert.deepEqual(r.assignments, [{ task: 2, host: 0 }]);
  assert.deepEqual(
    r.unplaced.map((u) => [u.task, u.reason]),
    [
      [0, 'gang-incomplete'],
      [1, 'insufficient-resources'],
    ],
  );
});

test('validation gives the Rust SDK verdicts', () => {
  const host = { free: resources({ cpuMillis: 1000, memoryMib: 1000 }), total: resources({ cpuMillis: 1000, memoryMib: 1000 }) };
  const task = (gang: number) => ({ job: 0, instance: 0, gang, demand: resources({ cpuMillis: 600, memoryMib: 100 }), constraints: 0 });
  const req: PlacementRequest = {
    round: 0,
    hosts: [host, host],
    attributes: [],
    symbols: [],
    jobs: [{ priority: 0, maxPerHost: 0, existing: [] }],
    constraints: [{ eligible: { tag: 'all' }, preferences: [] }],
    tasks: [task(0), task(1), task(1)],
  };
  const answer = (pairs: number[][], unplaced: number[]): PlacementResult => ({
    assignments: pairs.map(([t, h]) => ({ task: t, host: h })),
    unplaced: unplaced.map((t) => ({ task: t, reason: 'deferred', detail: '' })),
  });
  const cases: Array<[number[][], number[], string | null]> = [
    [[[0, 0]], [1, 2], null],
    [[[7, 0]], [], 'unknown_task'],
    [[[0, 9]], [1, 2], 'unknown_host'],
    [[[0, 0], [0, 1]], [1, 2], 'task_twice'],
    [[[0, 0]], [1], 'task_missing'],
    [[[0, 0], [1, 1]], [2], 'partial_gang'],
    [[[0, 0], [1, 0], [2, 1]], [], 'over_capacity'],
  ];
  for (const [pairs, unplaced, kind] of cases) {
    if (kind === null) checkPlacement(req, answer(pairs, unplaced));
    else assert.throws(() => checkPlacement(req, answer(pairs, unplaced)), (e) => e instanceof Violation && e.kind === kind);
  }
});

test('the glue converts bigints at the boundary and refuses what a number cannot hold', () => {
  const place = exportPlacement(firstFit);
  const r = (c: bigint) => ({ cpuMillis: c, memoryMib: 0n, diskMib: 0n, gpus: 0n, ports: 0n });
  const wire = {
    round: 3n,
    hosts: [{ free: r(1000n), total: r(1000n) }],
    attributes: [],
    symbols: [],
    jobs: [{ priority: 0, maxPerHost: 0, existing: [] }],
    constraints: [{ eligible: { tag: 'all' as const }, preferences: [] }],
    tasks: [{ job: 0, instance: 0, gang: 0, demand: r(10n), constraints: 0 }],
  };
  assert.deepEqual(place(wire), { assignments: [{ task: 0, host: 0 }], unplaced: [] });
  wire.hosts[0].free = r(2n ** 60n);
  assert.throws(() => place(wire), RangeError);
  const lc = exportLifecycle({ onEvent: (job) => [{ tag: 'restart-after', val: { instance: 0, delayMs: job.maxRunTimeMs } }] });
  const job = {
    kind: 'batch' as const,
    state: 'running' as const,
    instanceCount: 1,
    maxFailuresPerInstance: 0,
    maxRunTimeMs: 5n,
    configVersion: 1n,
    resources: r(1n),
    matchingHosts: [],
  };
  const out = lc.onEvents(job, [], [{ tag: 'job-created' }, { tag: 'scaled' }]);
  assert.deepEqual(out, [{ tag: 'restart-after', val: { instance: 0, delayMs: 5n } }], 'identical actions kept once, u64 back as bigint');
});
