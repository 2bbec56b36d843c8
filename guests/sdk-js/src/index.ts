/**
 * wasmlet SDK for TypeScript: write wasmlet reconcilers in TypeScript.
 *
 * A reconciler is one function, `reconcile(obj, ctx)`, over the object's JSON; it
 * returns an {@link Action} (status, conditions, when to come back) or throws a
 * {@link TransientError} / {@link TerminalError}. The app module exports it as the
 * contract's `reconciler` interface:
 *
 * ```ts
 * import { Action, Conditions, type Context, type KubeObject, defineReconciler } from "wasmlet";
 *
 * function reconcile(obj: KubeObject, ctx: Context): Action {
 *   const maps = ctx.client.list("v1", "ConfigMap", { namespace: ctx.object.namespace });
 *   return Action.awaitChange({
 *     status: { configMaps: maps.length },
 *     conditions: [Conditions.true("Summarised", "Counted", `${maps.length} maps`)],
 *   });
 * }
 *
 * export const reconciler = defineReconciler(reconcile, { conditions: ["Summarised"] });
 * ```
 *
 * The same shape as the Rust SDK (`guests/sdk`) and the Python one
 * (`guests/sdk-python`): the host owns the loop around the function (caches,
 * queue, retries, finalizer, `observedGeneration`, `Ready`, status written only on
 * change). Natively (`node --test`) the calls go to `FakeHost` from
 * `wasmlet/testing`; inside the component, to the host's imports.
 */

export {
  Client,
  ClientError,
  Conflict,
  DecodeError,
  type DeleteParams,
  Denied,
  type Event,
  Events,
  type EventType,
  Invalid,
  type KubeObject,
  type ListOptions,
  type Metadata,
  NotFound,
  ObjectRef,
  OtherError,
  Patch,
  type Propagation,
  TooManyRequests,
  Unavailable,
} from "./client";
export { type Failure, type Outcome, defineReconciler, type ReconcilerExport, type ReconcilerOptions, runFinalize, runReconcile, isFailure } from "./export";
export { enabled, type Level, log } from "./log";
export {
  Action,
  type Condition,
  Conditions,
  type ConditionStatus,
  Context,
  type ErrorKind,
  Finalize,
  ReconcileError,
  type Report,
  TerminalError,
  TransientError,
} from "./reconciler";
