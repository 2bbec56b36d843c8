/**
 * Structured logs into the host's `tracing` subscriber (the host adds the plugin,
 * its version and the key being reconciled to every record).
 */

import { current } from "./host";

/** A record's level, as the contract's `log.level`. */
export type Level = "trace" | "debug" | "info" | "warn" | "error";

/** The levels from least to most severe (a fake host's filter compares by index). */
export const LEVELS: readonly Level[] = ["trace", "debug", "info", "warn", "error"];

/** Whether a record at `level` would be kept (skip building costly fields). */
export function enabled(level: Level): boolean {
  return current().logEnabled(level);
}

/** Writes one record; `fields` become key/value pairs (values as strings). */
export function log(level: Level, message: string, fields: Record<string, unknown> = {}): void {
  current().log(level, message, Object.entries(fields).map(([k, v]) => [k, String(v)]));
}
