/**
 * The Kubernetes client: objects in and out as plain objects (their JSON).
 *
 * Reads (`get`, `list`) come from the host's watch caches; writes go to the API
 * server. The host checks every call against the plugin manifest's
 * `[permissions] rules`: a call it does not grant throws {@link Denied}.
 */

import { current } from "./host";

/** A Kubernetes object as its JSON decodes (fields other than these are `any`, as JSON is). */
// biome-ignore lint/suspicious/noExplicitAny: JSON's fields, as JSON.parse types them (`obj.spec?.name` reads without a cast)
export type KubeObject = { apiVersion?: string; kind?: string; metadata?: Metadata; [field: string]: any };

/** The part of `metadata` the SDK reads. */
export interface Metadata {
  name?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  [field: string]: unknown;
}

/** One object: `namespace` is undefined for cluster-scoped kinds. */
export class ObjectRef {
  constructor(
    readonly apiVersion: string,
    readonly kind: string,
    readonly name: string,
    readonly namespace?: string,
  ) {}

  static fromObject(obj: KubeObject): ObjectRef {
    const meta = obj.metadata ?? {};
    return new ObjectRef(obj.apiVersion ?? "", obj.kind ?? "", meta.name ?? "", meta.namespace ?? undefined);
  }
}

/**
 * Why a client call failed (the contract's `client-error`). `reason` is the
 * UpperCamelCase word used in conditions and events; `retrySoon` says whether
 * retrying soon (not with back-off) is right; `terminal`, thrown out of a
 * reconcile, makes a terminal error (retrying cannot fix it). The message reads
 * as the Rust SDK's, so a condition says the same whichever language a guest is in.
 */
export class ClientError extends Error {
  readonly reason: string = "ClientError";
  readonly retrySoon: boolean = false;
  readonly terminal: boolean = false;
  /** The message without the prefix `message` starts with. */
  readonly detail: string;

  constructor(detail: string, prefix = "") {
    super(`${prefix}${detail}`);
    this.detail = detail;
    this.name = new.target.name;
  }
}

/** 404: no such object. */
export class NotFound extends ClientError {
  override readonly reason = "NotFound";
  constructor(detail = "not found") {
    super(detail);
  }
}

/** 409: stale resourceVersion, or the object already exists. Retry soon. */
export class Conflict extends ClientError {
  override readonly reason = "Conflict";
  override readonly retrySoon = true;
  constructor(detail: string) {
    super(detail, "conflict: ");
  }
}

/** The plugin manifest does not grant this call. */
export class Denied extends ClientError {
  override readonly reason = "Forbidden";
  override readonly terminal = true;
  constructor(detail: string) {
    super(detail, "denied by the plugin manifest: ");
  }
}

/** The request was rejected as invalid (400/422). */
export class Invalid extends ClientError {
  override readonly reason = "Invalid";
  override readonly terminal = true;
  constructor(detail: string) {
    super(detail, "invalid request: ");
  }
}

/** 429 (or an eviction a PodDisruptionBudget blocks). Retry soon. */
export class TooManyRequests extends ClientError {
  override readonly reason = "TooManyRequests";
  override readonly retrySoon = true;
  constructor(detail = "too many requests") {
    super(detail);
  }
}

/** The API server or the host's cache is unavailable. */
export class Unavailable extends ClientError {
  override readonly reason = "Unavailable";
  constructor(detail: string) {
    super(detail, "unavailable: ");
  }
}

/** Anything else, with the API server's message. */
export class OtherError extends ClientError {}

/** What the host returned (or what was sent) is not the JSON expected. */
export class DecodeError extends ClientError {
  override readonly reason = "DecodeError";
  override readonly terminal = true;
  constructor(detail: string) {
    super(detail, "decoding: ");
  }
}

/** `propagationPolicy` of a delete. */
export type Propagation = "Orphan" | "Background" | "Foreground";

/** Options of a delete or an eviction. */
export interface DeleteParams {
  propagation?: Propagation;
  /** The delete happens only if the object still has this uid / resourceVersion. */
  uid?: string;
  resourceVersion?: string;
  gracePeriodSeconds?: number;
}

/** A patch body and how it is interpreted: build one with the static constructors. */
export class Patch {
  private constructor(
    readonly how: "merge" | "json" | "strategic" | "apply",
    readonly body: unknown,
    readonly fieldManager = "",
    readonly force = false,
  ) {}

  /** JSON merge patch (RFC 7386). */
  static merge(body: unknown): Patch {
    return new Patch("merge", body);
  }

  /** JSON patch (RFC 6902): a list of operations. */
  static json(ops: unknown[]): Patch {
    return new Patch("json", ops);
  }

  /** Strategic merge patch (built-in kinds only). */
  static strategic(body: unknown): Patch {
    return new Patch("strategic", body);
  }

  /**
   * Server-side apply of a (partial) object owned by `fieldManager`; `force` takes
   * fields other managers own instead of a conflict. Creates the object when missing.
   */
  static apply(body: unknown, fieldManager: string, force = false): Patch {
    if (!fieldManager) throw new Invalid("a server-side apply needs a field manager");
    return new Patch("apply", body, fieldManager, force);
  }
}

