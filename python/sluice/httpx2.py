"""``sluice.httpx2.HTTPTransport`` and ``sluice.httpx2.SyncHTTPTransport``:
sluice's httpx transports for httpx2, the fork of httpx that the Anthropic
SDK and recent OpenAI SDKs use. The same classes as ``sluice.HTTPTransport``
and ``sluice.SyncHTTPTransport``, built on httpx2's base classes."""

from __future__ import annotations

import httpx2

from ._transport import transports

HTTPTransport, SyncHTTPTransport = transports(httpx2, "httpcore2._backends.anyio", __name__)

__all__ = ["HTTPTransport", "SyncHTTPTransport"]
