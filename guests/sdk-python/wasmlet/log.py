"""Structured logs into the host's ``tracing`` subscriber (the host adds the
plugin, its version and the key being reconciled to every record)."""

from __future__ import annotations

import enum

from . import host as _host


class Level(enum.IntEnum):
    TRACE = 0
    DEBUG = 1
    INFO = 2
    WARN = 3
    ERROR = 4


def enabled(level: Level) -> bool:
    """Whether a record at ``level`` would be kept (skip building costly fields)."""
    return _host.current().log_enabled(level)


def log(level: Level, message: str, **fields: object) -> None:
    """Writes one record; ``fields`` become key/value pairs (values as ``str``)."""
    _host.current().log(level, message, [(k, str(v)) for k, v in fields.items()])
