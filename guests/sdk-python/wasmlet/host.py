"""Where the SDK's calls go: the host's imports inside the component, or a fake.

The SDK talks to one :class:`Host` (plain Python values in and out; JSON as
``str``, as the contract carries it). Inside the component that is the
componentize-py bindings of ``wit/`` (:mod:`wasmlet._wit`, imported only there,
so native tests need no bindings); under test it is whatever
:meth:`wasmlet.testing.FakeHost.install` put in place.
"""

from __future__ import annotations

from typing import Optional, Protocol


class Host(Protocol):
    """The contract's ``client`` and ``log`` imports, in SDK terms."""

    def get(self, target) -> str: ...
    def list(self, api_version: str, kind: str, namespace: Optional[str],
             label_selector: str, field_selector: Optional[str]) -> list[str]: ...
    def create(self, obj: str) -> str: ...
    def update(self, obj: str) -> str: ...
    def patch(self, target, patch, body: str, status: bool) -> str: ...
    def delete(self, target, params) -> None: ...
    def evict(self, namespace: str, name: str, params) -> None: ...
    def record_event(self, event) -> None: ...
    def log_enabled(self, level) -> bool: ...
    def log(self, level, message: str, fields: list[tuple[str, str]]) -> None: ...


_installed: Optional[Host] = None


def current() -> Host:
    """The installed host, else the component's imports."""
    global _installed
    if _installed is None:
        from .export import _wit

        if _wit is None:  # natively, with no FakeHost installed
            raise RuntimeError(
                "no wasmlet host: natively, install a wasmlet.testing.FakeHost first"
            )
        _installed = _wit.WitHost()
    return _installed


def install(host: Optional[Host]) -> Optional[Host]:
    """Makes ``host`` the current one; returns the one it replaced."""
    global _installed
    previous, _installed = _installed, host
    return previous
