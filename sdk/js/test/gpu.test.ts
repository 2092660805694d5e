// The TypeScript SDK's GPU worlds (WIT 0.1.2 / 0.1.3) against the Rust
// SDK's cases: shapes, the round's devices, grants and their checks, the
// runtime's default devices, victims in milli-GPUs, scenario files and the
// component glue.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  checkPlacement,
  checkVictims,
  completeGrants,
  exportPlacementGpu,
  exportPreemptionGpu,
  gpuShape,
  gpuTakes,
  hasGpuSide,
  inMilliGpus,
  inWholeGpus,
  NO_VALUE,
  placeGangs,
  placeGangsOnDevices,
  resources,
  Round,
  Violation,
} from '@paceline/plugin-sdk';
import type { PlacementPolicy, PlacementRequest, PlacementResult, PreemptionRequest, Victim } from '@paceline/plugin-sdk';
import { parseScenario, runPlacement } from '@paceline/plugin-sdk/harness';

const firstFit: PlacementPolicy = {
  place: (request) => placeGangs(new Round(request), (round, t) => round.pickMinByKey(t, (h) => h)),
};

/** The Rust SDK's `gpu_request`: host 0 has a wholly free device and one with 400 free of model `m`; host 1 two wholly free; tasks ask 500, 500, one whole GPU, and 300 of model `m`. */
function gpuRequest(): PlacementRequest {
  const dev = (freeMilli: number, model: number) => ({ freeMilli, model });
  const ask = (milli: number, models: number[] = []) => ({ milli, models: Uint32Array.from(models) });
  return {
    round: 0,
    hosts: [
      { free: resources({ cpuMillis: 8000, memoryMib: 8000, gpus: 1 }), total: resources({ cpuMillis: 8000, memoryMib: 8000, gpus: 2 }) },
      { free: resources({ cpuMillis: 8000, memoryMib: 8000, gpus: 2 }), total: resources({ cpuMillis: 8000, memoryMib: 8000, gpus: 2 }) },
    ],
    attributes: [],
    symbols: ['m'],
    jobs: [{ priority: 0, maxPerHost: 0, spreadOver: undefined, existing: [] }],
    constraints: [{ eligible: { tag: 'all' }, preferences: [] }],
    tasks: [0, 1, 2, 3].map((g) => ({ job: 0, instance: 0, gang: g, demand: resources({ cpuMillis: 100, memoryMib: 100, gpus: g === 2 ? 1 : 0 }), constraints: 0, preferredHost: undefined })),
    gpuHosts: [{ devices: [dev(1000, NO_VALUE), dev(400, 0)] }, { devices: [dev(1000, NO_VALUE), dev(1000, NO_VALUE)] }],
    gpuTasks: [ask(500), ask(500), ask(1000), ask(300, [0])],
  };
}

function withGrants(pairs: Array<[number, number]>, grants: Array<[number, number[]]>): PlacementResult {
  const placed = pairs.map((p) => p[0]);
  return {
    assignments: pairs.map(([task, host]) => ({ task, host })),
    unplaced: [0, 1, 2, 3].filter((t) => !placed.includes(t)).map((task) => ({ task, reason: 'deferred' as const, detail: '' })),
    grants: grants.map(([task, d]) => ({ task, devices: Uint32Array.from(d) })),
  };
}

const devicesOf = (r: PlacementResult) => (r.grants ?? []).map((g) => [g.task, Array.from(g.devices)]);

test('GPU shapes and takes follow the Rust SDK', () => {
  const ask = (milli: number, models: number[] = []) => ({ milli, models: Uint32Array.from(models) });
  assert.deepEqual([gpuShape(ask(0)), gpuShape(ask(250)), gpuShape(ask(3000))], [[0, 0], [1, 250], [3, 1000]]);
  const dev = { freeMilli: 1000, model: 7 };
  assert.ok(gpuTakes(ask(1000), dev, 1000) && !gpuTakes(ask(1000), dev, 999));
  assert.ok(gpuTakes(ask(400), dev, 400) && !gpuTakes(ask(400), dev, 399));
  assert.ok(gpuTakes(ask(400, [7]), dev, 1000) && !gpuTakes(ask(400, [8]), dev, 1000));
});

test('GPU grants are checked per device, with the Rust SDK messages', () => {
  const r = gpuRequest();
  checkPlacement(r, withGrants([[0, 1], [1, 1], [2, 0], [3, 0]], [[0, [0]], [1, [0]], [2, [0]], [3, [1]]]));
  const cases: Array<[Array<[number, number]>, Array<[number, number[]]>, string]> = [
    [[[0, 1], [1, 1]], [[0, [0]], [1, [0]], [1, [1]]], 'twice'],
    [[[0, 0], [1, 0]], [[0, [1]], [1, [1]]], '400 milli-GPU free'],
    [[[0, 1], [2, 1]], [[0, [0]], [2, [0]]], 'not wholly free'],
    [[[3, 1]], [[3, [0]]], 'not of a model'],
    [[[0, 1]], [[0, [5]]], 'does not exist'],
    [[[0, 1]], [], 'without GPU devices'],
    [[[0, 1]], [[0, [0]], [1, [0]]], 'not assigned'],
    [[[2, 1]], [[2, [0, 1]]], 'asks for 1 device'],
  ];
  for (const [pairs, grants, needle] of cases) {
    assert.throws(() => checkPlacement(r, withGrants(pairs, grants)), (e: unknown) => e instanceof Violation && e.kind === 'bad_grant' && e.message.includes(needle), needle);
  }
});

