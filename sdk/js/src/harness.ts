/**
 * A native test harness for Node's test runner: scenario files (the Rust
 * SDK's format: YAML or JSON, snake_case keys, omitted fields zero or
 * empty), runners that call a policy as plain JavaScript, and the
 * expectation check.
 *
 * ```ts
 * import { test } from 'node:test';
 * import { loadDir, runPlacement } from '@paceline/plugin-sdk/harness';
 * for (const s of loadDir('scenarios')) test(s.name, () => { runPlacement(myPolicy, s); });
 * ```
 *
 * `run*` call the policy, run the host's validation on the answer, compare
 * it with `expect` (placement: assignments exactly, unplaced tasks by task
 * and reason; preemption: victims by task and need, order ignored;
 * lifecycle: actions in order), and return the decision; they throw a
 * {@link HarnessError} or a {@link Violation} otherwise.
 *
 * GPU worlds: a placement request may carry `gpu_hosts`, `gpu_tasks` and
 * `gpu_workload` (0.1.2) and a preemption request `gpu_pools`,
 * `gpu_running` and `gpu_needs` (0.1.3), as in the Rust SDK's files; device
 * grants are checked as the host checks them, and victims are judged in
 * milli-GPUs when the request has its GPU side.
 *
 * @module
 */

import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';

import { checkActions, checkPlacement, checkVictims, Violation } from './validate.ts';
import type {
  Action,
  Assignment,
  Event,
  JobView,
  LifecyclePolicy,
  PlacementPolicy,
  PlacementRequest,
  PlacementResult,
  PreemptionPolicy,
  PreemptionRequest,
  Resources,
  TaskView,
  UnplacedReason,
  Victim,
} from './types.ts';
import { onEventsByEvent } from './component.ts';

export { Violation };

/** A scenario could not be read, is for another world, or its decision differs from the expectation. */
export class HarnessError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'HarnessError';
  }
}

type Dict = Record<string, unknown>;

function obj(v: unknown, where: string, known: string[]): Dict {
  if (v === undefined || v === null) return {};
  if (typeof v !== 'object' || Array.isArray(v)) throw new HarnessError(`${where}: expected a mapping, got ${JSON.stringify(v)}`);
  const unknown = Object.keys(v).filter((k) => !known.includes(k));
  if (unknown.length) throw new HarnessError(`${where}: unknown field(s) ${unknown.join(', ')} (known: ${known.join(', ')})`);
  return v as Dict;
}

function int(v: unknown, where: string, lo = 0, hi = Number.MAX_SAFE_INTEGER): number {
  if (v === undefined || v === null) return 0;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi) throw new HarnessError(`${where}: expected an integer in ${lo}..=${hi}, got ${JSON.stringify(v)}`);
  return v;
}
const u32 = (v: unknown, w: string) => int(v, w, 0, 0xffff_ffff);
const s32 = (v: unknown, w: string) => int(v, w, -(2 ** 31), 2 ** 31 - 1);
const bool = (v: unknown, w: string): boolean => {
  if (v === undefined || v === null) return false;
  if (typeof v !== 'boolean') throw new HarnessError(`${w}: expected true or false, got ${JSON.stringify(v)}`);
  return v;
};
const str = (v: unknown, w: string): string => {
  if (v === undefined || v === null) return '';
  if (typeof v !== 'string') throw new HarnessError(`${w}: expected a string, got ${JSON.stringify(v)}`);
  return v;
};
function list<T>(v: unknown, where: string, item: (x: unknown, w: string) => T): T[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw new HarnessError(`${where}: expected a list, got ${JSON.stringify(v)}`);
  return v.map((x, i) => item(x, `${where}[${i}]`));
}
const u32s = (v: unknown, w: string) => Uint32Array.from(list(v, w, u32));
const opt = <T>(v: unknown, w: string, f: (x: unknown, w: string) => T): T | undefined => (v === undefined || v === null ? undefined : f(v, w));

