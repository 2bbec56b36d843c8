/**
 * Exports a reconciler: {@link defineReconciler} makes the object the component exports
 * as the contract's `reconciler` interface (`export const reconciler = ...` in the
 * app module; componentize-js binds it by that name).
 *
 * The translation (decode the object, call, encode the outcome) is plain
 * TypeScript ({@link runReconcile}, {@link runFinalize}, and the wire values of
 * the generated types), so all of it runs under `node --test` too.
 */

import { ClientError, type KubeObject, millis } from "./client";
import { Action, type Condition, Context, type ErrorKind, Finalize, ReconcileError, TerminalError } from "./reconciler";

/** A reconcile's result as the contract carries it (JSON status, milliseconds). */
export interface Outcome {
  status: string | undefined;
  conditions: Condition[];
  requeueAfterMs: bigint | undefined;
}

/** A failed reconcile or finalize as the contract carries it. */
export interface Failure {
  failed: true;
  kind: ErrorKind;
  reason: string;
  message: string;
  status: string | undefined;
  conditions: Condition[];
}

export type ReconcileFn = (obj: KubeObject, ctx: Context) => Action;
export type FinalizeFn = (obj: KubeObject, ctx: Context) => Finalize;

function statusJson(status: unknown): string | undefined {
  if (status === undefined || status === null) return undefined;
  if (typeof status !== "object" || Array.isArray(status)) {
    throw new TerminalError("InvalidStatus", `the reconciler's status must be an object, not ${Array.isArray(status) ? "an array" : typeof status}`);
  }
  try {
    return JSON.stringify(status);
  } catch (e) {
    throw new TerminalError("InvalidStatus", `the reconciler's status did not serialise: ${(e as Error).message}`);
  }
}

function failure(e: unknown): Failure {
  if (e instanceof ClientError) return failure(ReconcileError.fromClientError(e));
  if (e instanceof ReconcileError) {
    let status: string | undefined;
    try {
      status = statusJson(e.status);
    } catch (bad) {
      return failure(bad);
    }
    return { failed: true, kind: e.kind, reason: e.reason, message: e.detail, status, conditions: e.conditions };
  }
  // Anything else is a bug in the reconciler: reported for this object and retried
  // with back-off, as a Rust guest's panic is.
  const what = e instanceof Error ? `${e.name}: ${e.message}` : `thrown ${typeof e}: ${String(e)}`;
  return { failed: true, kind: "transient", reason: "UncaughtException", message: what, status: undefined, conditions: [] };
}