test('missing grants are completed with the runtime default', () => {
  const r = gpuRequest();
  const out = withGrants([[0, 0], [1, 1], [2, 1], [3, 0]], []);
  completeGrants(r, out);
  checkPlacement(r, out);
  const of = new Map(devicesOf(out).map(([t, d]) => [t as number, d as number[]]));
  assert.deepEqual([of.get(0), of.get(3)], [[0], [1]]);
  assert.notDeepEqual(of.get(1), of.get(2));
  const crowded = withGrants([[0, 0], [2, 0]], []);
  completeGrants(r, crowded);
  assert.throws(() => checkPlacement(r, crowded), Violation);
});

test('the round tracks devices and gives them back on undo', () => {
  const rd = new Round(gpuRequest());
  assert.deepEqual(rd.gpuFree, [[1000, 400], [1000, 1000]]);
  assert.deepEqual(rd.defaultDevices(0, 0), [0], '400 free cannot take 500');
  assert.deepEqual(rd.defaultDevices(3, 0), [1]);
  assert.equal(rd.defaultDevices(3, 1), undefined);
  assert.ok(rd.fits(3, 0) && !rd.fits(3, 1));
  const cp = rd.checkpoint();
  rd.assign(0, 1);
  rd.assign(1, 1);
  assert.deepEqual(rd.gpuFree[1], [0, 1000], 'the second half shares the started device');
  assert.equal(rd.free[1].gpus, 1);
  rd.assign(2, 1);
  assert.deepEqual(rd.gpuFree[1], [0, 0]);
  assert.ok(!rd.fits(0, 1));
  assert.equal(rd.pickMinByKey(0, (h) => h), 0, 'only host 0 has a device for the share');
  assert.deepEqual(rd.undoSince(cp), [0, 1, 2]);
  assert.deepEqual(rd.gpuFree[1], [1000, 1000]);
  assert.equal(rd.free[1].gpus, 2);
  assert.equal(rd.finish().grants, undefined);
});

test('placeGangsOnDevices keeps the policy devices and the default', () => {
  const r = gpuRequest();
  const out = placeGangsOnDevices(new Round(r), (_, t) => (t === 0 ? [1, [1]] : [t < 3 ? 1 : 0, undefined]));
  checkPlacement(r, out);
  assert.deepEqual(devicesOf(out), [[0, [1]], [1, [1]], [2, [0]], [3, [1]]]);
});

function gpuPreemption(need: number): PreemptionRequest {
  const task = { pool: 0, priority: 0, preemptible: true, revocable: false, startedAtMs: 0, resources: resources({ gpus: 1 }) };
  const pool = { path: '', reservation: resources({}), entitlement: resources({}), allocation: resources({}) };
  return {
    pools: [pool, pool],
    running: [task, task, task],
    needs: [{ pool: 1, priority: 0, resources: resources({ gpus: Math.ceil(need / 1000) }), fromPools: new Uint32Array(0) }],
    gpuPools: [
      { reservationMilli: 0, entitlementMilli: 0, allocationMilli: 0 },
      { reservationMilli: 0, entitlementMilli: 0, allocationMilli: 0 },
    ],
    gpuRunning: [500, 500, 1000],
    gpuNeeds: [need],
  };
}

test('victims count GPU shares in milli-GPUs', () => {
  const v = (...ts: number[]): Victim[] => ts.map((task) => ({ task, need: 0, reason: 'over-entitlement' }));
  const cases: Array<[string, number, Victim[], string | undefined]> = [
    ['two halves free a device', 1000, v(0, 1), undefined],
    ['one half does not', 1000, v(0), 'not_enough'],
    ['a whole device does', 1000, v(2), undefined],
    ['a half for a half', 500, v(0), undefined],
    ['a whole for a half', 500, v(2), undefined],
    ['a whole beside a half is one too many', 500, v(0, 2), 'not_needed'],
    ['three for one and a half', 1500, v(0, 1, 2), 'not_needed'],
  ];
  for (const [name, need, victims, kind] of cases) {
    if (kind === undefined) checkVictims(gpuPreemption(need), victims);
    else assert.throws(() => checkVictims(gpuPreemption(need), victims), (e: unknown) => e instanceof Violation && e.kind === kind, name);
  }
  const whole = inWholeGpus(gpuPreemption(1000));
  assert.ok(!hasGpuSide(whole));
  checkVictims(whole, v(0));
  assert.throws(() => checkVictims(whole, v(0, 1)), /not needed/);
  const req = gpuPreemption(1000);
  const milli = inMilliGpus(req);
  assert.deepEqual(milli.running.map((t) => t.resources.gpus), [500, 500, 1000]);
  assert.equal(milli.needs[0].resources.gpus, 1000);
  assert.equal(req.running[0].resources.gpus, 1, 'the request itself is not changed');
});