/** A snake_case enum value from a scenario as the kebab-case string the wire uses. */
function enumValue<T extends string>(v: unknown, where: string, allowed: readonly T[]): T {
  const k = String(v).replaceAll('_', '-') as T;
  if (typeof v !== 'string' || !allowed.includes(k)) throw new HarnessError(`${where}: ${JSON.stringify(v)} is not one of ${allowed.map((a) => a.replaceAll('-', '_')).join(', ')}`);
  return k;
}

/** A serde externally tagged value: `name` or `{ name: value }`. */
function variant(v: unknown, where: string): [string, unknown] {
  if (typeof v === 'string') return [v, undefined];
  if (v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length === 1) {
    const [k] = Object.keys(v);
    return [k, (v as Dict)[k]];
  }
  throw new HarnessError(`${where}: expected \`name\` or \`{name: value}\`, got ${JSON.stringify(v)}`);
}

const KINDS = ['cpu_millis', 'memory_mib', 'disk_mib', 'gpus', 'ports'];
function resources(v: unknown, w: string): Resources {
  const d = obj(v, w, KINDS);
  return { cpuMillis: int(d.cpu_millis, w), memoryMib: int(d.memory_mib, w), diskMib: int(d.disk_mib, w), gpus: int(d.gpus, w), ports: int(d.ports, w) };
}

const UNPLACED: readonly UnplacedReason[] = ['insufficient-resources', 'constraints-unsatisfiable', 'max-per-host', 'gang-incomplete', 'deferred'];
const VICTIM = ['over-entitlement', 'higher-priority', 'revoked'] as const;
const TASK_STATES = ['initialized', 'pending', 'ready', 'placing', 'placed', 'launching', 'launched', 'starting', 'running', 'succeeded', 'failed', 'lost', 'killed', 'preempting', 'killing'] as const;
const JOB_STATES = ['initialized', 'pending', 'running', 'succeeded', 'failed', 'killed', 'killing'] as const;
const JOB_KINDS = ['batch', 'stateless', 'stateful', 'daemon'] as const;

/** The GPU side of a placement request (0.1.2), each list only when the file has it. */
function gpuPlacementSide(d: Dict, w: string): Pick<PlacementRequest, 'gpuHosts' | 'gpuTasks' | 'gpuWorkload'> {
  const out: Pick<PlacementRequest, 'gpuHosts' | 'gpuTasks' | 'gpuWorkload'> = {};
  if (d.gpu_hosts !== undefined) {
    out.gpuHosts = list(d.gpu_hosts, `${w}.gpu_hosts`, (x, xw) => {
      const h = obj(x, xw, ['devices']);
      return {
        devices: list(h.devices, `${xw}.devices`, (y, yw) => {
          // Both fields required, as in the Rust SDK: a device without its free amount is a mistake, not "full".
          const dev = obj(y, yw, ['free_milli', 'model']);
          if (dev.free_milli === undefined || dev.model === undefined) throw new HarnessError(`${yw}: a GPU device has free_milli and model`);
          return { freeMilli: u32(dev.free_milli, `${yw}.free_milli`), model: u32(dev.model, `${yw}.model`) };
        }),
      };
    });
  }
  if (d.gpu_tasks !== undefined) {
    out.gpuTasks = list(d.gpu_tasks, `${w}.gpu_tasks`, (x, xw) => {
      const t = obj(x, xw, ['milli', 'models']);
      return { milli: u32(t.milli, `${xw}.milli`), models: u32s(t.models, `${xw}.models`) };
    });
  }
  if (d.gpu_workload !== undefined) {
    out.gpuWorkload = list(d.gpu_workload, `${w}.gpu_workload`, (x, xw) => {
      const c = obj(x, xw, ['cpu_millis', 'memory_mib', 'milli', 'weight']);
      return { cpuMillis: int(c.cpu_millis, xw), memoryMib: int(c.memory_mib, xw), milli: u32(c.milli, xw), weight: u32(c.weight, xw) };
    });
  }
  return out;
}

