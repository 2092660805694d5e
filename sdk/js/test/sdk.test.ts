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
  checkActions,
  checkPlacement,
  checkVictims,
  Violation,
} from '@paceline/plugin-sdk';
import type {
  Action,
  JobState,
  JobView,
  PlacementPolicy,
  PlacementRequest,
  PlacementResult,
  PoolView,
  PreemptionRequest,
  RunningTask,
  TaskState,
  TaskView,
  Victim,
} from '@paceline/plugin-sdk';
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

test('the victims table matches the Rust SDK', () => {
  const res = (cpuMillis: number) => (resources({ cpuMillis }));
  const task = (preemptible: boolean, cpu: number): RunningTask => ({
    pool: 0,
    priority: 0,
    preemptible,
    revocable: false,
    startedAtMs: 0,
    resources: res(cpu),
  });
  const pool: PoolView = { path: '', reservation: resources(), entitlement: resources(), allocation: resources() };
  const req: PreemptionRequest = {
    pools: [pool, pool],
    running: [task(true, 10), task(true, 10), task(false, 10), task(true, 5)],
    needs: [{ pool: 1, priority: 0, resources: res(10), fromPools: new Uint32Array() }],
  };
  const v = (t: number, need = 0): Victim => ({ task: t, need, reason: 'over-entitlement' });
  const cases: Array<[string, Victim[], string | null]> = [
    ['none', [], null],
    ['one covers', [v(0)], null],
    ['two small ones cover', [v(3), v(3)], 'task_twice'],
    ['not preemptible', [v(2)], 'not_preemptible'],
    ['more than needed', [v(0), v(1)], 'not_needed'],
    ['not enough', [v(3)], 'not_enough'],
    ['unknown need', [v(0, 4)], 'unknown_need'],
  ];
  for (const [name, victims, kind] of cases) {
    if (kind === null) checkVictims(req, victims);
    else assert.throws(() => checkVictims(req, victims), (e) => e instanceof Violation && e.kind === kind, name);
  }
});

test('the actions table matches the Rust SDK', () => {
  const job = (state: JobState, instanceCount: number): JobView => ({
    kind: 'batch',
    state,
    instanceCount,
    maxFailuresPerInstance: 0,
    maxRunTimeMs: 0,
    configVersion: 0,
    resources: resources(),
    matchingHosts: [],
  });
  const tasks = (...states: TaskState[]): TaskView[] =>
    states.map((state, instance) => ({ instance, state, run: 0, failures: 0, configVersion: 0 }));
  const cases: Array<[string, JobView, TaskView[], Action[], string | null]> = [
    ['launch all', job('pending', 2), tasks('initialized', 'initialized'), [{ tag: 'launch', val: 0 }, { tag: 'launch', val: 1 }], null],
    ['launch past the count', job('running', 2), tasks('running', 'running', 'running'), [{ tag: 'launch', val: 2 }], 'outside_job'],
    ['kill past the count', job('running', 2), tasks('running', 'running', 'running'), [{ tag: 'kill', val: 2 }], null],
    ['kill unknown', job('running', 2), tasks('running', 'running'), [{ tag: 'kill', val: 9 }], 'unknown_task'],
    ['restart a missing instance', job('running', 3), tasks('running'), [{ tag: 'restart-after', val: { instance: 2, delayMs: 1 } }], 'outside_job'],
    ['success too early', job('running', 2), tasks('succeeded', 'running'), [{ tag: 'mark-job', val: 'succeeded' }], 'premature_success'],
    ['success before start', job('pending', 1), tasks(), [{ tag: 'mark-job', val: 'succeeded' }], 'premature_success'],
    ['success', job('running', 2), tasks('succeeded', 'succeeded', 'running'), [{ tag: 'mark-job', val: 'succeeded' }], null],
    ['failed with live tasks', job('running', 2), tasks('running', 'running'), [{ tag: 'mark-job', val: 'failed' }], null],
    ['backwards', job('running', 1), tasks('running'), [{ tag: 'mark-job', val: 'pending' }], 'illegal_job_state'],
    ['launch after the end', job('succeeded', 1), tasks('succeeded'), [{ tag: 'launch', val: 0 }], 'job_ended'],
    ['kill after the end', job('failed', 1), tasks('running'), [{ tag: 'kill', val: 0 }], null],
  ];
  for (const [name, j, ts, actions, kind] of cases) {
    if (kind === null) checkActions(j, ts, actions);
    else assert.throws(() => checkActions(j, ts, actions), (e) => e instanceof Violation && e.kind === kind, name);
  }
  // The messages name states as the Rust SDK prints them.
  assert.throws(
    () => checkActions(job('running', 2), tasks('succeeded'), [{ tag: 'mark-job', val: 'succeeded' }]),
    (e) => e instanceof Violation && e.message === 'the job cannot succeed while instance 1 is Initialized',
  );
});
