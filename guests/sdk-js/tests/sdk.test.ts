// The SDK's own behaviour, natively: the export's translation, errors, the client
// against the fake host.

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  Action,
  Client,
  Conditions,
  Conflict,
  Context,
  Denied,
  Events,
  Finalize,
  type KubeObject,
  NotFound,
  ObjectRef,
  Patch,
  TerminalError,
  TransientError,
  defineReconciler,
  isFailure,
  runFinalize,
  runReconcile,
} from "wasmlet";
import { FakeHost, fieldsMatch, labelsMatch } from "wasmlet/testing";

const OBJ = JSON.stringify({ apiVersion: "example.com/v1", kind: "Thing", metadata: { name: "t", namespace: "ns" } });

function failure(r: unknown) {
  assert.ok(isFailure(r), `not a failure: ${JSON.stringify(r, (_, v) => (typeof v === "bigint" ? String(v) : v))}`);
  return r;
}

test("an action becomes the contract's outcome", () => {
  const out = runReconcile((_obj, ctx) => {
    assert.deepEqual(ctx.object, new ObjectRef("example.com/v1", "Thing", "t", "ns"));
    return Action.requeue(300, { status: { n: 1 }, conditions: [Conditions.false("Ready2", "Waiting", "soon")] });
  }, OBJ);
  assert.deepEqual(out, {
    status: '{"n":1}',
    conditions: [{ type: "Ready2", status: "False", reason: "Waiting", message: "soon" }],
    requeueAfterMs: 300_000n,
  });
  assert.deepEqual(runReconcile(() => Action.awaitChange(), OBJ), { status: undefined, conditions: [], requeueAfterMs: undefined });
  assert.equal((runReconcile(() => Action.requeue(0.25), OBJ) as { requeueAfterMs: bigint }).requeueAfterMs, 250n);
});

test("errors keep their kind, status and conditions", () => {
  const out = failure(
    runReconcile(() => {
      throw new TerminalError("BadSpec", "spec.size must be positive", {
        status: { phase: "Bad" },
        conditions: [Conditions.false("Valid", "BadSpec")],
      });
    }, OBJ),
  );
  assert.deepEqual(out, {
    failed: true,
    kind: "terminal",
    reason: "BadSpec",
    message: "spec.size must be positive",
    status: '{"phase":"Bad"}',
    conditions: [{ type: "Valid", status: "False", reason: "BadSpec", message: "" }],
  });
  const transient = failure(
    runReconcile(() => {
      throw new TransientError("Waiting", "for the database");
    }, OBJ),
  );
  assert.equal(transient.kind, "transient");
});

test("client errors map as in the Rust SDK", () => {
  const host = new FakeHost();
  host.deny("Secret");
  const [denied, missing] = host.run(() => [
    failure(runReconcile((_o, c) => Action.awaitChange({ status: c.client.get("v1", "Secret", "s", "ns") }), OBJ)),
    failure(runReconcile((_o, c) => Action.awaitChange({ status: c.client.get("v1", "Secret2", "s", "ns") }), OBJ)),
  ]);
  assert.deepEqual([denied.kind, denied.reason, denied.message], ["terminal", "Forbidden", "denied by the plugin manifest: get Secret"]);
  assert.deepEqual([missing.kind, missing.reason, missing.message], ["transient", "NotFound", "not found"]);
});

test("a bug is a transient error naming it", () => {
  const out = failure(
    runReconcile((obj) => {
      const missing = (obj as { nope?: { deeper: number } }).nope as { deeper: number };
      return Action.requeue(missing.deeper);
    }, OBJ),
  );
  assert.equal(out.kind, "transient");
  assert.equal(out.reason, "UncaughtException");
  assert.match(out.message, /^TypeError: /);
});

test("bad input and output are terminal and say what", () => {
  assert.equal(failure(runReconcile(() => Action.awaitChange(), "not json")).reason, "InvalidObject");
  assert.equal(failure(runReconcile(() => "done" as unknown as Action, OBJ)).reason, "InvalidAction");
  const cyclic: Record<string, unknown> = {};
  cyclic.self = cyclic;
  const bad = failure(runReconcile(() => Action.awaitChange({ status: cyclic }), OBJ));
  assert.deepEqual([bad.kind, bad.reason], ["terminal", "InvalidStatus"]);
  const array = failure(runReconcile(() => Action.awaitChange({ status: [1] as unknown as Record<string, unknown> }), OBJ));
  assert.equal(array.reason, "InvalidStatus");
  const negative = failure(runReconcile(() => Action.requeue(-1), OBJ));
  assert.deepEqual([negative.reason, negative.message], ["InvalidAction", "a duration must be 0 or more seconds, not -1"]);
  const promise = failure(runReconcile((async () => Action.awaitChange()) as unknown as () => Action, OBJ));
  assert.equal(promise.reason, "InvalidAction");
  assert.match(promise.message, /^reconcile returned a Promise/);
  const huge = runReconcile(() => Action.requeue(1e300), OBJ) as { requeueAfterMs: bigint };
  assert.equal(huge.requeueAfterMs, 2n ** 64n - 1n);
});

test("finalize", () => {
  assert.equal(runFinalize(undefined, OBJ), undefined);
  assert.equal(runFinalize(() => Finalize.done(), OBJ), undefined);
  assert.equal(runFinalize(() => Finalize.retry(2), OBJ), 2000n);
  assert.equal(failure(runFinalize(() => undefined as unknown as Finalize, OBJ)).reason, "InvalidFinalize");
});