function placementRequest(v: unknown, w: string): PlacementRequest {
  const d = obj(v, w, ['round', 'hosts', 'attributes', 'symbols', 'jobs', 'constraints', 'tasks', 'gpu_hosts', 'gpu_tasks', 'gpu_workload']);
  return {
    ...gpuPlacementSide(d, w),
    round: int(d.round, `${w}.round`),
    hosts: list(d.hosts, `${w}.hosts`, (x, xw) => {
      const h = obj(x, xw, ['free', 'total']);
      return { free: resources(h.free, `${xw}.free`), total: resources(h.total, `${xw}.total`) };
    }),
    attributes: list(d.attributes, `${w}.attributes`, (x, xw) => {
      const a = obj(x, xw, ['key', 'values']);
      return { key: str(a.key, `${xw}.key`), values: u32s(a.values, `${xw}.values`) };
    }),
    symbols: list(d.symbols, `${w}.symbols`, str),
    jobs: list(d.jobs, `${w}.jobs`, (x, xw) => {
      const j = obj(x, xw, ['priority', 'max_per_host', 'spread_over', 'existing']);
      return {
        priority: u32(j.priority, `${xw}.priority`),
        maxPerHost: u32(j.max_per_host, `${xw}.max_per_host`),
        spreadOver: opt(j.spread_over, `${xw}.spread_over`, u32),
        existing: list(j.existing, `${xw}.existing`, (y, yw) => {
          const c = obj(y, yw, ['host', 'count']);
          return { host: u32(c.host, `${yw}.host`), count: u32(c.count, `${yw}.count`) };
        }),
      };
    }),
    constraints: list(d.constraints, `${w}.constraints`, (x, xw) => {
      const c = obj(x, xw, ['eligible', 'preferences']);
      let eligible: PlacementRequest['constraints'][number]['eligible'] = { tag: 'all' };
      if (c.eligible !== undefined) {
        const [tag, val] = variant(c.eligible, `${xw}.eligible`);
        if (tag === 'only') eligible = { tag: 'only', val: u32s(val, `${xw}.eligible.only`) };
        else if (tag !== 'all' || val !== undefined) throw new HarnessError(`${xw}.eligible: a host filter is \`all\` or \`{only: [hosts]}\``);
      }
      return {
        eligible,
        preferences: list(c.preferences, `${xw}.preferences`, (y, yw) => {
          const p = obj(y, yw, ['attribute', 'value', 'weight']);
          return { attribute: u32(p.attribute, yw), value: u32(p.value, yw), weight: s32(p.weight, yw) };
        }),
      };
    }),
    tasks: list(d.tasks, `${w}.tasks`, (x, xw) => {
      const t = obj(x, xw, ['job', 'instance', 'gang', 'demand', 'constraints', 'preferred_host']);
      return {
        job: u32(t.job, xw),
        instance: u32(t.instance, xw),
        gang: u32(t.gang, xw),
        demand: resources(t.demand, `${xw}.demand`),
        constraints: u32(t.constraints, xw),
        preferredHost: opt(t.preferred_host, xw, u32),
      };
    }),
  };
}

