/**
 * Reconcilers: `reconcile(obj, ctx) => Action`.
 *
 * The function looks at one object, acts through {@link Context}, and says what
 * the status should be and when to come back; it throws {@link TransientError}
 * (retry with back-off) or {@link TerminalError} (no retry until the object
 * changes; `Ready=False` with its reason). A `ClientError` thrown out of it
 * becomes one of those as in the Rust SDK: `Denied`, `Invalid` and `DecodeError`
 * terminal, the rest transient.
 */

import { Client, type ClientError, type Event, type KubeObject, ObjectRef } from "./client";
import { type Level, log } from "./log";

export type ConditionStatus = "True" | "False" | "Unknown";

/**
 * A condition to set (the host adds `lastTransitionTime` and `observedGeneration`
 * and folds declared conditions into `Ready`).
 */
export interface Condition {
  type: string;
  status: ConditionStatus;
  /** UpperCamelCase, e.g. `Counted`. */
  reason: string;
  message: string;
}

/** Condition constructors: `Conditions.true("Summarised", "Counted", "5 keys")`. */
export const Conditions = {
  true(type: string, reason = "", message = ""): Condition {
    return { type, status: "True", reason, message };
  },
  false(type: string, reason = "", message = ""): Condition {
    return { type, status: "False", reason, message };
  },
  unknown(type: string, reason = "", message = ""): Condition {
    return { type, status: "Unknown", reason, message };
  },
};

/** What a reconcile may write besides its decision. */
export interface Report {
  /** Status fields this reconciler owns (a JSON object, merged into `.status`). */
  status?: Record<string, unknown>;
  conditions?: Condition[];
}

/**
 * A successful reconcile: the status fields this reconciler owns, conditions to
 * set, and when to reconcile again even if nothing changes (`requeueAfter`
 * seconds; undefined: only on change).
 */
export class Action {
  private constructor(
    readonly status: Record<string, unknown> | undefined,
    readonly conditions: Condition[],
    readonly requeueAfter: number | undefined,
  ) {}

  /** Reconcile again only when the object, something it owns or watches, changes. */
  static awaitChange(report: Report = {}): Action {
    return new Action(report.status, [...(report.conditions ?? [])], undefined);
  }

  /**
   * Reconcile again after `seconds` even if nothing changes; 0 means "again soon"
   * through the host's per-object back-off.
   */
  static requeue(seconds: number, report: Report = {}): Action {
    return new Action(report.status, [...(report.conditions ?? [])], seconds);
  }
}

export type ErrorKind = "transient" | "terminal";

/** A failed reconcile; the status and conditions given are written anyway. */
export abstract class ReconcileError extends Error {
  abstract readonly kind: ErrorKind;
  readonly status: Record<string, unknown> | undefined;
  readonly conditions: Condition[];

  constructor(
    readonly reason: string,
    readonly detail = "",
    report: Report = {},
  ) {
    super(`${reason}: ${detail}`);
    this.name = new.target.name;
    this.status = report.status;
    this.conditions = [...(report.conditions ?? [])];
  }

  /** A client error as the Rust SDK maps it: terminal when retrying cannot help. */
  static fromClientError(e: ClientError): ReconcileError {
    return e.terminal ? new TerminalError(e.reason, e.message) : new TransientError(e.reason, e.message);
  }
}

/** Retrying may help: the host retries with back-off. */
export class TransientError extends ReconcileError {
  readonly kind = "transient";
}

/** Retrying will not help until the object changes. */
export class TerminalError extends ReconcileError {
  readonly kind = "terminal";
}

/** What a finalize step achieved: {@link Finalize.done}, or call again after a while. */
export class Finalize {
  private constructor(readonly retryAfter: number | undefined) {}

  static done(): Finalize {
    return new Finalize(undefined);
  }

  /** Call `finalize` again after `seconds`. */
  static retry(seconds: number): Finalize {
    return new Finalize(seconds);
  }
}

/** What a reconcile can reach: `ctx.client`, events about the object, logs. */
export class Context {
  readonly client = new Client();

  constructor(readonly object: ObjectRef) {}

  static forObject(obj: KubeObject): Context {
    return new Context(ObjectRef.fromObject(obj));
  }

  /** Records an Event, about the object being reconciled unless it says otherwise. */
  event(event: Event): void {
    this.client.event({ ...event, regarding: event.regarding ?? this.object });
  }

  log(level: Level, message: string, fields: Record<string, unknown> = {}): void {
    log(level, message, fields);
  }

  debug(message: string, fields: Record<string, unknown> = {}): void {
    log("debug", message, fields);
  }

  info(message: string, fields: Record<string, unknown> = {}): void {
    log("info", message, fields);
  }

  warn(message: string, fields: Record<string, unknown> = {}): void {
    log("warn", message, fields);
  }

  error(message: string, fields: Record<string, unknown> = {}): void {
    log("error", message, fields);
  }
}
