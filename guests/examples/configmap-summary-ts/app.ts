/**
 * configmap-summary-ts: the configmap-summary example reconciler in TypeScript.
 *
 * For each ConfigSummary (examples.wasmlet.dev/v1), counts the data keys of the
 * ConfigMaps in its namespace labelled `wasmlet.dev/summary=<its name>` and
 * reports them in its status with the condition `Summarised`, exactly as the Rust
 * example (guests/examples/configmap-summary) and the Python one do; the manifest
 * makes a change to such a ConfigMap requeue its ConfigSummary.
 */

import { Action, Conditions, type Context, defineReconciler, type KubeObject, TerminalError } from "wasmlet";

/** The label that ties a ConfigMap to the ConfigSummary named by its value. */
export const SUMMARY_LABEL = "wasmlet.dev/summary";

/** The data and binaryData keys of `maps` that start with `prefix`. */
export function countKeys(maps: KubeObject[], prefix: string | undefined): number {
  let n = 0;
  for (const cm of maps) {
    for (const section of ["data", "binaryData"]) {
      for (const key of Object.keys(cm[section] ?? {})) {
        if (prefix === undefined || key.startsWith(prefix)) n += 1;
      }
    }
  }
  return n;
}

export function reconcile(obj: KubeObject, ctx: Context): Action {
  const ns = ctx.object.namespace;
  if (!ns) throw new TerminalError("NotNamespaced", "a ConfigSummary must live in a namespace");
  const selector = `${SUMMARY_LABEL}=${ctx.object.name}`;
  const maps = ctx.client.list("v1", "ConfigMap", { namespace: ns, labels: selector });
  const keys = countKeys(maps, obj.spec?.keyPrefix ?? undefined);
  ctx.debug("summarised", { configMaps: maps.length, keys });
  return Action.awaitChange({
    status: { keys, configMaps: maps.length },
    conditions: [Conditions.true("Summarised", "Counted", `${keys} keys in ${maps.length} ConfigMaps labelled ${selector}`)],
  });
}

/** What the component exports (the contract's `reconciler` interface). */
export const reconciler = defineReconciler(reconcile, { conditions: ["Summarised"] });
