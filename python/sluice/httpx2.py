"""``sluice.httpx2.HTTPTransport`` and ``sluice.httpx2.SyncHTTPTransport``, for httpx2 (the fork the Anthropic SDK and recent OpenAI SDKs use)."""

from __future__ import annotations

from typing import Optional

import httpx2 as httpx

from . import _transport
from ._gate import Gate


class HTTPTransport(httpx.AsyncBaseTransport):
    """An ``httpx2.AsyncBaseTransport`` that gates every request on one
    credential, wrapping httpx's own transport (or ``transport``).

    ``httpx2.AsyncClient(transport=sluice.httpx2.HTTPTransport(gate, credential="anthropic"))``
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
        _transport.warm("httpcore2._backends.anyio")

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await _transport.handle_async(self._route, httpx, self._inner, request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class SyncHTTPTransport(httpx.BaseTransport):
    """The synchronous twin of :class:`HTTPTransport`, an ``httpx2.BaseTransport``:
    ``httpx2.Client(transport=sluice.httpx2.SyncHTTPTransport(gate, credential="anthropic"))``.
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


