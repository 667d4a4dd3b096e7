"""The httpx transports, for httpx and httpx2 alike: every request is a call
on one credential, in the current turn (``with turn:``) or a turn of its
own; the engine paces it, reads the server's headers and retries it through
the bucket; the inner transport sends each attempt.

httpx2 is a fork of httpx with the same names, so both modules get their
transport classes from one function, :func:`transports`:
``sluice.HTTPTransport`` is built for httpx, ``sluice.httpx2.HTTPTransport``
for httpx2."""

from __future__ import annotations

import importlib
from functools import partial
from typing import Any, Optional, Tuple, Type

from . import _attempt
from ._errors import Deferred, Error
from ._gate import Gate, _deadline, current_turn
from ._sluice import Outcome, TurnCore

_READS = ("GET", "HEAD")


class Route:
    """The gate, the credential and the deadline a transport's requests use."""

    __slots__ = ("gate", "credential", "label", "deadline_ms")

    def __init__(self, gate: Gate, credential: str, deadline_ms: Optional[float]) -> None:
        if not isinstance(gate, Gate):
            raise ValueError(f"gate must be a sluice.Gate, not {gate!r}")
        if credential not in gate.credentials:
            known = ", ".join(sorted(gate.credentials)) or "none"
            raise ValueError(f"unknown credential {credential!r} (configured: {known})")
        self.gate = gate
        self.credential = credential
        # What the requests are called in outcomes and the engine's records.
        self.label = f"http:{credential}"
        self.deadline_ms = _deadline(deadline_ms)

    def turn(self) -> TurnCore:
        turn = current_turn()
        if turn is not None and turn.gate is self.gate:
            return turn._core
        return self.gate._core.turn()

    def prepare(self, turn: TurnCore, request: Any, start: Any, blocking: bool) -> Any:
        method = request.method
        accept = range_ = None
        if method in _READS:
            accept, range_ = _representation(request)
        return turn.request(
            self.label,
            self.credential,
            method,
            str(request.url),
            accept,
            range_,
            self.deadline_ms,
            start,
            blocking,
        )


def warm(*modules: str) -> None:
    """Imports what the inner transport would import on its first request.

    httpcore imports its async backend when it opens its first connection
    (tens of milliseconds). That would happen after sluice has given the
    request its start slot, so the first requests would reach the server
    later than their slots, and closer to the next ones than the limit
    allows. Importing it here, up front, keeps slots and arrivals together."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            pass


def _representation(request: Any) -> Tuple[Optional[bytes], Optional[bytes]]:
    """The ``Accept`` and ``Range`` headers (raw bytes), in one pass over the
    raw headers: cheaper than two lookups by name, which each normalize."""
    accept = range_ = None
    for name, value in request.headers.raw:
        lowered = name.lower()
        if lowered == b"accept":
            accept = value if accept is None else accept + b", " + value
        elif lowered == b"range":
            range_ = value if range_ is None else range_ + b", " + value
    return accept, range_


def finish(module: Any, request: Any, answer: Any, attempts: _attempt.Attempts) -> Any:
    """The response to hand back, or the exception to raise."""
    outcome: Outcome = answer[0]
    response = answer[1]
    status = outcome.status
    if response is not None and status in ("ok", "error"):
        if response is True:
            own = attempts.response
            if attempts.loaded:
                # This request's own last attempt, whose body the inner
                # transport had already read (a response built in memory):
                # handed back as it came, as without sluice.
                return own
            # This request's own last attempt: rebuilt from what it kept.
            return module.Response(
                own.status_code,
                headers=own.headers,
                stream=module.ByteStream(attempts.body),
                request=request,
                extensions=own.extensions,
            )
        # The answer of the identical request this one joined.
        code, headers, body = response
        return module.Response(code, headers=headers, stream=module.ByteStream(body), request=request)
    if status == "error":
        if attempts.error is not None:
            raise attempts.error
        raise Error(outcome.message or "sluice could not send the request")
    raise Deferred(outcome)


async def handle_async(route: Route, module: Any, inner: Any, request: Any) -> Any:
    await request.aread()
    attempts = _attempt.Attempts()

    # One attempt: a task on the running loop.
    start = partial(_attempt.start_send, inner, request, attempts)
    turn = route.turn()
    answer = await turn.run_request(route.prepare(turn, request, start, False))
    return finish(module, request, answer, attempts)


def handle_sync(route: Route, module: Any, inner: Any, request: Any) -> Any:
    request.read()
    attempts = _attempt.Attempts()

    start = partial(_attempt.send_sync, inner, request, attempts)
    turn = route.turn()
    answer = turn.run_request_blocking(route.prepare(turn, request, start, True))
    return finish(module, request, answer, attempts)


def transports(module: Any, backend: str, home: str) -> Tuple[Type[Any], Type[Any]]:
    """``HTTPTransport`` and ``SyncHTTPTransport`` for ``module`` (httpx or
    httpx2), as public names of the module ``home``. ``backend`` is the
    module the async inner transport imports on its first connection."""
    lib = module.__name__

    class HTTPTransport(module.AsyncBaseTransport):  # type: ignore[misc, name-defined]
        __doc__ = f"""An ``{lib}.AsyncBaseTransport`` that gates every request on one
        credential, wrapping {lib}'s own transport (or ``transport``).

        ``{lib}.AsyncClient(transport={home}.HTTPTransport(gate, credential="openai"))``
        gives any SDK sluice: requests are paced by the credential's bucket,
        the server's rate-limit headers are read, retryable answers are retried
        through the same bucket, and a request sluice defers raises
        :class:`sluice.Deferred` carrying the outcome. Requests made inside
        ``with turn:`` share that turn (single-flight for identical GETs).
        ``deadline_ms`` bounds each request, waits and retries included."""

        def __init__(
            self,
            gate: Gate,
            credential: str,
            *,
            transport: Optional[Any] = None,
            deadline_ms: Optional[float] = None,
        ) -> None:
            self._route = Route(gate, credential, deadline_ms)
            self._inner = transport if transport is not None else module.AsyncHTTPTransport()
            warm(backend)

        async def handle_async_request(self, request: Any) -> Any:
            return await handle_async(self._route, module, self._inner, request)

        async def aclose(self) -> None:
            await self._inner.aclose()

    class SyncHTTPTransport(module.BaseTransport):  # type: ignore[misc, name-defined]
        __doc__ = f"""The synchronous twin of :class:`HTTPTransport`, a ``{lib}.BaseTransport``:
        ``{lib}.Client(transport={home}.SyncHTTPTransport(gate, credential="openai"))``.
        A request blocks its thread while sluice waits for a slot."""

        def __init__(
            self,
            gate: Gate,
            credential: str,
            *,
            transport: Optional[Any] = None,
            deadline_ms: Optional[float] = None,
        ) -> None:
            self._route = Route(gate, credential, deadline_ms)
            self._inner = transport if transport is not None else module.HTTPTransport()

        def handle_request(self, request: Any) -> Any:
            return handle_sync(self._route, module, self._inner, request)

        def close(self) -> None:
            self._inner.close()

    for cls in (HTTPTransport, SyncHTTPTransport):
        cls.__module__ = home
        cls.__qualname__ = cls.__name__
    return HTTPTransport, SyncHTTPTransport