test("the export speaks the contract's wire values", () => {
  const r = defineReconciler(
    () => Action.requeue(1.5, { status: { a: 1 }, conditions: [Conditions.unknown("A", "Pending")] }),
    { conditions: ["A", "B"], finalize: () => Finalize.retry(3) },
  );
  assert.deepEqual(r.declaredConditions(), ["A", "B"]);
  assert.deepEqual(r.reconcile(OBJ), {
    status: '{"a":1}',
    conditions: [{ type: "A", status: "unknown", reason: "Pending", message: "" }],
    requeueAfterMs: 1500n,
  });
  assert.deepEqual(r.finalize(OBJ), { tag: "retry-after-ms", val: 3000n });
  assert.deepEqual(defineReconciler(() => Action.awaitChange()).finalize(OBJ), { tag: "done" });
  const failing = defineReconciler(() => {
    throw new TerminalError("Nope", "never");
  });
  assert.throws(
    () => failing.reconcile(OBJ),
    (e: { payload?: unknown }) => {
      assert.deepEqual(e.payload, { kind: "terminal", reason: "Nope", message: "never", status: undefined, conditions: [] });
      return true;
    },
  );
});

test("the fake client reads, writes and records", () => {
  const host = new FakeHost();
  host.insert({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "a", namespace: "ns", labels: { app: "x" } } });
  const c = new Client();
  host.run(() => {
    assert.deepEqual(
      c.list("v1", "ConfigMap", { namespace: "ns", labels: "app=x" }).map((m) => m.metadata?.name),
      ["a"],
    );
    assert.deepEqual(c.list("v1", "ConfigMap", { namespace: "ns", labels: "app!=x" }), []);
    assert.equal(c.list("v1", "ConfigMap", { fields: "metadata.name=a" })[0]?.kind, "ConfigMap");
    assert.equal(c.getOpt("v1", "ConfigMap", "b", "ns"), undefined);
    const made = c.create({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "b", namespace: "ns" } });
    assert.throws(() => c.create(made), Conflict);
    const stale: KubeObject = { ...made, metadata: { ...made.metadata, resourceVersion: "0" } };
    assert.throws(() => c.update(stale), Conflict);
    c.patch("v1", "ConfigMap", "b", Patch.merge({ data: { k: "v" } }), "ns");
    const applied = c.patch("v1", "ConfigMap", "c", Patch.apply({ apiVersion: "v1", kind: "ConfigMap", data: { x: "1" } }, "me", true), "ns");
    assert.deepEqual(applied.data, { x: "1" });
    c.delete("v1", "ConfigMap", "a", "ns");
    assert.throws(() => c.delete("v1", "ConfigMap", "a", "ns"), NotFound);
    host.insert({ apiVersion: "v1", kind: "Pod", metadata: { name: "p", namespace: "ns" } });
    c.evict("ns", "p");
    const ctx = Context.forObject(JSON.parse(OBJ));
    ctx.event(Events.warning("Stuck", "Reconcile", "no maps"));
    ctx.info("hello", { n: 1 });
    host.deny("Pod");
    assert.throws(() => c.list("v1", "Pod"), Denied);
  });
  assert.deepEqual(host.writes(), [
    "create ConfigMap ns/b",
    "patch ConfigMap ns/b",
    "apply-create ConfigMap ns/c",
    "delete ConfigMap ns/a",
    "evict Pod ns/p",
  ]);
  assert.deepEqual(host.object("v1", "ConfigMap", "b", "ns")?.data, { k: "v" });
  assert.deepEqual(host.events(), [["Warning", "Stuck", "no maps"]]);
  assert.equal(host.recordedEvents()[0]?.regarding?.name, "t");
  assert.deepEqual(host.logs(), [["info", "hello"]]);
  assert.deepEqual(host.logFields(), [{ n: "1" }]);
});

test("a patch of another object's status and a filtered log level", () => {
  const host = new FakeHost();
  host.logLevel = "info";
  host.insert({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "a", namespace: "ns" }, data: { k: "v" } });
  host.run(() => {
    const c = new Client();
    const out = c.patchStatus("v1", "ConfigMap", "a", Patch.merge({ status: { seen: true }, data: { ignored: "1" } }), "ns");
    assert.deepEqual([out.status, out.data], [{ seen: true }, { k: "v" }]);
    assert.throws(() => c.patchStatus("v1", "ConfigMap", "zz", Patch.merge({ status: {} }), "ns"), NotFound);
    assert.throws(() => Patch.apply({}, ""), /field manager/);
    new Context(new ObjectRef("v1", "ConfigMap", "a", "ns")).debug("dropped");
  });
  assert.deepEqual(host.logs(), []);
  assert.deepEqual(host.writes(), ["patch-status ConfigMap ns/a"]);
});

test("without a fake host, natively, the error says what to do", () => {
  assert.throws(() => new Client().get("v1", "ConfigMap", "a"), /install a FakeHost/);
});

test("selectors", () => {
  assert.ok(labelsMatch("a=1,b", { a: "1", b: "2" }));
  assert.ok(labelsMatch("a==1,!c", { a: "1" }));
  assert.ok(!labelsMatch("a!=1", { a: "1" }));
  assert.ok(fieldsMatch("metadata.namespace=ns", { metadata: { namespace: "ns" } }));
  assert.ok(!fieldsMatch("spec.nodeName!=", { spec: {} }));
});
