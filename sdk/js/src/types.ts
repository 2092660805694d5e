/**
 * The request and answer types of every plugin world, derived from the
 * types jco generates from `wit/` (`generated/`, made by `npm run gen`; the
 * WIT's documentation of every field shows there).
 *
 * One change from the wire form: the WIT's `u64` fields (resources, times,
 * versions, the round number) arrive as `bigint` and are `number` here, so
 * policy code does plain arithmetic. Numbers are exact up to 2^53 - 1
 * (`Number.MAX_SAFE_INTEGER`); the component glue refuses a larger value
 * with an error rather than round it. Records are camelCase objects, enums
 * kebab-case strings, variants `{ tag, val }`, `list<u32>` a `Uint32Array`,
 * as jco maps them.
 *
 * @module
 */

/// <reference path="../generated/placement.d.ts" />
/// <reference path="../generated/preemption.d.ts" />
/// <reference path="../generated/lifecycle-batched.d.ts" />
/// <reference path="../generated/placement-gpu.d.ts" />
/// <reference path="../generated/preemption-gpu.d.ts" />

import type * as T from 'paceline:scheduler/types@0.1.3';
import type * as P from 'paceline:scheduler/placement-types@0.1.3';
import type * as Q from 'paceline:scheduler/preemption-types@0.1.3';
import type * as L from 'paceline:scheduler/lifecycle-types@0.1.3';
import type * as G from 'paceline:scheduler/gpu-placement-types@0.1.3';
import type * as GP from 'paceline:scheduler/gpu-preemption-types@0.1.3';

/** A wire type with every `bigint` turned into `number` (typed arrays, strings and enums kept). */
export type Numeric<W> = W extends bigint
  ? number
  : W extends Uint32Array | string | number | boolean | undefined
    ? W
    : W extends Array<infer U>
      ? Array<Numeric<U>>
      : { [K in keyof W]: Numeric<W[K]> };

/** An amount of each schedulable resource, in integer units (`cpuMillis`, `memoryMib`, `diskMib`, `gpus`, `ports`). */
export type Resources = Numeric<T.Resources>;

/** One host leased to a placement round: `free` and `total` resources. */
export type HostOffer = Numeric<P.HostOffer>;
/** A host attribute as a column over the request's hosts (`values[host]` is a symbol index or {@link NO_VALUE}). */
export type AttributeColumn = Numeric<P.AttributeColumn>;
/** How many tasks of one job a host already runs. */
export type HostCount = Numeric<P.HostCount>;
/** What a policy needs to know about a job in the round: `priority`, `maxPerHost` (0: none), `spreadOver`, `existing`. */
export type JobInfo = Numeric<P.JobInfo>;
/** A soft constraint: a weighted preference for hosts with an attribute value. */
export type Preference = Numeric<P.Preference>;
/** The hosts a task may run on after hard constraints: `{ tag: 'all' }` or `{ tag: 'only', val: hosts }`. */
export type HostFilter = Numeric<P.HostFilter>;
/** Constraints shared by tasks with the same needs: `eligible` hosts and soft `preferences`. */
export type ConstraintSet = Numeric<P.ConstraintSet>;
/** One task to place. Tasks sharing `gang` (contiguous) are placed whole or not at all. */
export type Task = Numeric<P.Task>;
/** One GPU device of a host: `freeMilli` (1000: wholly free) and `model` (a symbol index or {@link NO_VALUE}). */
export type GpuDevice = Numeric<G.GpuDevice>;
/** A host's GPU devices, in the host's device order (`devices`; empty without GPUs). */
export type GpuHost = Numeric<G.GpuHost>;
/** One task's GPU ask: `milli` (0 none, below 1000 a share of one device, n × 1000 whole devices) and accepted `models` (empty: any). */
export type GpuTask = Numeric<G.GpuTask>;
/** A task shape seen lately: `cpuMillis`, `memoryMib`, `milli` and a relative `weight`. */
export type TaskClass = Numeric<G.TaskClass>;
/** The devices an assigned task gets on its host: `task` and `devices` (indices into its host's devices). */
export type DeviceGrant = Numeric<G.DeviceGrant>;

