"""Reconcilers: ``reconcile(obj: Object, ctx: Context) -> Action``.

The function looks at one object, acts through :class:`Context`, and says what
the status should be and when to come back; it raises :class:`TransientError`
(retry with back-off) or :class:`TerminalError` (no retry until the object
changes; ``Ready=False`` with its reason). A :class:`wasmlet.ClientError` raised
out of it becomes one of those as in the Rust SDK: ``Denied``, ``Invalid`` and
``DecodeError`` terminal, the rest transient.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from . import log as _log
from .client import Client, ClientError, Event, Object, ObjectRef
from .log import Level


class ConditionStatus(enum.Enum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class Condition:
    """A condition to set (the host adds ``lastTransitionTime`` and
    ``observedGeneration`` and folds declared conditions into ``Ready``)."""

    type: str
    status: ConditionStatus
    #: UpperCamelCase, e.g. ``Counted``.
    reason: str = ""
    message: str = ""

    @staticmethod
    def true(type: str, reason: str = "", message: str = "") -> Condition:
        return Condition(type, ConditionStatus.TRUE, reason, message)

    @staticmethod
    def false(type: str, reason: str = "", message: str = "") -> Condition:
        return Condition(type, ConditionStatus.FALSE, reason, message)

    @staticmethod
    def unknown(type: str, reason: str = "", message: str = "") -> Condition:
        return Condition(type, ConditionStatus.UNKNOWN, reason, message)



def _seconds(d: float | timedelta | None) -> timedelta | None:
    if d is None or isinstance(d, timedelta):
        return d
    return timedelta(seconds=d)


@dataclass(frozen=True)
class Action:
    """A successful reconcile: the status fields this reconciler owns (a JSON
    object, merged into ``.status`` by the host), conditions to set, and when to
    reconcile again even if nothing changes (``None``: only on change)."""

    status: Object | None = None
    conditions: list[Condition] = field(default_factory=list)
    requeue_after: timedelta | None = None

    @staticmethod
    def await_change(status: Object | None = None,
                     conditions: list[Condition] | None = None) -> Action:
        """Reconcile again only when the object, something it owns or watches, changes."""
        return Action(status, list(conditions or []), None)

    @staticmethod
    def requeue(after: float | timedelta, status: Object | None = None,
                conditions: list[Condition] | None = None) -> Action:
        """Reconcile again after ``after`` (seconds or timedelta) even if nothing
        changes; 0 means "again soon" through the host's per-object back-off."""
        return Action(status, list(conditions or []), _seconds(after))


class ErrorKind(enum.Enum):
    #: Retry with per-object exponential back-off.
    TRANSIENT = "transient"
    #: No retry until the object changes; ``Ready=False`` with the reason.
    TERMINAL = "terminal"


class Error(Exception):
    """A failed reconcile; the status and conditions given are written anyway."""

    kind = ErrorKind.TRANSIENT

    def __init__(self, reason: str, message: str = "", *,
                 status: Object | None = None,
                 conditions: list[Condition] | None = None):
        super().__init__(f"{self.kind.value} error {reason}: {message}")
        self.reason = reason
        self.message = message
        self.status = status
        self.conditions = list(conditions or [])

    @staticmethod
    def from_client_error(e: ClientError) -> Error:
        cls = TerminalError if e.terminal else TransientError
        return cls(e.reason, str(e))


class TransientError(Error):
    """Retrying may help: the host retries with back-off."""

    kind = ErrorKind.TRANSIENT


class TerminalError(Error):
    """Retrying will not help until the object changes."""

    kind = ErrorKind.TERMINAL


@dataclass(frozen=True)
class Finalize:
    """What a finalize step achieved: :meth:`done`, or call again after a while."""

    retry_after: timedelta | None = None

    @staticmethod
    def done() -> Finalize:
        return Finalize(None)

    @staticmethod
    def retry(after: float | timedelta) -> Finalize:
        return Finalize(_seconds(after))


@dataclass(frozen=True)
class Context:
    """What a reconcile can reach: ``ctx.client``, events about the object, logs."""

    object: ObjectRef
    client: Client = field(default_factory=Client)

    @staticmethod
    def for_object(obj: Object) -> Context:
        return Context(ObjectRef.from_obj(obj))

    def event(self, event: Event) -> None:
        """Records an Event, about the object being reconciled unless it says otherwise."""
        if event.regarding is None:
            event.regarding = self.object
        self.client.event(event)

    def log(self, level: Level, message: str, **fields: Any) -> None:
        _log.log(level, message, **fields)

    def debug(self, message: str, **fields: Any) -> None:
        _log.log(Level.DEBUG, message, **fields)

    def info(self, message: str, **fields: Any) -> None:
        _log.log(Level.INFO, message, **fields)

    def warn(self, message: str, **fields: Any) -> None:
        _log.log(Level.WARN, message, **fields)

    def error(self, message: str, **fields: Any) -> None:
        _log.log(Level.ERROR, message, **fields)
