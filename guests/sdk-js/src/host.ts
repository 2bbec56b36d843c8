/**
 * Where the SDK's calls go: the host's imports inside the component, or a fake.
 *
 * The SDK talks to one {@link Host} (plain values in and out; JSON as strings, as
 * the contract carries it). Inside the component that is the bindings of `wit/`
 * (`wit.ts`, installed by the build's entry module, so native tests need no wasm);
 * under test it is whatever `FakeHost.install()` put in place.
 */

import type { DeleteParams, Event, ObjectRef, Patch } from "./client";
import type { Level } from "./log";

/** The contract's `client` and `log` imports, in SDK terms. Errors are thrown as `ClientError`s. */
export interface Host {
  get(target: ObjectRef): string;
  list(apiVersion: string, kind: string, namespace: string | undefined, labelSelector: string, fieldSelector: string | undefined): string[];
  create(obj: string): string;
  update(obj: string): string;
  patch(target: ObjectRef, patch: Patch, body: string, status: boolean): string;
  delete(target: ObjectRef, params: DeleteParams): void;
  evict(namespace: string, name: string, params: DeleteParams): void;
  recordEvent(event: Event): void;
  logEnabled(level: Level): boolean;
  log(level: Level, message: string, fields: [string, string][]): void;
}

let installed: Host | undefined;

/** The installed host; natively, without a `FakeHost` installed, an error saying so. */
export function current(): Host {
  if (installed === undefined) {
    throw new Error("no wasmlet host: natively, install a FakeHost from \"wasmlet/testing\" first");
  }
  return installed;
}

/** Makes `host` the current one; returns the one it replaced. */
export function install(host: Host | undefined): Host | undefined {
  const previous = installed;
  installed = host;
  return previous;
}
