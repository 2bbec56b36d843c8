"""The component side: the SDK's calls onto the componentize-py bindings of
``wit/`` (generated at build time as ``wit_world``; never imported natively)."""

from __future__ import annotations

import builtins
from typing import NoReturn

from componentize_py_types import Err
from wit_world.exports import reconciler as rx
from wit_world.imports import client as wc
from wit_world.imports import log as wl
from wit_world.imports import types as wt

from . import client as c
from .export import Failure, Outcome
from .log import Level
from .reconciler import Condition, ConditionStatus, ErrorKind

_ERRORS = {
    wc.ClientError_Conflict: c.Conflict,
    wc.ClientError_Denied: c.Denied,
    wc.ClientError_Invalid: c.Invalid,
    wc.ClientError_Unavailable: c.Unavailable,
    wc.ClientError_Other: c.OtherError,
}


def _raise(e: Err[wc.ClientError]) -> NoReturn:
    v = e.value
    if isinstance(v, wc.ClientError_NotFound):
        raise c.NotFound() from None
    if isinstance(v, wc.ClientError_TooManyRequests):
        raise c.TooManyRequests() from None
    raise _ERRORS.get(type(v), c.OtherError)(str(getattr(v, "value", v))) from None


def _ref(r: c.ObjectRef) -> wt.ObjectRef:
    return wt.ObjectRef(api_version=r.api_version, kind=r.kind, namespace=r.namespace, name=r.name)


def _patch_type(p: c.Patch) -> wc.PatchType:
    if p.how == "merge":
        return wc.PatchType_Merge()
    if p.how == "json":
        return wc.PatchType_Json()
    if p.how == "strategic":
        return wc.PatchType_Strategic()
    return wc.PatchType_Apply(wc.ApplyOptions(field_manager=p.field_manager, force=p.force))


_PROPAGATION = {
    c.Propagation.ORPHAN: wc.Propagation.ORPHAN,
    c.Propagation.BACKGROUND: wc.Propagation.BACKGROUND,
    c.Propagation.FOREGROUND: wc.Propagation.FOREGROUND,
}


def _delete_options(p: c.DeleteParams) -> wc.DeleteOptions:
    pre = None
    if p.uid is not None or p.resource_version is not None:
        pre = wc.Preconditions(uid=p.uid, resource_version=p.resource_version)
    return wc.DeleteOptions(
        propagation=_PROPAGATION.get(p.propagation) if p.propagation else None,
        preconditions=pre,
        grace_period_seconds=p.grace_period_seconds,
    )


class WitHost:
    """The host's imports, raising :class:`wasmlet.ClientError` subclasses."""

    def get(self, target: c.ObjectRef) -> str:
        try:
            return wc.get(_ref(target))
        except Err as e:
            _raise(e)

    def list(self, api_version: str, kind: str, namespace: str | None,
             label_selector: str, field_selector: str | None) -> builtins.list[str]:
        params = wc.ListParams(namespace=namespace, label_selector=label_selector,
                               field_selector=field_selector)
        try:
            return wc.list(wt.TypeRef(api_version=api_version, kind=kind), params)
        except Err as e:
            _raise(e)

    def create(self, obj: str) -> str:
        try:
            return wc.create(obj)
        except Err as e:
            _raise(e)

    def update(self, obj: str) -> str:
        try:
            return wc.update(obj)
        except Err as e:
            _raise(e)

    def patch(self, target: c.ObjectRef, patch: c.Patch, body: str, status: bool) -> str:
        call = wc.patch_status if status else wc.patch
        try:
            return call(_ref(target), _patch_type(patch), body)
        except Err as e:
            _raise(e)

    def delete(self, target: c.ObjectRef, params: c.DeleteParams) -> None:
        try:
            wc.delete(_ref(target), _delete_options(params))
        except Err as e:
            _raise(e)

    def evict(self, namespace: str, name: str, params: c.DeleteParams) -> None:
        try:
            wc.evict(namespace, name, _delete_options(params))
        except Err as e:
            _raise(e)

    def record_event(self, event: c.Event) -> None:
        if event.regarding is None:  # Client.event refuses it first
            raise c.Invalid("an event needs `regarding`")
        kind = wc.EventType.WARNING if event.type == c.EventType.WARNING else wc.EventType.NORMAL
        raw = wc.Event(type=kind, reason=event.reason, action=event.action, note=event.note,
                       regarding=_ref(event.regarding),
                       related=_ref(event.related) if event.related else None)
        try:
            wc.record_event(raw)
        except Err as e:
            _raise(e)

    def log_enabled(self, level: Level) -> bool:
        return wl.enabled(wl.Level(int(level)))

    def log(self, level: Level, message: str, fields: builtins.list[tuple[str, str]]) -> None:
        wl.log(wl.Level(int(level)), message, fields)


_STATUS = {
    ConditionStatus.TRUE: rx.ConditionStatus.TRUE,
    ConditionStatus.FALSE: rx.ConditionStatus.FALSE,
    ConditionStatus.UNKNOWN: rx.ConditionStatus.UNKNOWN,
}


def _conditions(cs: list[Condition]) -> list[rx.Condition]:
    return [rx.Condition(type=x.type, status=_STATUS[x.status], reason=x.reason,
                         message=x.message) for x in cs]


def _error(f: Failure) -> Err[rx.ReconcileError]:
    kind = rx.ErrorKind.TERMINAL if f.kind == ErrorKind.TERMINAL else rx.ErrorKind.TRANSIENT
    return Err(rx.ReconcileError(kind=kind, reason=f.reason, message=f.message,
                                 status=f.status, conditions=_conditions(f.conditions)))


def reconcile_result(r: Outcome | Failure) -> rx.ReconcileOutcome:
    if isinstance(r, Failure):
        raise _error(r)
    return rx.ReconcileOutcome(status=r.status, conditions=_conditions(r.conditions),
                               requeue_after_ms=r.requeue_after_ms)


def finalize_result(r: int | None | Failure) -> rx.FinalizeOutcome:
    if isinstance(r, Failure):
        raise _error(r)
    return rx.FinalizeOutcome_Done() if r is None else rx.FinalizeOutcome_RetryAfterMs(r)