function preemptionRequest(v: unknown, w: string): PreemptionRequest {
  const d = obj(v, w, ['pools', 'running', 'needs', 'gpu_pools', 'gpu_running', 'gpu_needs']);
  // The GPU side (0.1.3), each list only when the file has it.
  const gpu: Pick<PreemptionRequest, 'gpuPools' | 'gpuRunning' | 'gpuNeeds'> = {};
  if (d.gpu_pools !== undefined) {
    gpu.gpuPools = list(d.gpu_pools, `${w}.gpu_pools`, (x, xw) => {
      const p = obj(x, xw, ['reservation_milli', 'entitlement_milli', 'allocation_milli']);
      return { reservationMilli: int(p.reservation_milli, xw), entitlementMilli: int(p.entitlement_milli, xw), allocationMilli: int(p.allocation_milli, xw) };
    });
  }
  if (d.gpu_running !== undefined) gpu.gpuRunning = list(d.gpu_running, `${w}.gpu_running`, int);
  if (d.gpu_needs !== undefined) gpu.gpuNeeds = list(d.gpu_needs, `${w}.gpu_needs`, int);
  return {
    ...gpu,
    pools: list(d.pools, `${w}.pools`, (x, xw) => {
      const p = obj(x, xw, ['path', 'reservation', 'entitlement', 'allocation']);
      return { path: str(p.path, xw), reservation: resources(p.reservation, xw), entitlement: resources(p.entitlement, xw), allocation: resources(p.allocation, xw) };
    }),
    running: list(d.running, `${w}.running`, (x, xw) => {
      const r = obj(x, xw, ['pool', 'priority', 'preemptible', 'revocable', 'started_at_ms', 'resources']);
      return {
        pool: u32(r.pool, xw),
        priority: u32(r.priority, xw),
        preemptible: bool(r.preemptible, xw),
        revocable: bool(r.revocable, xw),
        startedAtMs: int(r.started_at_ms, xw),
        resources: resources(r.resources, xw),
      };
    }),
    needs: list(d.needs, `${w}.needs`, (x, xw) => {
      const n = obj(x, xw, ['pool', 'priority', 'resources', 'from_pools']);
      return { pool: u32(n.pool, xw), priority: u32(n.priority, xw), resources: resources(n.resources, xw), fromPools: u32s(n.from_pools, xw) };
    }),
  };
}

function jobView(v: unknown, w: string): JobView {
  const d = obj(v, w, ['kind', 'state', 'instance_count', 'max_failures_per_instance', 'max_run_time_ms', 'config_version', 'resources', 'update', 'matching_hosts']);
  return {
    kind: d.kind === undefined ? 'batch' : enumValue(d.kind, `${w}.kind`, JOB_KINDS),
    state: d.state === undefined ? 'initialized' : enumValue(d.state, `${w}.state`, JOB_STATES),
    instanceCount: u32(d.instance_count, w),
    maxFailuresPerInstance: u32(d.max_failures_per_instance, w),
    maxRunTimeMs: int(d.max_run_time_ms, w),
    configVersion: int(d.config_version, w),
    resources: resources(d.resources, `${w}.resources`),
    update: opt(d.update, `${w}.update`, (x, xw) => {
      const u = obj(x, xw, ['target_version', 'batch_size', 'max_unavailable', 'max_failures', 'rollback_on_failure', 'paused', 'done', 'in_flight', 'failed']);
      return {
        targetVersion: int(u.target_version, xw),
        batchSize: u32(u.batch_size, xw),
        maxUnavailable: u32(u.max_unavailable, xw),
        maxFailures: u32(u.max_failures, xw),
        rollbackOnFailure: bool(u.rollback_on_failure, xw),
        paused: bool(u.paused, xw),
        done: u32s(u.done, xw),
        inFlight: u32s(u.in_flight, xw),
        failed: u32s(u.failed, xw),
      };
    }),
    matchingHosts: list(d.matching_hosts, w, str),
  };
}

function taskView(v: unknown, w: string): TaskView {
  const d = obj(v, w, ['instance', 'state', 'run', 'failures', 'healthy', 'config_version', 'host', 'running_for_ms', 'exit_code']);
  return {
    instance: u32(d.instance, w),
    state: d.state === undefined ? 'initialized' : enumValue(d.state, `${w}.state`, TASK_STATES),
    run: u32(d.run, w),
    failures: u32(d.failures, w),
    healthy: opt(d.healthy, w, bool),
    configVersion: int(d.config_version, w),
    host: opt(d.host, w, str),
    runningForMs: opt(d.running_for_ms, w, int),
    exitCode: opt(d.exit_code, w, s32),
  };
}

