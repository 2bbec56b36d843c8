"""Where the SDK's calls go: the host's imports inside the component, or a fake.

The SDK talks to one :class:`Host` (plain Python values in and out; JSON as
``str``, as the contract carries it). Inside the component that is the
componentize-py bindings of ``wit/`` (:mod:`wasmlet._wit`, imported only there,
so native tests need no bindings); under test it is whatever
:meth:`wasmlet.testing.FakeHost.install` put in place.
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .client import DeleteParams, Event, ObjectRef, Patch
    from .log import Level


class Host(Protocol):
    """The contract's ``client`` and ``log`` imports, in SDK terms."""

    def get(self, target: ObjectRef) -> str: ...
    def list(self, api_version: str, kind: str, namespace: str | None,
             label_selector: str, field_selector: str | None) -> builtins.list[str]: ...
    def create(self, obj: str) -> str: ...
    def update(self, obj: str) -> str: ...
    def patch(self, target: ObjectRef, patch: Patch, body: str, status: bool) -> str: ...
    def delete(self, target: ObjectRef, params: DeleteParams) -> None: ...
    def evict(self, namespace: str, name: str, params: DeleteParams) -> None: ...
    def record_event(self, event: Event) -> None: ...
    def log_enabled(self, level: Level) -> bool: ...
    def log(self, level: Level, message: str, fields: builtins.list[tuple[str, str]]) -> None: ...


_installed: Host | None = None


def current() -> Host:
    """The installed host, else the component's imports."""
    global _installed
    if _installed is None:
        from .export import wit_host

        host = wit_host()
        if host is None:  # natively, with no FakeHost installed
            raise RuntimeError(
                "no wasmlet host: natively, install a wasmlet.testing.FakeHost first"
            )
        _installed = host
    return _installed


def install(host: Host | None) -> Host | None:
    """Makes ``host`` the current one; returns the one it replaced."""
    global _installed
    previous, _installed = _installed, host
    return previous
