"""sluice: backpressure for an AI agent's parallel tool calls, in-process.

A :class:`Gate` holds the limits of every credential (an API key: what a
server throttles) and the tools bound to them. Each model step is a
:class:`Turn`; every call in it goes through the same pipeline (coalesce,
scope state, admission, concurrency, rate, send, learn, retry) and gets
exactly one :class:`Outcome`, in call order: what the model is told.

>>> gate = sluice.Gate({"credentials": {"support": {"base_url": url, "rate": "10/1s"}},
...                     "tools": {"search_tickets": {"credential": "support", "path": "/search?q={query}"}}})
>>> outcome = await gate.turn().call("search_tickets", {"query": "refund"}, deadline_ms=5000)
>>> outcome.status
'ok'

:class:`HTTPTransport` (httpx) and ``sluice.httpx2.HTTPTransport`` put any
SDK's requests through a gate; :mod:`sluice.testing` has the throttling
fake API and the pytest fixture ``fake_api``.
"""

from __future__ import annotations

from typing import Any

from . import _bridge  # noqa: F401  (registers the shutdown hook)
from ._errors import ConfigError, Deferred, Error, InternalError, deferred_from
from ._gate import Call, Gate, Turn, call, current_turn
from ._sluice import Outcome

__version__ = "0.1.0"

__all__ = [
    "Call",
    "ConfigError",
    "Deferred",
    "Error",
    "Gate",
    "HTTPTransport",
    "InternalError",
    "Outcome",
    "SyncHTTPTransport",
    "Turn",
    "call",
    "current_turn",
    "deferred_from",
]


def __getattr__(name: str) -> Any:
    # The transports subclass httpx's: import httpx only when they are used.
    if name in ("HTTPTransport", "SyncHTTPTransport"):
        import httpx

        from ._transport import transports

        built = transports(httpx, "httpcore._backends.anyio", __name__)
        globals().update(HTTPTransport=built[0], SyncHTTPTransport=built[1])
        return globals()[name]
    raise AttributeError(f"module 'sluice' has no attribute {name!r}")