function event(v: unknown, w: string): Event {
  const [tag, val] = variant(v, w);
  const t = tag.replaceAll('_', '-');
  if (['job-created', 'update-changed', 'hosts-changed', 'scaled', 'kill-requested'].includes(t) && val === undefined) return { tag: t } as Event;
  if (t === 'task-changed') {
    const c = obj(val, w, ['instance', 'state']);
    return { tag: 'task-changed', val: { instance: u32(c.instance, w), state: enumValue(c.state, w, TASK_STATES) } };
  }
  if (t === 'timer') return { tag: 'timer', val: u32(val, w) };
  throw new HarnessError(`${w}: unknown event ${JSON.stringify(v)}`);
}

function action(v: unknown, w: string): Action {
  const [tag, val] = variant(v, w);
  switch (tag) {
    case 'launch':
      return { tag: 'launch', val: u32(val, w) };
    case 'kill':
      return { tag: 'kill', val: u32(val, w) };
    case 'restart_after': {
      const r = obj(val, w, ['instance', 'delay_ms']);
      return { tag: 'restart-after', val: { instance: u32(r.instance, w), delayMs: int(r.delay_ms, w) } };
    }
    case 'mark_job':
      return { tag: 'mark-job', val: enumValue(val, w, JOB_STATES) };
    case 'update_batch':
      return { tag: 'update-batch', val: u32s(val, w) };
    case 'update_finished':
      return { tag: 'update-finished', val: bool(val, w) };
  }
  throw new HarnessError(`${w}: unknown action ${JSON.stringify(v)}`);
}

/** An expected placement. */
export interface ExpectedPlacement {
  assignments: Assignment[];
  unplaced: Array<{ task: number; reason: UnplacedReason }>;
}

/** A recorded input for one world, with an optional expected decision. */
export type Scenario =
  | { name: string; world: 'placement'; input: PlacementRequest; expect?: ExpectedPlacement }
  | { name: string; world: 'preemption'; input: PreemptionRequest; expect?: Victim[] }
  | { name: string; world: 'lifecycle'; input: { job: JobView; tasks: TaskView[]; event: Event }; expect?: Action[] };

/** Parses scenario text (YAML or JSON). */
export function parseScenario(text: string, path = '<text>'): Scenario {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (e) {
    throw new HarnessError(`scenario ${path} is not valid: ${(e as Error).message}`);
  }
  try {
    const d = obj(doc, 'scenario', ['name', 'input', 'expect']);
    const name = str(d.name, 'name');
    const [world, input] = variant(d.input, 'input');
    const expect = d.expect === undefined || d.expect === null ? undefined : variant(d.expect, 'expect');
    if (expect && expect[0] !== world) throw new HarnessError(`expect is for ${expect[0]}, the input for ${world}`);
    if (world === 'placement') {
      let e: ExpectedPlacement | undefined;
      if (expect) {
        const ed = obj(expect[1], 'expect.placement', ['assignments', 'unplaced']);
        e = {
          assignments: list(ed.assignments, 'expect.placement.assignments', (x, w) => {
            const a = obj(x, w, ['task', 'host']);
            return { task: u32(a.task, w), host: u32(a.host, w) };
          }),
          unplaced: list(ed.unplaced, 'expect.placement.unplaced', (x, w) => {
            const u = obj(x, w, ['task', 'reason']);
            return { task: u32(u.task, w), reason: enumValue(u.reason, w, UNPLACED) };
          }),
        };
      }
      return { name, world, input: placementRequest(input, 'input.placement'), expect: e };
    }
    if (world === 'preemption') {
      const e = expect
        ? list(expect[1], 'expect.preemption', (x, w) => {
            const v = obj(x, w, ['task', 'need', 'reason']);
            return { task: u32(v.task, w), need: u32(v.need, w), reason: enumValue(v.reason, w, VICTIM) };
          })
        : undefined;
      return { name, world, input: preemptionRequest(input, 'input.preemption'), expect: e };
    }
    if (world === 'lifecycle') {
      const l = obj(input, 'input.lifecycle', ['job', 'tasks', 'event']);
      if (l.event === undefined) throw new HarnessError('input.lifecycle takes job, tasks and event');
      return {
        name,
        world,
        input: { job: jobView(l.job, 'input.lifecycle.job'), tasks: list(l.tasks, 'input.lifecycle.tasks', taskView), event: event(l.event, 'input.lifecycle.event') },
        expect: expect ? list(expect[1], 'expect.lifecycle', action) : undefined,
      };
    }
    throw new HarnessError(`input: unknown world ${JSON.stringify(world)} (placement, preemption or lifecycle)`);
  } catch (e) {
    if (e instanceof HarnessError) throw new HarnessError(`scenario ${path} is not valid: ${e.message}`);
    throw e;
  }
}