/**
 * Everything a placement policy sees in one round. The GPU side (world
 * `placement-gpu`, WIT 0.1.2; `gpu-request` on the wire) is in three
 * optional fields, absent or empty when no host of the round has a GPU and
 * no task asks for one, as the Rust SDK's `gpu_*` fields:
 * - `gpuHosts`: the devices of each host, in host order;
 * - `gpuTasks`: the GPU ask of each task, in task order (`milli` 0: none);
 * - `gpuWorkload`: the task shapes the runtime has seen lately, most frequent first.
 */
export type PlacementRequest = Numeric<P.PlacementRequest> & {
  /** GPU devices per host, in host order (0.1.2). */
  gpuHosts?: GpuHost[];
  /** GPU ask per task, in task order (0.1.2). */
  gpuTasks?: GpuTask[];
  /** Task shapes seen lately, most frequent first (0.1.2). */
  gpuWorkload?: TaskClass[];
};
/** Task `task` goes to host `host`. */
export type Assignment = Numeric<P.Assignment>;
/** Why a task was not placed: `'insufficient-resources' | 'constraints-unsatisfiable' | 'max-per-host' | 'gang-incomplete' | 'deferred'`. */
export type UnplacedReason = P.UnplacedReason;
/** A task left unplaced, with the reason and a free-text detail. */
export type Unplaced = Numeric<P.Unplaced>;
/**
 * A placement answer: every task exactly once, in `assignments` or in
 * `unplaced`; `grants` (0.1.2) names the devices of assigned tasks that ask
 * for GPU (a task without one gets the runtime's default devices).
 */
export type PlacementResult = Numeric<P.PlacementResult> & {
  /** Device grants of assigned tasks that ask for GPU (0.1.2). */
  grants?: DeviceGrant[];
};

/** A resource pool as the resource manager sees it. */
export type PoolView = Numeric<Q.PoolView>;
/** A running task that could be preempted. */
export type RunningTask = Numeric<Q.RunningTask>;
/** Waiting work and the resources it needs freed (`fromPools` empty: any pool). */
export type Need = Numeric<Q.Need>;
/** A pool's GPU amounts in milli-GPUs: `reservationMilli`, `entitlementMilli`, `allocationMilli`. */
export type GpuPool = Numeric<GP.GpuPool>;

/**
 * Everything a preemption policy sees. The GPU side (world
 * `preemption-gpu`, WIT 0.1.3) is in three optional fields, each beside the
 * list of the same name, absent or empty when nothing holds or needs GPU;
 * the `gpus` fields of the request stay whole devices (a share rounded up).
 * Compare amounts in {@link inMilliGpus}.
 */
export type PreemptionRequest = Numeric<Q.PreemptionRequest> & {
  /** GPU amounts of each pool in milli-GPUs, in pool order (0.1.3). */
  gpuPools?: GpuPool[];
  /** Milli-GPUs each running task holds, in `running` order (0.1.3). */
  gpuRunning?: number[];
  /** Milli-GPUs each need must have freed, in `needs` order (0.1.3). */
  gpuNeeds?: number[];
};
/** Why a task was chosen: `'over-entitlement' | 'higher-priority' | 'revoked'`. */
export type VictimReason = Q.VictimReason;
/** A task to preempt, for a need, with a reason. */
export type Victim = Numeric<Q.Victim>;

/** The kinds of job. */
export type JobKind = L.JobKind;
/** Task states. */
export type TaskState = L.TaskState;
/** Job states. */
export type JobState = L.JobState;
/** A rolling update in progress. */
export type UpdateView = Numeric<L.UpdateView>;
/** The job as the lifecycle sees it. */
export type JobView = Numeric<L.JobView>;
/** One instance as the lifecycle sees it. */
export type TaskView = Numeric<L.TaskView>;
/** What happened to a job: `{ tag: 'job-created' }`, `{ tag: 'task-changed', val: { instance, state } }`, `{ tag: 'timer', val }`, ... */
export type Event = Numeric<L.Event>;
/** What the runtime should do: `{ tag: 'launch', val }`, `{ tag: 'restart-after', val: { instance, delayMs } }`, `{ tag: 'mark-job', val }`, ... */
export type Action = Numeric<L.Action>;

