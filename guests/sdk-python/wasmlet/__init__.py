"""wasmlet SDK for Python: write wasmlet reconcilers in Python.

A reconciler is one function, ``reconcile(obj, ctx)``, over the object's JSON as a
``dict`` (:data:`Object`); it returns an :class:`Action` (status, conditions, when to come back) or
raises an :class:`Error` (:class:`TransientError` / :class:`TerminalError`). The
module that componentize-py builds exports it with :func:`reconciler`::

    from wasmlet import Action, Condition, Context, Object, reconciler

    def reconcile(obj: Object, ctx: Context) -> Action:
        maps = ctx.client.list("v1", "ConfigMap", namespace=ctx.object.namespace)
        return Action.await_change(
            status={"configMaps": len(maps)},
            conditions=[Condition.true("Summarised", "Counted", f"{len(maps)} maps")],
        )

    Reconciler = reconciler(reconcile, conditions=["Summarised"])

The same shape as the Rust SDK (``guests/sdk``): the host owns the loop around the
function (caches, queue, retries, finalizer, ``observedGeneration``, ``Ready``, status
written only on change). Natively (pytest) the calls go to
:class:`wasmlet.testing.FakeHost`; inside the component, to the host's imports.
"""

from .client import (
    Client,
    ClientError,
    Conflict,
    DecodeError,
    DeleteParams,
    Denied,
    Event,
    EventType,
    Invalid,
    NotFound,
    Object,
    ObjectRef,
    OtherError,
    Patch,
    Propagation,
    TooManyRequests,
    Unavailable,
)
from .export import reconciler
from .log import Level
from .reconciler import (
    Action,
    Condition,
    ConditionStatus,
    Context,
    Error,
    ErrorKind,
    Finalize,
    TerminalError,
    TransientError,
)

__all__ = [
    "Action",
    "Client",
    "ClientError",
    "Condition",
    "ConditionStatus",
    "Conflict",
    "Context",
    "DecodeError",
    "DeleteParams",
    "Denied",
    "Error",
    "ErrorKind",
    "Event",
    "EventType",
    "Finalize",
    "Invalid",
    "Level",
    "NotFound",
    "Object",
    "ObjectRef",
    "OtherError",
    "Patch",
    "Propagation",
    "TerminalError",
    "TooManyRequests",
    "TransientError",
    "Unavailable",
    "reconciler",
]
