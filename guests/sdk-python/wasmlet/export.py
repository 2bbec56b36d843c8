"""Exports a reconciler: :func:`reconciler` makes the ``Reconciler`` class that
componentize-py binds to the contract's ``reconciler`` export.

The translation (decode the object, call, encode the outcome) is plain Python
(:func:`run_reconcile`, :func:`run_finalize`) so it runs under pytest too; only
the last step into the generated types (:mod:`wasmlet._wit`) needs the bindings.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType

from .client import ClientError, Object, millis
from .host import Host
from .reconciler import Action, Condition, Context, Error, ErrorKind, Finalize, TerminalError


@dataclass
class Outcome:
    """A reconcile's result as the contract carries it (JSON status, milliseconds)."""

    status: str | None
    conditions: list[Condition]
    requeue_after_ms: int | None


@dataclass
class Failure:
    """A failed reconcile or finalize as the contract carries it."""

    kind: ErrorKind
    reason: str
    message: str
    status: str | None = None
    conditions: list[Condition] = field(default_factory=list)


def _status_json(status: Object | None) -> str | None:
    if status is None:
        return None
    if not isinstance(status, dict):
        raise TerminalError("InvalidStatus",
                            f"the reconciler's status must be a dict, not {type(status).__name__}")
    try:
        return json.dumps(status, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TerminalError("InvalidStatus", f"the reconciler's status did not serialise: {e}") from None


def _failure(e: BaseException) -> Failure:
    if isinstance(e, ClientError):
        e = Error.from_client_error(e)
    if isinstance(e, Error):
        try:
            status = _status_json(e.status)
        except Error as bad:
            return _failure(bad)
        return Failure(e.kind, e.reason, e.message, status, list(e.conditions))
    # Any other exception is a bug in the reconciler: reported for this object and
    # retried with back-off, as a Rust guest's panic is; where it was raised is kept.
    where = traceback.extract_tb(e.__traceback__)[-1:] if e.__traceback__ else []
    at = f" ({where[0].filename.rsplit('/', 1)[-1]}:{where[0].lineno})" if where else ""
    return Failure(ErrorKind.TRANSIENT, "UncaughtException", f"{type(e).__name__}: {e}{at}")


def _decode_object(obj: str) -> Object:
    try:
        value = json.loads(obj)
    except ValueError as e:
        raise TerminalError("InvalidObject", f"the object is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise TerminalError("InvalidObject", "the object is not a JSON object")
    return value


ReconcileFn = Callable[[Object, Context], Action]
FinalizeFn = Callable[[Object, Context], Finalize]


def run_reconcile(fn: ReconcileFn, obj: str) -> Outcome | Failure:
    """Decodes ``obj``, calls ``fn`` and encodes what it returned or raised."""
    try:
        value = _decode_object(obj)
        action = fn(value, Context.for_object(value))
        if not isinstance(action, Action):
            raise TerminalError("InvalidAction",
                                f"reconcile returned {type(action).__name__}, not a wasmlet.Action")
        try:
            requeue = None if action.requeue_after is None else millis(action.requeue_after)
        except ValueError as e:
            raise TerminalError("InvalidAction", f"requeue: {e}") from None
        return Outcome(_status_json(action.status), list(action.conditions), requeue)
    except Exception as e:  # noqa: BLE001 - every failure becomes the contract's error
        return _failure(e)


def run_finalize(fn: FinalizeFn | None, obj: str) -> int | None | Failure:
    """The finalize call: ``None`` when done, milliseconds to wait, or a failure."""
    if fn is None:
        return None
    try:
        value = _decode_object(obj)
        result = fn(value, Context.for_object(value))
        if not isinstance(result, Finalize):
            raise TerminalError("InvalidFinalize",
                                f"finalize returned {type(result).__name__}, not a wasmlet.Finalize")
        return None if result.retry_after is None else millis(result.retry_after)
    except Exception as e:  # noqa: BLE001
        return _failure(e)


def reconciler(reconcile: ReconcileFn, *, finalize: FinalizeFn | None = None,
               conditions: tuple[str, ...] | list[str] = ()) -> type:
    """The class componentize-py exports: bind it as ``Reconciler`` in the app module.

    ``conditions`` are the condition types ``reconcile`` reports (the host starts
    them at Unknown and folds them into ``Ready``); ``finalize`` runs while the
    manifest's finalizer holds a deleted object.
    """
    declared = [str(c) for c in conditions]

    class Reconciler:
        def declared_conditions(self) -> list[str]:
            return list(declared)

        def reconcile(self, obj: str) -> object:
            return _bindings().reconcile_result(run_reconcile(reconcile, obj))

        def finalize(self, obj: str) -> object:
            return _bindings().finalize_result(run_finalize(finalize, obj))

    Reconciler.__qualname__ = Reconciler.__name__ = "Reconciler"
    return Reconciler


# Inside the component the bindings are imported here, while componentize-py
# snapshots the initialised interpreter: every call starts on a fresh instance
# of that snapshot, so a module imported later would be imported on every call.
# Natively there are no bindings (the fake host stands in).
def _import_bindings() -> tuple[ModuleType | None, str]:
    try:
        from . import _wit
    except ImportError as e:
        return None, str(e)
    return _wit, ""


_wit, _missing = _import_bindings()


def _bindings() -> ModuleType:
    if _wit is None:
        raise RuntimeError(f"the wasmlet bindings did not import ({_missing})")
    return _wit


def wit_host() -> Host | None:
    """The host's imports, inside the component; ``None`` natively."""
    if _wit is None:
        return None
    host: Host = _wit.WitHost()
    return host