const GPU_DOC = `
name: a GPU share on the device it fills best
input:
  placement:
    hosts:
      - { free: { cpu_millis: 1000, memory_mib: 1024, gpus: 1 }, total: { cpu_millis: 1000, memory_mib: 1024, gpus: 2 } }
    jobs: [ {} ]
    constraints: [ {} ]
    tasks: [ { gang: 0, demand: { cpu_millis: 100 } } ]
    gpu_hosts: [ { devices: [ { free_milli: 1000, model: 4294967295 }, { free_milli: 300, model: 4294967295 } ] } ]
    gpu_tasks: [ { milli: 250 } ]
    gpu_workload: [ { cpu_millis: 100, milli: 250, weight: 3 } ]
expect:
  placement:
    assignments: [ { task: 0, host: 0 } ]
`;

test('the harness reads GPU scenarios and checks grants', () => {
  const s = parseScenario(GPU_DOC);
  assert.equal(s.world, 'placement');
  const input = s.input as PlacementRequest;
  assert.equal(input.gpuHosts?.[0].devices[1].freeMilli, 300);
  assert.equal(input.gpuWorkload?.[0].weight, 3);
  assert.deepEqual(devicesOf(runPlacement(firstFit, s)), [[0, [1]]]);
  const noDevices: PlacementPolicy = { place: () => ({ assignments: [{ task: 0, host: 0 }], unplaced: [] }) };
  assert.throws(() => runPlacement(noDevices, s), /without GPU devices/);
  assert.throws(() => parseScenario(GPU_DOC.replace(', model: 4294967295 }, { free_milli: 300', ' }, { free_milli: 300')), /free_milli and model/);
  const pre = parseScenario('name: g\ninput: { preemption: { pools: [ {} ], gpu_pools: [ { allocation_milli: 500 } ], gpu_running: [], gpu_needs: [] } }');
  assert.ok(pre.world === 'preemption' && hasGpuSide(pre.input) && pre.input.gpuPools?.[0].allocationMilli === 500);
});

test('the glue puts the GPU side into the request and the grants on the wire', () => {
  const s = parseScenario(GPU_DOC);
  const r = s.input as PlacementRequest;
  const big = (x: ReturnType<typeof resources>) => ({ cpuMillis: BigInt(x.cpuMillis), memoryMib: BigInt(x.memoryMib), diskMib: BigInt(x.diskMib), gpus: BigInt(x.gpus), ports: BigInt(x.ports) });
  const wire = {
    ...r,
    round: 1n,
    hosts: r.hosts.map((h) => ({ free: big(h.free), total: big(h.total) })),
    tasks: r.tasks.map((t) => ({ ...t, demand: big(t.demand) })),
  };
  let seen: PlacementRequest | undefined;
  const spy: PlacementPolicy = { place: (q) => ((seen = q), firstFit.place(q)) };
  const out = exportPlacementGpu(spy)(wire, {
    hosts: [{ devices: [{ freeMilli: 1000, model: NO_VALUE }, { freeMilli: 300, model: NO_VALUE }] }],
    tasks: [{ milli: 250, models: new Uint32Array(0) }],
    workload: [{ cpuMillis: 100n, memoryMib: 0n, milli: 250, weight: 3 }],
  });
  assert.equal(seen?.gpuWorkload?.[0].cpuMillis, 100);
  assert.deepEqual(out.placement.assignments, [{ task: 0, host: 0 }]);
  assert.deepEqual(out.grants.map((g) => [g.task, Array.from(g.devices)]), [[0, [1]]]);
  const pre = gpuPreemption(1000);
  const wirePre = {
    pools: pre.pools.map((p) => ({ path: p.path, reservation: big(p.reservation), entitlement: big(p.entitlement), allocation: big(p.allocation) })),
    running: pre.running.map((t) => ({ ...t, startedAtMs: 0n, resources: big(t.resources) })),
    needs: pre.needs.map((n) => ({ ...n, resources: big(n.resources) })),
  };
  let got: PreemptionRequest | undefined;
  exportPreemptionGpu({ selectVictims: (q) => ((got = q), []) })(wirePre, {
    pools: [
      { reservationMilli: 0n, entitlementMilli: 0n, allocationMilli: 2000n },
      { reservationMilli: 0n, entitlementMilli: 0n, allocationMilli: 0n },
    ],
    running: BigUint64Array.from([500n, 500n, 1000n]),
    needs: BigUint64Array.from([1000n]),
  });
  assert.deepEqual([got?.gpuRunning, got?.gpuNeeds, got?.gpuPools?.[0].allocationMilli], [[500, 500, 1000], [1000], 2000]);
});