function decodeObject(obj: string): KubeObject {
  let value: unknown;
  try {
    value = JSON.parse(obj);
  } catch (e) {
    throw new TerminalError("InvalidObject", `the object is not JSON: ${(e as Error).message}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new TerminalError("InvalidObject", "the object is not a JSON object");
  }
  return value as KubeObject;
}

function duration(seconds: number, what: string): bigint {
  try {
    return millis(seconds);
  } catch (e) {
    throw new TerminalError(what, (e as Error).message);
  }
}

/** An `async` reconcile or finalize: refused, naming why (the contract's calls are synchronous). */
function refuseAsync(value: unknown, fn: "reconcile" | "finalize", reason: string): void {
  if (typeof (value as { then?: unknown } | null)?.then === "function") {
    throw new TerminalError(reason, `${fn} returned a Promise: wasmlet calls it synchronously (the client's calls are synchronous too)`);
  }
}

/** Decodes `obj`, calls `fn` and encodes what it returned or threw. */
export function runReconcile(fn: ReconcileFn, obj: string): Outcome | Failure {
  try {
    const value = decodeObject(obj);
    const action = fn(value, Context.forObject(value));
    refuseAsync(action, "reconcile", "InvalidAction");
    if (!(action instanceof Action)) {
      throw new TerminalError("InvalidAction", `reconcile returned ${typeof action}, not a wasmlet Action`);
    }
    const requeue = action.requeueAfter === undefined ? undefined : duration(action.requeueAfter, "InvalidAction");
    return { status: statusJson(action.status), conditions: [...action.conditions], requeueAfterMs: requeue };
  } catch (e) {
    return failure(e);
  }
}

/** The finalize call: undefined when done, milliseconds to wait, or a failure. */
export function runFinalize(fn: FinalizeFn | undefined, obj: string): bigint | undefined | Failure {
  if (fn === undefined) return undefined;
  try {
    const value = decodeObject(obj);
    const result = fn(value, Context.forObject(value));
    refuseAsync(result, "finalize", "InvalidFinalize");
    if (!(result instanceof Finalize)) {
      throw new TerminalError("InvalidFinalize", `finalize returned ${typeof result}, not a wasmlet Finalize`);
    }
    return result.retryAfter === undefined ? undefined : duration(result.retryAfter, "InvalidFinalize");
  } catch (e) {
    return failure(e);
  }
}

export function isFailure(r: unknown): r is Failure {
  return typeof r === "object" && r !== null && (r as Failure).failed === true;
}

// --- the contract's wire values (as jco's generated types spell them) -------------

type WireStatus = "true" | "false" | "unknown";
interface WireCondition {
  type: string;
  status: WireStatus;
  reason: string;
  message: string;
}
/** `reconcile-outcome`. */
export interface WireOutcome {
  status?: string;
  conditions: WireCondition[];
  requeueAfterMs?: bigint;
}
/** `reconcile-error`. */
export interface WireError {
  kind: ErrorKind;
  reason: string;
  message: string;
  status?: string;
  conditions: WireCondition[];
}
/** `finalize-outcome`. */
export type WireFinalize = { tag: "done" } | { tag: "retry-after-ms"; val: bigint };

/** The contract's `reconciler` interface, as componentize-js binds an export. */
export interface ReconcilerExport {
  declaredConditions(): string[];
  reconcile(obj: string): WireOutcome;
  finalize(obj: string): WireFinalize;
}

/**
 * How componentize-js returns `err` from an export: a thrown value with the
 * error record as `payload`.
 */
export class WireFailure extends Error {
  constructor(readonly payload: WireError) {
    super(`${payload.kind} error ${payload.reason}: ${payload.message}`);
  }
}

const STATUS: Record<Condition["status"], WireStatus> = { True: "true", False: "false", Unknown: "unknown" };

function wireConditions(cs: Condition[]): WireCondition[] {
  return cs.map((c) => ({ type: c.type, status: STATUS[c.status] ?? "unknown", reason: c.reason ?? "", message: c.message ?? "" }));
}

function wireError(f: Failure): WireFailure {
  return new WireFailure({ kind: f.kind, reason: f.reason, message: f.message, status: f.status, conditions: wireConditions(f.conditions) });
}

export interface ReconcilerOptions {
  /** Runs while the manifest's finalizer holds a deleted object. */
  finalize?: FinalizeFn;
  /** The condition types `reconcile` reports (the host starts them at Unknown and folds them into `Ready`). */
  conditions?: string[];
}

/** The export: bind it as `export const reconciler = defineReconciler(reconcile, {...})` in the app module. */
export function defineReconciler(reconcile: ReconcileFn, options: ReconcilerOptions = {}): ReconcilerExport {
  const declared = [...(options.conditions ?? [])].map(String);
  return {
    declaredConditions: () => [...declared],
    reconcile(obj: string): WireOutcome {
      const r = runReconcile(reconcile, obj);
      if (isFailure(r)) throw wireError(r);
      return { status: r.status, conditions: wireConditions(r.conditions), requeueAfterMs: r.requeueAfterMs };
    },
    finalize(obj: string): WireFinalize {
      const r = runFinalize(options.finalize, obj);
      if (isFailure(r)) throw wireError(r);
      return r === undefined ? { tag: "done" } : { tag: "retry-after-ms", val: r };
    },
  };
}
