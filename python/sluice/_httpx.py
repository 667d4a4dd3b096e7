"""``sluice.HTTPTransport`` and ``sluice.SyncHTTPTransport``, for httpx."""

from __future__ import annotations

from typing import Optional

import httpx

from . import _transport
from ._gate import Gate


class HTTPTransport(httpx.AsyncBaseTransport):
    """An ``httpx.AsyncBaseTransport`` that gates every request on one
    credential, wrapping httpx's own transport (or ``transport``).

    ``httpx.AsyncClient(transport=sluice.HTTPTransport(gate, credential="openai"))``
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
        transport: Optional[httpx.AsyncBaseTransport] = None,
        deadline_ms: Optional[float] = None,
    ) -> None:
        self._route = _transport.Route(gate, credential, deadline_ms)
        self._inner = transport if transport is not None else httpx.AsyncHTTPTransport()
        _transport.warm("httpcore._backends.anyio")

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await _transport.handle_async(self._route, httpx, self._inner, request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class SyncHTTPTransport(httpx.BaseTransport):
    """The synchronous twin of :class:`HTTPTransport`, an ``httpx.BaseTransport``:
    ``httpx.Client(transport=sluice.SyncHTTPTransport(gate, credential="openai"))``.
    A request blocks its thread while sluice waits for a slot."""

    def __init__(
        self,
        gate: Gate,
        credential: str,
        *,
        transport: Optional[httpx.BaseTransport] = None,
        deadline_ms: Optional[float] = None,
    ) -> None:
        self._route = _transport.Route(gate, credential, deadline_ms)
        self._inner = transport if transport is not None else httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return _transport.handle_sync(self._route, httpx, self._inner, request)

    def close(self) -> None:
        self._inner.close()


__all__ = ["HTTPTransport", "SyncHTTPTransport"]


