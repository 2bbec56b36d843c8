"""A fake host for unit-testing reconcilers natively (pytest, no wasm).

::

    from wasmlet.testing import FakeHost

    def test_counts():
        host = FakeHost()
        host.insert({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "a", "namespace": "ns"}, "data": {"k": "v"}})
        with host.install():
            action = reconcile(obj, Context.for_object(obj))
        assert action.status == {...}
        assert host.events() == [("Normal", "Summarised", "...")]

What it models, as the Rust SDK's fake does: an object store with get/list
(label selectors with ``=``, ``==``, ``!=``, ``key``, ``!key``; field selectors on
dotted paths such as ``metadata.name``), create/update with resourceVersion
conflicts, merge patches (apply and strategic patches applied as merge patches,
an apply creating a missing object; JSON patches refused), delete and evict,
plus recorded events, logs and writes. Kinds marked with :meth:`FakeHost.deny`
answer :class:`wasmlet.Denied`, as a manifest that does not grant them would.
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import json
from collections.abc import Iterator

from . import client as c
from . import host as _host
from .log import Level

Key = tuple[str, str, str | None, str]


def labels_match(selector: str, labels: c.Object) -> bool:
    """Whether ``labels`` satisfies ``selector`` (equality- and existence-based terms)."""
    for term in (t.strip() for t in selector.split(",")):
        if not term:
            continue
        if "!=" in term:
            k, v = term.split("!=", 1)
            ok = labels.get(k.strip()) != v.strip()
        elif "=" in term:
            k, v = term.replace("==", "=", 1).split("=", 1)
            ok = labels.get(k.strip()) == v.strip()
        elif term.startswith("!"):
            ok = term[1:].strip() not in labels
        else:
            ok = term in labels
        if not ok:
            return False
    return True


def fields_match(selector: str, obj: c.Object) -> bool:
    """Whether ``obj`` satisfies a field selector over dotted paths."""
    for term in (t.strip() for t in selector.split(",")):
        if not term:
            continue
        if "!=" in term:
            path, want, equal = *term.split("!=", 1), False
        elif "=" in term:
            path, want, equal = *term.replace("==", "=", 1).split("=", 1), True
        else:
            return False
        have: object = obj
        for part in path.strip().split("."):
            have = have.get(part) if isinstance(have, dict) else None
        if ((have if isinstance(have, str) else "") == want.strip()) != equal:
            return False
    return True


def merge(target: object, patch: object) -> object:
    """RFC 7386 JSON merge patch; returns the merged value."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge(out.get(k), v)
    return out


def _key(obj: c.Object) -> Key | None:
    meta = obj.get("metadata") or {}
    if not (obj.get("apiVersion") and obj.get("kind") and meta.get("name")):
        return None
    return (obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])


def _ref_key(r: c.ObjectRef) -> Key:
    return (r.api_version, r.kind, r.namespace, r.name)


