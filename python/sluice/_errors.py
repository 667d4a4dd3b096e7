"""sluice's exceptions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from ._sluice import Outcome


class Error(Exception):
    """The base of every exception sluice raises."""


class ConfigError(Error, ValueError):
    """A configuration that cannot be used. ``field`` names the field at
    fault (``"credentials.support.rate"``), when there is one; the message
    never quotes a secret."""

    def __init__(self, message: str, field: Optional[str] = None) -> None:
        super().__init__(message)
        self.field = field


class InternalError(Error):
    """A bug in sluice (a Rust panic caught at the boundary), never the
    caller's input. Please report it."""


class Deferred(Error):
    """sluice answered a request itself instead of sending it (or sending it
    again): ``outcome.status`` is ``"rate_limited"``, ``"quota_exhausted"``
    or ``"timed_out"``, and ``outcome.retry_after_ms`` says when to try
    again. Raised by the httpx transport; SDKs that wrap transport errors
    keep it as the cause (see :func:`deferred_from`)."""

    def __init__(self, outcome: "Outcome") -> None:
        wait = outcome.retry_after_ms
        when = f", retry after {wait} ms" if wait is not None else ""
        super().__init__(f"sluice deferred the request: {outcome.status}{when}")
        self.outcome = outcome


def deferred_from(error: BaseException) -> Optional[Deferred]:
    """The :class:`Deferred` behind ``error``: itself, or one of its causes
    (an SDK's connection error raised ``from`` it). ``None`` if there is none."""
    seen = set()
    current: Optional[BaseException] = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, Deferred):
            return current
        current = current.__cause__ or current.__context__
    return None
