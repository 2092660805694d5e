/**
 * Component glue: turns a policy into the functions a component exports,
 * converting the wire values componentize-js hands over (`bigint` for the
 * WIT's `u64`) to the SDK's (`number`) and back.
 *
 * In a policy's entry module:
 *
 * ```ts
 * import { exportPlacement } from '@paceline/plugin-sdk';
 * import { firstFit } from './policy.ts';
 * export const place = exportPlacement(firstFit);
 * ```
 *
 * For the GPU worlds (`world = "placement-gpu"` or `"preemption-gpu"` in
 * plugin.toml), export the GPU function beside the plain one:
 *
 * ```ts
 * export const place = exportPlacement(policy);
 * export const placeGpu = exportPlacementGpu(policy);
 * ```
 *
 * @module
 */

import type * as T from 'paceline:scheduler/types@0.1.3';
import type * as P from 'paceline:scheduler/placement-types@0.1.3';
import type * as Q from 'paceline:scheduler/preemption-types@0.1.3';
import type * as L from 'paceline:scheduler/lifecycle-types@0.1.3';
import type * as G from 'paceline:scheduler/gpu-placement-types@0.1.3';
import type * as GP from 'paceline:scheduler/gpu-preemption-types@0.1.3';
import type {
  Action,
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
} from './types.ts';

/** A `u64` from the wire as a number; refuses values a double cannot hold exactly. */
export function num(v: bigint): number {
  if (v > 9007199254740991n) throw new RangeError(`value ${v} is above 2^53 - 1, the largest this SDK handles exactly`);
  return Number(v);
}

function res(r: T.Resources): Resources {
  return { cpuMillis: num(r.cpuMillis), memoryMib: num(r.memoryMib), diskMib: num(r.diskMib), gpus: num(r.gpus), ports: num(r.ports) };
}

function wireRes(r: Resources): T.Resources {
  return { cpuMillis: BigInt(r.cpuMillis), memoryMib: BigInt(r.memoryMib), diskMib: BigInt(r.diskMib), gpus: BigInt(r.gpus), ports: BigInt(r.ports) };
}

/** The SDK's placement request from the wire's. */
export function placementRequestFromWire(r: P.PlacementRequest): PlacementRequest {
  return {
    round: num(r.round),
    hosts: r.hosts.map((h) => ({ free: res(h.free), total: res(h.total) })),
    attributes: r.attributes,
    symbols: r.symbols,
    jobs: r.jobs,
    constraints: r.constraints,
    tasks: r.tasks.map((t) => ({
      job: t.job,
      instance: t.instance,
      gang: t.gang,
      demand: res(t.demand),
      constraints: t.constraints,
      preferredHost: t.preferredHost,
    })),
  };
}

function placementResultToWire(out: PlacementResult): P.PlacementResult {
  return {
    assignments: out.assignments.map((a) => ({ task: a.task, host: a.host })),
    unplaced: out.unplaced.map((u) => ({ task: u.task, reason: u.reason, detail: u.detail })),
  };
}

/** Wraps a placement policy as the `place` export. */
export function exportPlacement(policy: PlacementPolicy): (request: P.PlacementRequest) => P.PlacementResult {
  return (request) => placementResultToWire(policy.place(placementRequestFromWire(request)));
}

/** The SDK's placement request with the wire's GPU side (`gpu-request`, 0.1.2) in `gpuHosts`, `gpuTasks` and `gpuWorkload`. */
export function gpuPlacementRequestFromWire(r: P.PlacementRequest, gpu: G.GpuRequest): PlacementRequest {
  return {
    ...placementRequestFromWire(r),
    gpuHosts: gpu.hosts.map((h) => ({ devices: h.devices.map((d) => ({ freeMilli: d.freeMilli, model: d.model })) })),
    gpuTasks: gpu.tasks.map((t) => ({ milli: t.milli, models: t.models })),
    gpuWorkload: gpu.workload.map((c) => ({ cpuMillis: num(c.cpuMillis), memoryMib: num(c.memoryMib), milli: c.milli, weight: c.weight })),
  };
}

/** Wraps a placement policy as the `place-gpu` export of world `placement-gpu` (its device grants go into the answer). */
export function exportPlacementGpu(policy: PlacementPolicy): (request: P.PlacementRequest, gpu: G.GpuRequest) => G.GpuPlacementResult {
  return (request, gpu) => {
    const out = policy.place(gpuPlacementRequestFromWire(request, gpu));
    return {
      placement: placementResultToWire(out),
      grants: (out.grants ?? []).map((g) => ({ task: g.task, devices: g.devices })),
    };
  };
}

