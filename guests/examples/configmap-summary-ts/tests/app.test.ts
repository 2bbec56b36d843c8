// Native unit tests of the reconciler against FakeHost (node --test, no wasm).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { Context, type KubeObject } from "wasmlet";
import { FakeHost } from "wasmlet/testing";
import { reconcile, reconciler, SUMMARY_LABEL } from "../app";

const here = join(import.meta.dirname, "..");

function summary(name: string, prefix?: string, namespace: string | undefined = "ns"): KubeObject {
  return {
    apiVersion: "examples.wasmlet.dev/v1",
    kind: "ConfigSummary",
    metadata: namespace ? { name, namespace } : { name },
    spec: prefix ? { keyPrefix: prefix } : {},
  };
}

function configMap(name: string, summaryName: string, keys: string[]): KubeObject {
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name, namespace: "ns", labels: { [SUMMARY_LABEL]: summaryName } },
    data: Object.fromEntries(keys.map((k) => [k, "v"])),
  };
}

test("counts labelled keys and sets the condition", () => {
  const host = new FakeHost();
  host.insert(configMap("a", "s1", ["x", "y"]));
  host.insert(configMap("b", "s1", ["app.z"]));
  host.insert(configMap("c", "s2", ["w"]));
  host.run(() => {
    let obj = summary("s1");
    let action = reconcile(obj, Context.forObject(obj));
    assert.deepEqual(action.status, { keys: 3, configMaps: 2 });
    assert.deepEqual(action.conditions.map((c) => [c.type, c.status, c.reason]), [["Summarised", "True", "Counted"]]);
    assert.equal(action.requeueAfter, undefined);

    obj = summary("s1", "app.");
    action = reconcile(obj, Context.forObject(obj));
    assert.deepEqual(action.status, { keys: 1, configMaps: 2 });
  });
  assert.deepEqual(host.logs(), [["debug", "summarised"], ["debug", "summarised"]]);
  assert.deepEqual(host.logFields()[0], { configMaps: "2", keys: "3" });
  assert.deepEqual(host.writes(), []);
});

test("the export speaks the contract: JSON status, the condition, no requeue", () => {
  const host = new FakeHost();
  host.insert(configMap("a", "s1", ["x"]));
  const out = host.run(() => reconciler.reconcile(JSON.stringify(summary("s1"))));
  assert.deepEqual(JSON.parse(out.status ?? "null"), { keys: 1, configMaps: 1 });
  assert.deepEqual(out.conditions, [
    { type: "Summarised", status: "true", reason: "Counted", message: "1 keys in 1 ConfigMaps labelled wasmlet.dev/summary=s1" },
  ]);
  assert.equal(out.requeueAfterMs, undefined);
  assert.deepEqual(reconciler.declaredConditions(), ["Summarised"]);
});

test("a summary outside a namespace is a terminal error", () => {
  const err = new FakeHost().run(() => thrown(() => reconciler.reconcile(JSON.stringify(summary("x", undefined, "")))));
  assert.deepEqual([err.kind, err.reason], ["terminal", "NotNamespaced"]);
});

test("denied listing is terminal, as in the Rust SDK", () => {
  const host = new FakeHost();
  host.deny("ConfigMap");
  const err = host.run(() => thrown(() => reconciler.reconcile(JSON.stringify(summary("x")))));
  assert.deepEqual([err.kind, err.reason, err.message], ["terminal", "Forbidden", "denied by the plugin manifest: list ConfigMap"]);
});

test("ships the Rust example's CRD", () => {
  // One kind, three implementations: the CRD is the Rust example's, byte for byte.
  const rust = readFileSync(join(here, "..", "configmap-summary", "configsummary.crd.yaml"));
  assert.deepEqual(readFileSync(join(here, "configsummary.crd.yaml")), rust);
});

test("the manifest is the Rust example's", () => {
  // Same kind, watches, permissions and limits as the Rust example (comments aside).
  const body = (p: string) =>
    readFileSync(p, "utf8")
      .split("\n")
      .filter((l) => l && !l.startsWith("#"));
  assert.deepEqual(body(join(here, "configmap-summary-ts.toml")), body(join(here, "..", "configmap-summary", "configmap-summary.toml")));
});

/** The contract error an export call threw (componentize-js carries it as `payload`). */
function thrown(f: () => unknown): { kind: string; reason: string; message: string } {
  try {
    f();
  } catch (e) {
    const payload = (e as { payload?: { kind: string; reason: string; message: string } }).payload;
    assert.ok(payload, `not a contract error: ${e}`);
    return payload;
  }
  assert.fail("no error thrown");
}
