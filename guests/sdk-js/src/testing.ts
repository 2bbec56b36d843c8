/**
 * A fake host for unit-testing reconcilers natively (`node --test`, no wasm).
 *
 * ```ts
 * import { FakeHost } from "wasmlet/testing";
 *
 * test("counts", () => {
 *   const host = new FakeHost();
 *   host.insert({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "a", namespace: "ns" }, data: { k: "v" } });
 *   const action = host.run(() => reconcile(obj, Context.forObject(obj)));
 *   assert.deepEqual(action.status, { ... });
 *   assert.deepEqual(host.events(), [["Normal", "Summarised", "..."]]);
 * });
 * ```
 *
 * What it models, as the Rust and Python SDKs' fakes do: an object store with
 * get/list (label selectors with `=`, `==`, `!=`, `key`, `!key`; field selectors
 * on dotted paths such as `metadata.name`), create/update with resourceVersion
 * conflicts, merge patches (apply and strategic patches applied as merge
 * patches, an apply creating a missing object; JSON patches refused), delete and
 * evict, plus recorded events, logs and writes. Kinds marked with
 * {@link FakeHost.deny} throw `Denied`, as a manifest that does not grant them would.
 */

import * as c from "./client";
import { type Host, install } from "./host";
import { LEVELS, type Level } from "./log";

type Key = string;

function keyOf(apiVersion: string, kind: string, namespace: string | undefined, name: string): Key {
  return JSON.stringify([apiVersion, kind, namespace ?? null, name]);
}

function objectKey(obj: c.KubeObject): Key | undefined {
  const meta = obj.metadata ?? {};
  if (!obj.apiVersion || !obj.kind || !meta.name) return undefined;
  return keyOf(obj.apiVersion, obj.kind, meta.namespace, meta.name);
}

function clone<T>(v: T): T {
  return JSON.parse(JSON.stringify(v)) as T;
}

/** Whether `labels` satisfies `selector` (equality- and existence-based terms). */
export function labelsMatch(selector: string, labels: Record<string, string>): boolean {
  for (const raw of selector.split(",")) {
    const term = raw.trim();
    if (!term) continue;
    let ok: boolean;
    if (term.includes("!=")) {
      const [k, v] = split(term, "!=");
      ok = labels[k] !== v;
    } else if (term.includes("=")) {
      const [k, v] = split(term.replace("==", "="), "=");
      ok = labels[k] === v;
    } else if (term.startsWith("!")) {
      ok = !(term.slice(1).trim() in labels);
    } else {
      ok = term in labels;
    }
    if (!ok) return false;
  }
  return true;
}

function split(term: string, sep: string): [string, string] {
  const at = term.indexOf(sep);
  return [term.slice(0, at).trim(), term.slice(at + sep.length).trim()];
}

/** Whether `obj` satisfies a field selector over dotted paths. */
export function fieldsMatch(selector: string, obj: c.KubeObject): boolean {
  for (const raw of selector.split(",")) {
    const term = raw.trim();
    if (!term) continue;
    let path: string;
    let want: string;
    let equal: boolean;
    if (term.includes("!=")) {
      [path, want] = split(term, "!=");
      equal = false;
    } else if (term.includes("=")) {
      [path, want] = split(term.replace("==", "="), "=");
      equal = true;
    } else {
      return false;
    }
    let have: unknown = obj;
    for (const part of path.split(".")) {
      have = typeof have === "object" && have !== null ? (have as Record<string, unknown>)[part] : undefined;
    }
    if (((typeof have === "string" ? have : "") === want) !== equal) return false;
  }
  return true;
}

/** RFC 7386 JSON merge patch; returns the merged value. */
export function merge(target: unknown, patch: unknown): unknown {
  if (typeof patch !== "object" || patch === null || Array.isArray(patch)) return clone(patch);
  const out: Record<string, unknown> =
    typeof target === "object" && target !== null && !Array.isArray(target) ? { ...(target as Record<string, unknown>) } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = merge(out[k], v);
  }
  return out;
}

