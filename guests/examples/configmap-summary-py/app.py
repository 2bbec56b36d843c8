"""configmap-summary-py: the configmap-summary example reconciler in Python.

For each ConfigSummary (examples.wasmlet.dev/v1), counts the data keys of the
ConfigMaps in its namespace labelled ``wasmlet.dev/summary=<its name>`` and
reports them in its status with the condition ``Summarised``, exactly as the Rust
example (guests/examples/configmap-summary) does; the manifest makes a change to
such a ConfigMap requeue its ConfigSummary.
"""

from __future__ import annotations

from typing import Optional

from wasmlet import Action, Condition, Context, Level, TerminalError, reconciler

#: The label that ties a ConfigMap to the ConfigSummary named by its value.
SUMMARY_LABEL = "wasmlet.dev/summary"


def count_keys(maps: list[dict], prefix: Optional[str]) -> int:
    """The data and binaryData keys of ``maps`` that start with ``prefix``."""
    return sum(
        1
        for cm in maps
        for section in ("data", "binaryData")
        for key in (cm.get(section) or {})
        if prefix is None or key.startswith(prefix)
    )


def reconcile(obj: dict, ctx: Context) -> Action:
    ns = ctx.object.namespace
    if not ns:
        raise TerminalError("NotNamespaced", "a ConfigSummary must live in a namespace")
    selector = f"{SUMMARY_LABEL}={ctx.object.name}"
    maps = ctx.client.list("v1", "ConfigMap", namespace=ns, labels=selector)
    keys = count_keys(maps, (obj.get("spec") or {}).get("keyPrefix"))
    ctx.log(Level.DEBUG, "summarised", configMaps=len(maps), keys=keys)
    return Action.await_change(
        status={"keys": keys, "configMaps": len(maps)},
        conditions=[
            Condition.true(
                "Summarised",
                reason="Counted",
                message=f"{keys} keys in {len(maps)} ConfigMaps labelled {selector}",
            )
        ],
    )


Reconciler = reconciler(reconcile, conditions=["Summarised"])
