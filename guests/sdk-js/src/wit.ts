/**
 * The component side: the SDK's {@link Host} onto the contract's imports (the
 * modules `wasmlet:plugin/...@0.1.0` componentize-js binds; their types come from
 * `jco guest-types` at build time). Only the component's entry module imports
 * this file, so native tests never need the bindings.
 */

import * as wc from "wasmlet:plugin/client@0.1.0";
import * as wl from "wasmlet:plugin/log@0.1.0";
import * as c from "./client";
import type { Host } from "./host";
import type { Level } from "./log";

/** A `client-error` as componentize-js throws it from an import: the variant as `payload`. */
function rethrow(e: unknown): never {
  const err = (e as { payload?: wc.ClientError } | null)?.payload;
  if (err === undefined) throw e;
  switch (err.tag) {
    case "not-found":
      throw new c.NotFound();
    case "too-many-requests":
      throw new c.TooManyRequests();
    case "conflict":
      throw new c.Conflict(err.val);
    case "denied":
      throw new c.Denied(err.val);
    case "invalid":
      throw new c.Invalid(err.val);
    case "unavailable":
      throw new c.Unavailable(err.val);
    default:
      throw new c.OtherError(String((err as { val?: unknown }).val ?? err.tag));
  }
}

function call<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    rethrow(e);
  }
}

function ref(r: c.ObjectRef): wc.ObjectRef {
  return { apiVersion: r.apiVersion, kind: r.kind, namespace: r.namespace, name: r.name };
}

function patchType(p: c.Patch): wc.PatchType {
  if (p.how === "apply") return { tag: "apply", val: { fieldManager: p.fieldManager, force: p.force } };
  return { tag: p.how };
}

const PROPAGATION: Record<c.Propagation, wc.Propagation> = {
  Orphan: "orphan",
  Background: "background",
  Foreground: "foreground",
};

function deleteOptions(p: c.DeleteParams): wc.DeleteOptions {
  const pre = p.uid !== undefined || p.resourceVersion !== undefined ? { uid: p.uid, resourceVersion: p.resourceVersion } : undefined;
  return {
    propagation: p.propagation ? PROPAGATION[p.propagation] : undefined,
    preconditions: pre,
    gracePeriodSeconds: p.gracePeriodSeconds,
  };
}

/** The host's imports, throwing `ClientError` subclasses. */
export const witHost: Host = {
  get: (target) => call(() => wc.get(ref(target))),
  list: (apiVersion, kind, namespace, labelSelector, fieldSelector) =>
    call(() => wc.list({ apiVersion, kind }, { namespace, labelSelector, fieldSelector })),
  create: (obj) => call(() => wc.create(obj)),
  update: (obj) => call(() => wc.update(obj)),
  patch: (target, patch, body, status) =>
    call(() => (status ? wc.patchStatus : wc.patch)(ref(target), patchType(patch), body)),
  delete: (target, params) => call(() => wc.delete(ref(target), deleteOptions(params))),
  evict: (namespace, name, params) => call(() => wc.evict(namespace, name, deleteOptions(params))),
  recordEvent: (event) =>
    call(() =>
      wc.recordEvent({
        type: event.type === "Warning" ? "warning" : "normal",
        reason: event.reason,
        action: event.action,
        note: event.note,
        regarding: ref(event.regarding as c.ObjectRef),
        related: event.related ? ref(event.related) : undefined,
      }),
    ),
  logEnabled: (level: Level) => wl.enabled(level),
  log: (level: Level, message, fields) => wl.log(level, message, fields),
};
