/**
 * `@paceline/plugin-sdk`: write Paceline scheduling policies in TypeScript
 * or JavaScript and ship them as WebAssembly components built with
 * componentize-js.
 *
 * | world | interface | export helper | decides |
 * |---|---|---|---|
 * | `placement` | {@link PlacementPolicy} | {@link exportPlacement} | which host each task of a round goes to |
 * | `placement-gpu` | {@link PlacementPolicy} | {@link exportPlacement} and {@link exportPlacementGpu} | the same, GPU devices and shares included |
 * | `preemption` | {@link PreemptionPolicy} | {@link exportPreemption} | which running tasks to stop |
 * | `preemption-gpu` | {@link PreemptionPolicy} | {@link exportPreemption} and {@link exportPreemptionGpu} | the same, GPU in milli-GPUs |
 * | `lifecycle-batched` | {@link LifecyclePolicy} | {@link exportLifecycle} | how a job kind reacts to events |
 *
 * Layout: `types` (the world types, generated from `wit/` by jco, `u64` as
 * `number`), `resources` (arithmetic and integer scores), `placement` (a
 * round's working state and gangs), `validate` (the host's checks),
 * `component` (the glue to the component's exports). The native harness,
 * which reads scenario files with Node, is a module of its own:
 * `@paceline/plugin-sdk/harness` (`src/harness.ts`), so that a component
 * never bundles it.
 *
 * The SDK's version follows the WIT package it implements (0.1.3); its
 * helpers break ties as the Rust SDK's do, so a ported policy decides the same.
 *
 * @module
 */

export * from './types.ts';
export * from './resources.ts';
export * from './placement.ts';
export * from './validate.ts';
export { exportLifecycle, exportPlacement, exportPlacementGpu, exportPreemption, exportPreemptionGpu, onEventsByEvent } from './component.ts';