class FakeHost:
    """An in-memory stand-in for the wasmlet host."""

    def __init__(self) -> None:
        self.objects: dict[Key, c.Object] = {}
        self._denied: set[str] = set()
        self._events: list[c.Event] = []
        self._logs: list[tuple[str, str, dict[str, str]]] = []
        self._writes: list[str] = []
        self._version = 0
        #: The level below which log records are dropped (as the host's filter would).
        self.log_level = Level.TRACE

    # --- setting up and looking back ----------------------------------------------
    def insert(self, obj: c.Object) -> None:
        """Puts ``obj`` into the store (as if the cache had it), with a resourceVersion."""
        key = _key(obj)
        if key is None:
            raise ValueError("the object needs apiVersion, kind and metadata.name")
        obj = copy.deepcopy(obj)
        self._bump(obj)
        self.objects[key] = obj

    def object(self, api_version: str, kind: str, name: str,
               namespace: str | None = None) -> c.Object | None:
        """The stored object, or ``None``."""
        return copy.deepcopy(self.objects.get((api_version, kind, namespace, name)))

    def deny(self, kind: str) -> None:
        """Calls on ``kind`` (e.g. ``"Secret"``) raise :class:`wasmlet.Denied` from now on."""
        self._denied.add(kind)

    def events(self) -> list[tuple[str, str, str]]:
        """Events recorded so far, as ``(type, reason, note)``."""
        return [(e.type.value, e.reason, e.note) for e in self._events]

    def recorded_events(self) -> list[c.Event]:
        """Events recorded so far, whole (with ``regarding`` and ``action``)."""
        return list(self._events)

    def logs(self) -> list[tuple[str, str]]:
        """Log records so far, as ``(level, message)``."""
        return [(lvl, msg) for lvl, msg, _ in self._logs]

    def log_fields(self) -> list[dict[str, str]]:
        """Each log record's fields, in order."""
        return [dict(f) for _, _, f in self._logs]

    def writes(self) -> list[str]:
        """Writes so far, as ``"verb Kind namespace/name"``."""
        return list(self._writes)

    @contextlib.contextmanager
    def install(self) -> Iterator[FakeHost]:
        """Routes the SDK's calls to this fake inside the ``with`` block."""
        previous = _host.install(self)
        try:
            yield self
        finally:
            _host.install(previous)

    # --- helpers ------------------------------------------------------------------
    def _check(self, kind: str, verb: str) -> None:
        if kind in self._denied:
            raise c.Denied(f"{verb} {kind}")

    def _record(self, verb: str, key: Key) -> None:
        ns = f"{key[2]}/" if key[2] else ""
        self._writes.append(f"{verb} {key[1]} {ns}{key[3]}")

    def _bump(self, obj: c.Object) -> None:
        self._version += 1
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self._version)
        meta.setdefault("uid", f"uid-{self._version}")

    @staticmethod
    def _parse(text: str) -> c.Object:
        try:
            value = json.loads(text)
        except ValueError as e:
            raise c.Invalid(str(e)) from None
        if not isinstance(value, dict):
            raise c.Invalid("not a JSON object")
        return value

    # --- the Host protocol ----------------------------------------------------------
    def get(self, target: c.ObjectRef) -> str:
        self._check(target.kind, "get")
        obj = self.objects.get(_ref_key(target))
        if obj is None:
            raise c.NotFound()
        return json.dumps(obj)

    def list(self, api_version: str, kind: str, namespace: str | None,
             label_selector: str, field_selector: str | None) -> list[str]:
        self._check(kind, "list")
        out = []
        for (av, k, ns, _), obj in sorted(self.objects.items(), key=lambda kv: str(kv[0])):
            if av != api_version or k != kind or (namespace is not None and ns != namespace):
                continue
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if not labels_match(label_selector, labels):
                continue
            if field_selector and not fields_match(field_selector, obj):
                continue
            out.append(json.dumps(obj))
        return out

    def create(self, obj: str) -> str:
        value = self._parse(obj)
        key = _key(value)
        if key is None:
            raise c.Invalid("missing apiVersion, kind or name")
        self._check(key[1], "create")
        if key in self.objects:
            raise c.Conflict(f"{key[1]} {key[3]} already exists")
        self._bump(value)
        self._record("create", key)
        self.objects[key] = value
        return json.dumps(value)

    def update(self, obj: str) -> str:
        value = self._parse(obj)
        key = _key(value)
        if key is None:
            raise c.Invalid("missing apiVersion, kind or name")
        self._check(key[1], "update")
        current = self.objects.get(key)
        if current is None:
            raise c.NotFound()
        rv = (value.get("metadata") or {}).get("resourceVersion")
        if rv is not None and rv != current["metadata"].get("resourceVersion"):
            raise c.Conflict("resourceVersion is stale")
        self._bump(value)
        self._record("update", key)
        self.objects[key] = value
        return json.dumps(value)

    def patch(self, target: c.ObjectRef, patch: c.Patch, body: str, status: bool) -> str:
        self._check(target.kind, "patch")
        if patch.how == "json":
            raise c.Invalid("the fake host does not apply JSON patches")
        key = _ref_key(target)
        current = self.objects.get(key)
        # Server-side apply creates what is missing, as the API server does.
        creates = current is None and not status and patch.how == "apply"
        if current is None and not creates:
            raise c.NotFound()
        base: c.Object = current if current is not None else {
            "apiVersion": target.api_version, "kind": target.kind,
            "metadata": {"name": target.name, "namespace": target.namespace},
        }
        value = json.loads(body)
        merged = merge(base, {"status": (value or {}).get("status")} if status else value)
        if not isinstance(merged, dict):
            raise c.Invalid("a merge patch must be a JSON object")
        obj: c.Object = merged
        meta = obj.setdefault("metadata", {})
        if meta.get("namespace") is None:
            meta.pop("namespace", None)
        self._bump(obj)
        verb = "patch-status" if status else ("apply-create" if creates else "patch")
        self._record(verb, key)
        self.objects[key] = obj
        return json.dumps(obj)

    def delete(self, target: c.ObjectRef, params: c.DeleteParams) -> None:
        self._check(target.kind, "delete")
        key = _ref_key(target)
        current = self.objects.get(key)
        if current is None:
            raise c.NotFound()
        meta = current.get("metadata") or {}
        if params.uid is not None and params.uid != meta.get("uid"):
            raise c.Conflict(f"precondition failed: uid is {meta.get('uid')}")
        if params.resource_version is not None and params.resource_version != meta.get("resourceVersion"):
            raise c.Conflict(f"precondition failed: resourceVersion is {meta.get('resourceVersion')}")
        del self.objects[key]
        self._record("delete", key)

    def evict(self, namespace: str, name: str, params: c.DeleteParams) -> None:
        self._check("Pod", "evict")
        key = ("v1", "Pod", namespace, name)
        if self.objects.pop(key, None) is None:
            raise c.NotFound()
        self._record("evict", key)

    def record_event(self, event: c.Event) -> None:
        self._events.append(copy.copy(event))

    def log_enabled(self, level: Level) -> bool:
        return level >= self.log_level

    def log(self, level: Level, message: str, fields: builtins.list[tuple[str, str]]) -> None:
        if level >= self.log_level:
            self._logs.append((Level(level).name.lower(), message, dict(fields)))