/** Marks a host that has no value for an attribute (u32::MAX). */
export const NO_VALUE = 0xffff_ffff;

/** Milli-GPUs in one device: 1000 is one whole device. */
export const DEVICE_MILLI = 1000;

/** Devices a GPU ask needs and milli-GPUs on each: `[n, 1000]` for n whole devices, `[1, share]` for a share, `[0, 0]` for none. */
export function gpuShape(ask: GpuTask): [number, number] {
  const m = ask.milli;
  if (m === 0) return [0, 0];
  if (m < DEVICE_MILLI) return [1, m];
  return [Math.floor(m / DEVICE_MILLI), DEVICE_MILLI];
}

/**
 * Whether `device` takes the ask's per-device amount with `free` milli-GPUs
 * left on it: whole devices only when wholly free, a share when it fits;
 * and of an accepted model.
 */
export function gpuTakes(ask: GpuTask, device: GpuDevice, free: number): boolean {
  const [, each] = gpuShape(ask);
  const room = each === DEVICE_MILLI ? free === DEVICE_MILLI : free >= each;
  return room && (ask.models.length === 0 || ask.models.includes(device.model));
}

/** Whether a preemption request carries its GPU side in milli-GPUs (0.1.3). */
export function hasGpuSide(r: PreemptionRequest): boolean {
  return (r.gpuPools?.length ?? 0) > 0 || (r.gpuRunning?.length ?? 0) > 0 || (r.gpuNeeds?.length ?? 0) > 0;
}

/**
 * The request with every `gpus` field in milli-GPUs, taken from the GPU
 * side: the one unit in which "enough" and "no more than needed" are right
 * for shares of a device. Without a GPU side, the request itself. A copy;
 * the request is not changed. A missing entry counts as none (the checks
 * then see less GPU, never more), as in the Rust SDK.
 */
export function inMilliGpus(r: PreemptionRequest): PreemptionRequest {
  if (!hasGpuSide(r)) return r;
  const pools = r.gpuPools ?? [];
  const running = r.gpuRunning ?? [];
  const needs = r.gpuNeeds ?? [];
  const res = (x: Resources, gpus: number): Resources => ({ ...x, gpus });
  return {
    pools: r.pools.map((p, i) => {
      const g = pools[i] ?? { reservationMilli: 0, entitlementMilli: 0, allocationMilli: 0 };
      return { ...p, reservation: res(p.reservation, g.reservationMilli), entitlement: res(p.entitlement, g.entitlementMilli), allocation: res(p.allocation, g.allocationMilli) };
    }),
    running: r.running.map((t, i) => ({ ...t, resources: res(t.resources, running[i] ?? 0) })),
    needs: r.needs.map((n, i) => ({ ...n, resources: res(n.resources, needs[i] ?? 0) })),
  };
}

/** The request as a component built before 0.1.3 sees it: without its GPU side, GPUs in whole devices. */
export function inWholeGpus(r: PreemptionRequest): PreemptionRequest {
  if (!hasGpuSide(r)) return r;
  return { pools: r.pools, running: r.running, needs: r.needs };
}

/** The version of the WIT package this SDK implements. */
export const WIT_PACKAGE = 'paceline:scheduler@0.1.3';

/** A placement policy (world `placement` or `placement-gpu`): one call per round. Must be a pure function of the request. */
export interface PlacementPolicy {
  place(request: PlacementRequest): PlacementResult;
}

/** A preemption policy (world `preemption` or `preemption-gpu`; compare amounts in {@link inMilliGpus}). */
export interface PreemptionPolicy {
  selectVictims(request: PreemptionRequest): Victim[];
}

/**
 * A job lifecycle (world `lifecycle-batched`). `onEvents` is optional: the
 * SDK's default asks `onEvent` about each event in turn, against the same
 * views, keeping the first of identical actions (as the Rust SDK does).
 */
export interface LifecyclePolicy {
  onEvent(job: JobView, tasks: TaskView[], event: Event): Action[];
  onEvents?(job: JobView, tasks: TaskView[], events: Event[]): Action[];
}