/** Reads a YAML or JSON scenario file. */
export function loadScenario(path: string): Scenario {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new HarnessError(`cannot read scenario ${path}: ${(e as Error).message}`);
  }
  return parseScenario(text, path);
}

/** Loads every scenario file (`.yaml`, `.yml`, `.json`) of a directory, in name order; fails on a bad file or none at all. */
export function loadDir(dir: string): Scenario[] {
  let names: string[];
  try {
    names = readdirSync(dir)
      .filter((n) => /\.(ya?ml|json)$/.test(n))
      .sort();
  } catch (e) {
    throw new HarnessError(`cannot read scenario directory ${dir}: ${(e as Error).message}`);
  }
  if (names.length === 0) throw new HarnessError(`scenario directory ${dir}: no scenario files`);
  return names.map((n) => loadScenario(join(dir, n)));
}

const plain = (v: unknown) => JSON.stringify(v, (_, x) => (x instanceof Uint32Array ? Array.from(x) : x));

function mismatch(s: Scenario, got: unknown): never {
  throw new HarnessError(`scenario ${s.name}: expected ${plain(s.expect)}, got ${plain(got)}`);
}

function worldOf(s: Scenario, policy: string): void {
  if (s.world !== policy) throw new HarnessError(`scenario is for the ${s.world} world, the policy for ${policy}`);
}

/** Runs a placement policy natively on a scenario and checks the answer. */
export function runPlacement(policy: PlacementPolicy, s: Scenario): PlacementResult {
  worldOf(s, 'placement');
  const req = s.input as PlacementRequest;
  const d = policy.place(req);
  checkPlacement(req, d);
  const e = s.expect as ExpectedPlacement | undefined;
  if (e) {
    const pairs = (xs: Array<{ task: number; host?: number; reason?: string }>) => xs.map((x) => `${x.task}:${x.host ?? x.reason}`).sort();
    if (plain(pairs(e.assignments)) !== plain(pairs(d.assignments)) || plain(pairs(e.unplaced)) !== plain(pairs(d.unplaced))) mismatch(s, d);
  }
  return d;
}

/** Runs a preemption policy natively on a scenario and checks the answer. */
export function runPreemption(policy: PreemptionPolicy, s: Scenario): Victim[] {
  worldOf(s, 'preemption');
  const req = s.input as PreemptionRequest;
  const d = policy.selectVictims(req);
  checkVictims(req, d);
  const e = s.expect as Victim[] | undefined;
  const key = (vs: Victim[]) => vs.map((v) => `${v.task}:${v.need}`).sort().join(',');
  if (e && key(e) !== key(d)) mismatch(s, d);
  return d;
}

/** Runs a lifecycle policy natively on a scenario (`onEvent`) and checks the answer. */
export function runLifecycle(policy: LifecyclePolicy, s: Scenario): Action[] {
  worldOf(s, 'lifecycle');
  const { job, tasks, event: ev } = s.input as { job: JobView; tasks: TaskView[]; event: Event };
  const d = policy.onEvent(job, tasks, ev);
  checkActions(job, tasks, d);
  const e = s.expect as Action[] | undefined;
  if (e && plain(e) !== plain(d)) mismatch(s, d);
  return d;
}

/** `onEvents` as the component answers it (the policy's own, or the SDK's default). */
export function onEvents(policy: LifecyclePolicy, job: JobView, tasks: TaskView[], events: Event[]): Action[] {
  return policy.onEvents ? policy.onEvents(job, tasks, events) : onEventsByEvent(policy, job, tasks, events);
}