export type EventType = "Normal" | "Warning";

/**
 * An events.k8s.io/v1 Event; the host fills in the reporter and times and
 * aggregates repeats into a series. `regarding` defaults to the object being
 * reconciled when recorded through `ctx.event`.
 */
export interface Event {
  type: EventType;
  reason: string;
  action: string;
  note: string;
  regarding?: ObjectRef;
  related?: ObjectRef;
}

/** Event constructors: `Events.normal("Summarised", "Reconcile", "5 keys")`. */
export const Events = {
  normal(reason: string, action: string, note = ""): Event {
    return { type: "Normal", reason, action, note };
  },
  warning(reason: string, action: string, note = ""): Event {
    return { type: "Warning", reason, action, note };
  },
};

function decode(text: string, what: string): KubeObject {
  try {
    return JSON.parse(text) as KubeObject;
  } catch (e) {
    throw new DecodeError(`${what} from the host: ${(e as Error).message}`);
  }
}

function encode(value: unknown, what: string): string {
  try {
    return JSON.stringify(value);
  } catch (e) {
    throw new DecodeError(`encoding ${what}: ${(e as Error).message}`);
  }
}

/** Which objects `list` returns. */
export interface ListOptions {
  /** Every namespace (or a cluster-scoped kind) when undefined. */
  namespace?: string;
  /** A label selector (`app=web,tier!=db`); empty selects everything. */
  labels?: string;
  /** A field selector (`metadata.name=x`). */
  fields?: string;
}

/**
 * The client of the host's own cluster. It holds nothing (the host keeps the
 * connections and caches): make one anywhere, or use `ctx.client`.
 */
export class Client {
  /** The object, from the host's cache; throws {@link NotFound}. */
  get(apiVersion: string, kind: string, name: string, namespace?: string): KubeObject {
    return decode(current().get(new ObjectRef(apiVersion, kind, name, namespace)), `${kind} ${name}`);
  }

  /** As {@link get}, with `undefined` when the object does not exist. */
  getOpt(apiVersion: string, kind: string, name: string, namespace?: string): KubeObject | undefined {
    try {
      return this.get(apiVersion, kind, name, namespace);
    } catch (e) {
      if (e instanceof NotFound) return undefined;
      throw e;
    }
  }

  /** The objects of a kind matching `options`, from the host's cache. */
  list(apiVersion: string, kind: string, options: ListOptions = {}): KubeObject[] {
    const items = current().list(apiVersion, kind, options.namespace, options.labels ?? "", options.fields);
    return items.map((i) => decode(i, `a ${kind}`));
  }

  /** Creates `obj` (its apiVersion, kind and metadata.namespace say where); returns it as stored. */
  create(obj: KubeObject): KubeObject {
    return decode(current().create(encode(obj, "the object")), "the created object");
  }

  /** Replaces `obj`; a stale metadata.resourceVersion throws {@link Conflict}. */
  update(obj: KubeObject): KubeObject {
    return decode(current().update(encode(obj, "the object")), "the updated object");
  }

  /** Patches the object (server-side apply with `Patch.apply`) and returns it as stored. */
  patch(apiVersion: string, kind: string, name: string, patch: Patch, namespace?: string): KubeObject {
    return this.patchOf(new ObjectRef(apiVersion, kind, name, namespace), patch, false);
  }

  /**
   * Patches another object's status subresource (the reconciled object's status
   * is returned in the `Action` instead).
   */
  patchStatus(apiVersion: string, kind: string, name: string, patch: Patch, namespace?: string): KubeObject {
    return this.patchOf(new ObjectRef(apiVersion, kind, name, namespace), patch, true);
  }

  private patchOf(target: ObjectRef, patch: Patch, status: boolean): KubeObject {
    const body = encode(patch.body, "the patch");
    return decode(current().patch(target, patch, body, status), "the patched object");
  }

  /** Deletes the object ({@link NotFound} when it is already gone). */
  delete(apiVersion: string, kind: string, name: string, namespace?: string, params: DeleteParams = {}): void {
    current().delete(new ObjectRef(apiVersion, kind, name, namespace), params);
  }

  /** Evicts a pod, honouring PodDisruptionBudgets ({@link TooManyRequests} when one blocks it). */
  evict(namespace: string, name: string, params: DeleteParams = {}): void {
    current().evict(namespace, name, params);
  }

  /** Records `event`, which must say what it is about (`regarding`). */
  event(event: Event): void {
    if (event.regarding === undefined) throw new Invalid("an event needs `regarding`");
    current().recordEvent(event);
  }
}

/** The largest `u64` the contract carries. */
const U64_MAX = 2n ** 64n - 1n;

/**
 * A duration in seconds as whole milliseconds, clamped to the contract's u64;
 * refuses NaN, negatives and infinity.
 */
export function millis(seconds: number): bigint {
  if (!Number.isFinite(seconds) || seconds < 0) {
    throw new RangeError(`a duration must be 0 or more seconds, not ${seconds}`);
  }
  const ms = BigInt(Math.floor(seconds * 1000));
  return ms > U64_MAX ? U64_MAX : ms;
}