/** An in-memory stand-in for the wasmlet host. */
export class FakeHost implements Host {
  readonly objects = new Map<Key, c.KubeObject>();
  private readonly denied = new Set<string>();
  private readonly recorded: c.Event[] = [];
  private readonly records: [Level, string, Record<string, string>][] = [];
  private readonly writeLog: string[] = [];
  private version = 0;
  /** The level below which log records are dropped (as the host's filter would). */
  logLevel: Level = "trace";

  // --- setting up and looking back --------------------------------------------------

  /** Puts `obj` into the store (as if the cache had it), with a resourceVersion. */
  insert(obj: c.KubeObject): void {
    const key = objectKey(obj);
    if (key === undefined) throw new Error("the object needs apiVersion, kind and metadata.name");
    const copy = clone(obj);
    this.bump(copy);
    this.objects.set(key, copy);
  }

  /** The stored object, or undefined. */
  object(apiVersion: string, kind: string, name: string, namespace?: string): c.KubeObject | undefined {
    const obj = this.objects.get(keyOf(apiVersion, kind, namespace, name));
    return obj === undefined ? undefined : clone(obj);
  }

  /** Calls on `kind` (e.g. `"Secret"`) throw `Denied` from now on. */
  deny(kind: string): void {
    this.denied.add(kind);
  }

  /** Events recorded so far, as `[type, reason, note]`. */
  events(): [string, string, string][] {
    return this.recorded.map((e) => [e.type, e.reason, e.note]);
  }

  /** Events recorded so far, whole (with `regarding` and `action`). */
  recordedEvents(): c.Event[] {
    return [...this.recorded];
  }

  /** Log records so far, as `[level, message]`. */
  logs(): [Level, string][] {
    return this.records.map(([l, m]) => [l, m]);
  }

  /** Each log record's fields, in order. */
  logFields(): Record<string, string>[] {
    return this.records.map(([, , f]) => ({ ...f }));
  }

  /** Writes so far, as `"verb Kind namespace/name"`. */
  writes(): string[] {
    return [...this.writeLog];
  }

  /** Routes the SDK's calls to this fake while `f` runs; returns what `f` returned. */
  run<T>(f: () => T): T {
    const previous = install(this);
    try {
      return f();
    } finally {
      install(previous);
    }
  }

  // --- helpers ------------------------------------------------------------------------

  private check(kind: string, verb: string): void {
    if (this.denied.has(kind)) throw new c.Denied(`${verb} ${kind}`);
  }

  private record(verb: string, kind: string, namespace: string | undefined, name: string): void {
    this.writeLog.push(`${verb} ${kind} ${namespace ? `${namespace}/` : ""}${name}`);
  }

  private bump(obj: c.KubeObject): void {
    this.version += 1;
    obj.metadata ??= {};
    obj.metadata.resourceVersion = String(this.version);
    obj.metadata.uid ??= `uid-${this.version}`;
  }

  private static parse(text: string): c.KubeObject {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (e) {
      throw new c.Invalid((e as Error).message);
    }
    if (typeof value !== "object" || value === null || Array.isArray(value)) throw new c.Invalid("not a JSON object");
    return value as c.KubeObject;
  }

  // --- the Host interface ---------------------------------------------------------------

  get(target: c.ObjectRef): string {
    this.check(target.kind, "get");
    const obj = this.objects.get(keyOf(target.apiVersion, target.kind, target.namespace, target.name));
    if (obj === undefined) throw new c.NotFound();
    return JSON.stringify(obj);
  }

