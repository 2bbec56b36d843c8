"""The Kubernetes client: objects in and out as ``dict`` (their JSON).

Reads (``get``, ``list``) come from the host's watch caches; writes go to the API
server. The host checks every call against the plugin manifest's
``[permissions] rules``: a call it does not grant raises :class:`Denied`.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from . import host as _host

#: An object's JSON as the client reads and writes it (``metadata``, ``spec``,
#: ``status``, ...): a ``dict`` whose values are whatever the JSON holds.
Object = dict[str, Any]


@dataclass(frozen=True)
class ObjectRef:
    """One object: ``namespace`` is ``None`` for cluster-scoped kinds."""

    api_version: str
    kind: str
    name: str
    namespace: str | None = None

    @staticmethod
    def from_obj(obj: Object) -> ObjectRef:
        meta = obj.get("metadata") or {}
        return ObjectRef(
            api_version=obj.get("apiVersion", ""),
            kind=obj.get("kind", ""),
            name=meta.get("name", ""),
            namespace=meta.get("namespace"),
        )


class ClientError(Exception):
    """Why a client call failed (the contract's ``client-error``).

    ``reason`` is the UpperCamelCase word used in conditions and events;
    ``retry_soon`` says whether retrying soon (not with back-off) is right.
    """

    reason = "ClientError"
    retry_soon = False
    #: Raised from a reconcile, this becomes a terminal error (retrying cannot fix it).
    terminal = False

    #: What ``str()`` puts before the message (the Rust SDK's wording, so a
    #: condition's message reads the same whichever language the guest is in).
    prefix = ""

    def __init__(self, message: str = ""):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.prefix}{self.message}"


class NotFound(ClientError):
    """404: no such object."""

    reason = "NotFound"

    def __init__(self, message: str = "not found"):
        super().__init__(message)


class Conflict(ClientError):
    """409: stale resourceVersion, or the object already exists. Retry soon."""

    reason = "Conflict"
    prefix = "conflict: "
    retry_soon = True


class Denied(ClientError):
    """The plugin manifest does not grant this call."""

    reason = "Forbidden"
    prefix = "denied by the plugin manifest: "
    terminal = True


class Invalid(ClientError):
    """The request was rejected as invalid (400/422)."""

    reason = "Invalid"
    prefix = "invalid request: "
    terminal = True


class TooManyRequests(ClientError):
    """429 (or an eviction a PodDisruptionBudget blocks). Retry soon."""

    reason = "TooManyRequests"
    retry_soon = True

    def __init__(self, message: str = "too many requests"):
        super().__init__(message)


class Unavailable(ClientError):
    """The API server or the host's cache is unavailable."""

    reason = "Unavailable"
    prefix = "unavailable: "


class OtherError(ClientError):
    """Anything else, with the API server's message."""


class DecodeError(ClientError):
    """What the host returned (or what was sent) is not the JSON expected."""

    reason = "DecodeError"
    prefix = "decoding: "
    terminal = True


class Propagation(enum.Enum):
    """``propagationPolicy`` of a delete."""

    ORPHAN = "Orphan"
    BACKGROUND = "Background"
    FOREGROUND = "Foreground"


@dataclass(frozen=True)
class DeleteParams:
    """Options of a delete or an eviction."""

    propagation: Propagation | None = None
    #: The delete happens only if the object still has this uid / resourceVersion.
    uid: str | None = None
    resource_version: str | None = None
    grace_period_seconds: int | None = None


@dataclass(frozen=True)
class Patch:
    """A patch body and how it is interpreted: build one with the constructors."""

    how: str
    body: Any
    field_manager: str = ""
    force: bool = False

    @staticmethod
    def merge(body: Any) -> Patch:
        """JSON merge patch (RFC 7386)."""
        return Patch("merge", body)

    @staticmethod
    def json(ops: list[dict[str, Any]]) -> Patch:
        """JSON patch (RFC 6902): a list of operations."""
        return Patch("json", ops)

    @staticmethod
    def strategic(body: Any) -> Patch:
        """Strategic merge patch (built-in kinds only)."""
        return Patch("strategic", body)

    @staticmethod
    def apply(body: Any, field_manager: str, force: bool = False) -> Patch:
        """Server-side apply of a (partial) object owned by ``field_manager``;
        ``force`` takes fields other managers own instead of a conflict. Creates
        the object when it is missing."""
        if not field_manager:
            raise ValueError("a server-side apply needs a field manager")
        return Patch("apply", body, field_manager, force)


class EventType(enum.Enum):
    NORMAL = "Normal"
    WARNING = "Warning"


@dataclass
class Event:
    """An events.k8s.io/v1 Event; the host fills in the reporter and times and
    aggregates repeats into a series. ``regarding`` defaults to the object being
    reconciled when recorded through :meth:`wasmlet.Context.event`."""

    type: EventType
    reason: str
    action: str
    note: str = ""
    regarding: ObjectRef | None = None
    related: ObjectRef | None = None

    @staticmethod
    def normal(reason: str, action: str, note: str = "") -> Event:
        return Event(EventType.NORMAL, reason, action, note)

    @staticmethod
    def warning(reason: str, action: str, note: str = "") -> Event:
        return Event(EventType.WARNING, reason, action, note)


def _decode(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise DecodeError(f"{what} from the host: {e}") from None


def _object(text: str, what: str) -> Object:
    value = _decode(text, what)
    if not isinstance(value, dict):
        raise DecodeError(f"{what} from the host: not a JSON object")
    return value


def _encode(obj: Any, what: str) -> str:
    try:
        return json.dumps(obj, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        raise DecodeError(f"encoding {what}: {e}") from None


@dataclass(frozen=True)
class Client:
    """The client of the host's own cluster. It holds nothing (the host keeps the
    connections and caches): make one anywhere, or use ``ctx.client``."""

    def get(self, api_version: str, kind: str, name: str,
            namespace: str | None = None) -> Object:
        """The object, from the host's cache; raises :class:`NotFound`."""
        target = ObjectRef(api_version, kind, name, namespace)
        return _object(_host.current().get(target), f"{kind} {name}")

    def get_opt(self, api_version: str, kind: str, name: str,
                namespace: str | None = None) -> Object | None:
        """As :meth:`get`, with ``None`` when the object does not exist."""
        try:
            return self.get(api_version, kind, name, namespace)
        except NotFound:
            return None

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             labels: str = "", fields: str | None = None) -> list[Object]:
        """The objects of a kind (every namespace when ``namespace`` is None)
        matching a label selector (``app=web,tier!=db``) and a field selector
        (``metadata.name=x``), from the host's cache."""
        items = _host.current().list(api_version, kind, namespace, labels, fields)
        return [_object(i, f"a {kind}") for i in items]

    def create(self, obj: Object) -> Object:
        """Creates ``obj`` (its apiVersion, kind and metadata.namespace say where)."""
        return _object(_host.current().create(_encode(obj, "the object")), "the created object")

    def update(self, obj: Object) -> Object:
        """Replaces ``obj``; a stale metadata.resourceVersion raises :class:`Conflict`."""
        return _object(_host.current().update(_encode(obj, "the object")), "the updated object")

    def patch(self, api_version: str, kind: str, name: str, patch: Patch,
              namespace: str | None = None) -> Object:
        """Patches the object and returns it as stored."""
        return self._patch(ObjectRef(api_version, kind, name, namespace), patch, False)

    def patch_status(self, api_version: str, kind: str, name: str, patch: Patch,
                     namespace: str | None = None) -> Object:
        """Patches another object's status subresource (the reconciled object's
        status is returned in the :class:`wasmlet.Action` instead)."""
        return self._patch(ObjectRef(api_version, kind, name, namespace), patch, True)

    def _patch(self, target: ObjectRef, patch: Patch, status: bool) -> Object:
        body = _encode(patch.body, "the patch")
        return _object(_host.current().patch(target, patch, body, status), "the patched object")

    def delete(self, api_version: str, kind: str, name: str,
               namespace: str | None = None,
               params: DeleteParams = DeleteParams()) -> None:
        """Deletes the object (:class:`NotFound` when it is already gone)."""
        _host.current().delete(ObjectRef(api_version, kind, name, namespace), params)

    def evict(self, namespace: str, name: str,
              params: DeleteParams = DeleteParams()) -> None:
        """Evicts a pod, honouring PodDisruptionBudgets (:class:`TooManyRequests`
        when one blocks it)."""
        _host.current().evict(namespace, name, params)

    def event(self, event: Event) -> None:
        """Records ``event``, which must say what it is about (``regarding``)."""
        if event.regarding is None:
            raise Invalid("an event needs `regarding`")
        _host.current().record_event(event)


def millis(d: float | timedelta) -> int:
    """A duration (seconds or timedelta) as whole milliseconds, clamped to u64."""
    seconds = d.total_seconds() if isinstance(d, timedelta) else float(d)
    if seconds != seconds or seconds < 0:  # NaN or negative
        raise ValueError(f"a duration must be 0 or more seconds, not {d!r}")
    return min(int(seconds * 1000), 2**64 - 1)