/** The SDK's preemption request from the wire's. */
export function preemptionRequestFromWire(r: Q.PreemptionRequest): PreemptionRequest {
  return {
    pools: r.pools.map((p) => ({ path: p.path, reservation: res(p.reservation), entitlement: res(p.entitlement), allocation: res(p.allocation) })),
    running: r.running.map((t) => ({
      pool: t.pool,
      priority: t.priority,
      preemptible: t.preemptible,
      revocable: t.revocable,
      startedAtMs: num(t.startedAtMs),
      resources: res(t.resources),
    })),
    needs: r.needs.map((n) => ({ pool: n.pool, priority: n.priority, resources: res(n.resources), fromPools: n.fromPools })),
  };
}

/** Wraps a preemption policy as the `select-victims` export. */
export function exportPreemption(policy: PreemptionPolicy): (request: Q.PreemptionRequest) => Q.Victim[] {
  return (request) => policy.selectVictims(preemptionRequestFromWire(request)).map((v) => ({ task: v.task, need: v.need, reason: v.reason }));
}

/** The SDK's preemption request with the wire's GPU side (`gpu-preemption-request`, 0.1.3) in `gpuPools`, `gpuRunning` and `gpuNeeds`. */
export function gpuPreemptionRequestFromWire(r: Q.PreemptionRequest, gpu: GP.GpuPreemptionRequest): PreemptionRequest {
  return {
    ...preemptionRequestFromWire(r),
    gpuPools: gpu.pools.map((p) => ({ reservationMilli: num(p.reservationMilli), entitlementMilli: num(p.entitlementMilli), allocationMilli: num(p.allocationMilli) })),
    gpuRunning: Array.from(gpu.running, num),
    gpuNeeds: Array.from(gpu.needs, num),
  };
}

/** Wraps a preemption policy as the `select-victims-gpu` export of world `preemption-gpu` (compare amounts in `inMilliGpus`). */
export function exportPreemptionGpu(policy: PreemptionPolicy): (request: Q.PreemptionRequest, gpu: GP.GpuPreemptionRequest) => Q.Victim[] {
  return (request, gpu) => policy.selectVictims(gpuPreemptionRequestFromWire(request, gpu)).map((v) => ({ task: v.task, need: v.need, reason: v.reason }));
}

/** The SDK's job view from the wire's. */
export function jobFromWire(j: L.JobView): JobView {
  const u = j.update;
  return {
    kind: j.kind,
    state: j.state,
    instanceCount: j.instanceCount,
    maxFailuresPerInstance: j.maxFailuresPerInstance,
    maxRunTimeMs: num(j.maxRunTimeMs),
    configVersion: num(j.configVersion),
    resources: res(j.resources),
    update: u === undefined ? undefined : { ...u, targetVersion: num(u.targetVersion) },
    matchingHosts: j.matchingHosts,
  };
}

/** The SDK's task views from the wire's. */
export function tasksFromWire(tasks: L.TaskView[]): TaskView[] {
  return tasks.map((t) => ({
    ...t,
    configVersion: num(t.configVersion),
    runningForMs: t.runningForMs === undefined ? undefined : num(t.runningForMs),
  }));
}

/** Wire actions from the SDK's. */
export function actionsToWire(actions: readonly Action[]): L.Action[] {
  return actions.map((a): L.Action => {
    switch (a.tag) {
      case 'restart-after':
        return { tag: 'restart-after', val: { instance: a.val.instance, delayMs: BigInt(a.val.delayMs) } };
      case 'update-batch':
        return { tag: 'update-batch', val: Uint32Array.from(a.val) };
      default:
        return a;
    }
  });
}

/** The default `onEvents`: `onEvent` per event against the same views, identical actions kept once. */
export function onEventsByEvent(policy: LifecyclePolicy, job: JobView, tasks: TaskView[], events: Event[]): Action[] {
  const seen = new Set<string>();
  const out: Action[] = [];
  for (const e of events) {
    for (const a of policy.onEvent(job, tasks, e)) {
      const key = JSON.stringify(a, (_, v) => (v instanceof Uint32Array ? Array.from(v) : v));
      if (!seen.has(key)) {
        seen.add(key);
        out.push(a);
      }
    }
  }
  return out;
}

/** Wraps a lifecycle as the `on-event` and `on-events` exports of world `lifecycle-batched`. */
export function exportLifecycle(policy: LifecyclePolicy): {
  onEvent: (job: L.JobView, tasks: L.TaskView[], event: L.Event) => L.Action[];
  onEvents: (job: L.JobView, tasks: L.TaskView[], events: L.Event[]) => L.Action[];
} {
  return {
    onEvent: (job, tasks, event) => actionsToWire(policy.onEvent(jobFromWire(job), tasksFromWire(tasks), event)),
    onEvents: (job, tasks, events) => {
      const j = jobFromWire(job);
      const t = tasksFromWire(tasks);
      return actionsToWire(policy.onEvents ? policy.onEvents(j, t, events) : onEventsByEvent(policy, j, t, events));
    },
  };
}