  list(apiVersion: string, kind: string, namespace: string | undefined, labelSelector: string, fieldSelector: string | undefined): string[] {
    this.check(kind, "list");
    return [...this.objects.entries()]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([, obj]) => obj)
      .filter(
        (obj) =>
          obj.apiVersion === apiVersion &&
          obj.kind === kind &&
          (namespace === undefined || obj.metadata?.namespace === namespace) &&
          labelsMatch(labelSelector, obj.metadata?.labels ?? {}) &&
          (!fieldSelector || fieldsMatch(fieldSelector, obj)),
      )
      .map((obj) => JSON.stringify(obj));
  }

  create(text: string): string {
    const value = FakeHost.parse(text);
    const key = objectKey(value);
    if (key === undefined) throw new c.Invalid("missing apiVersion, kind or name");
    this.check(value.kind as string, "create");
    if (this.objects.has(key)) throw new c.Conflict(`${value.kind} ${value.metadata?.name} already exists`);
    this.bump(value);
    this.record("create", value.kind as string, value.metadata?.namespace, value.metadata?.name as string);
    this.objects.set(key, value);
    return JSON.stringify(value);
  }

  update(text: string): string {
    const value = FakeHost.parse(text);
    const key = objectKey(value);
    if (key === undefined) throw new c.Invalid("missing apiVersion, kind or name");
    this.check(value.kind as string, "update");
    const current = this.objects.get(key);
    if (current === undefined) throw new c.NotFound();
    const rv = value.metadata?.resourceVersion;
    if (rv !== undefined && rv !== current.metadata?.resourceVersion) throw new c.Conflict("resourceVersion is stale");
    this.bump(value);
    this.record("update", value.kind as string, value.metadata?.namespace, value.metadata?.name as string);
    this.objects.set(key, value);
    return JSON.stringify(value);
  }

  patch(target: c.ObjectRef, patch: c.Patch, body: string, status: boolean): string {
    this.check(target.kind, "patch");
    if (patch.how === "json") throw new c.Invalid("the fake host does not apply JSON patches");
    const key = keyOf(target.apiVersion, target.kind, target.namespace, target.name);
    const current = this.objects.get(key);
    // Server-side apply creates what is missing, as the API server does.
    const creates = current === undefined && !status && patch.how === "apply";
    if (current === undefined && !creates) throw new c.NotFound();
    const base: c.KubeObject = current ?? {
      apiVersion: target.apiVersion,
      kind: target.kind,
      metadata: { name: target.name, namespace: target.namespace },
    };
    const value = JSON.parse(body) as c.KubeObject | null;
    const obj = (status ? merge(base, { status: value?.status ?? null }) : merge(base, value)) as c.KubeObject;
    obj.metadata ??= {};
    if (obj.metadata.namespace === undefined || obj.metadata.namespace === null) delete obj.metadata.namespace;
    this.bump(obj);
    this.record(status ? "patch-status" : creates ? "apply-create" : "patch", target.kind, target.namespace, target.name);
    this.objects.set(key, obj);
    return JSON.stringify(obj);
  }

  delete(target: c.ObjectRef, params: c.DeleteParams): void {
    this.check(target.kind, "delete");
    const key = keyOf(target.apiVersion, target.kind, target.namespace, target.name);
    const current = this.objects.get(key);
    if (current === undefined) throw new c.NotFound();
    const meta = current.metadata ?? {};
    if (params.uid !== undefined && params.uid !== meta.uid) throw new c.Conflict(`precondition failed: uid is ${meta.uid}`);
    if (params.resourceVersion !== undefined && params.resourceVersion !== meta.resourceVersion) {
      throw new c.Conflict(`precondition failed: resourceVersion is ${meta.resourceVersion}`);
    }
    this.objects.delete(key);
    this.record("delete", target.kind, target.namespace, target.name);
  }

  evict(namespace: string, name: string, _params: c.DeleteParams): void {
    this.check("Pod", "evict");
    if (!this.objects.delete(keyOf("v1", "Pod", namespace, name))) throw new c.NotFound();
    this.record("evict", "Pod", namespace, name);
  }

  recordEvent(event: c.Event): void {
    this.recorded.push({ ...event });
  }

  logEnabled(level: Level): boolean {
    return LEVELS.indexOf(level) >= LEVELS.indexOf(this.logLevel);
  }

  log(level: Level, message: string, fields: [string, string][]): void {
    if (this.logEnabled(level)) this.records.push([level, message, Object.fromEntries(fields)]);
  }
}
