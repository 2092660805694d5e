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

import type * as T from 'paceline:scheduler/types@0.1.3';
import type * as P from 'paceline:scheduler/placement-types@0.1.3';
import type * as Q from 'paceline:scheduler/preemption-types@0.1.3';
import type * as L from 'paceline:scheduler/lifecycle-types@0.1.3';

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
/** Everything a placement policy sees in one round. */
export type PlacementRequest = Numeric<P.PlacementRequest>;
/** Task `task` goes to host `host`. */
export type Assignment = Numeric<P.Assignment>;
/** Why a task was not placed: `'insufficient-resources' | 'constraints-unsatisfiable' | 'max-per-host' | 'gang-incomplete' | 'deferred'`. */
export type UnplacedReason = P.UnplacedReason;
/** A task left unplaced, with the reason and a free-text detail. */
export type Unplaced = Numeric<P.Unplaced>;
/** A placement answer: every task exactly once, in `assignments` or in `unplaced`. */
export type PlacementResult = Numeric<P.PlacementResult>;

/** A resource pool as the resource manager sees it. */
export type PoolView = Numeric<Q.PoolView>;
/** A running task that could be preempted. */
export type RunningTask = Numeric<Q.RunningTask>;
/** Waiting work and the resources it needs freed (`fromPools` empty: any pool). */
export type Need = Numeric<Q.Need>;
/** Everything a preemption policy sees. */
export type PreemptionRequest = Numeric<Q.PreemptionRequest>;
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

/** The version of the WIT package this SDK implements. */
export const WIT_PACKAGE = 'paceline:scheduler@0.1.3';

/** A placement policy (world `placement`): one call per round. Must be a pure function of the request. */
export interface PlacementPolicy {
  place(request: PlacementRequest): PlacementResult;
}

/** A preemption policy (world `preemption`). */
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
