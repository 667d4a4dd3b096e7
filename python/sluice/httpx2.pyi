from typing import Optional

import httpx2

from ._gate import Gate

class HTTPTransport(httpx2.AsyncBaseTransport):
    def __init__(
        self,
        gate: Gate,
        credential: str,
        *,
        transport: Optional[httpx2.AsyncBaseTransport] = None,
        deadline_ms: Optional[float] = None,
    ) -> None: ...

class SyncHTTPTransport(httpx2.BaseTransport):
    def __init__(
        self,
        gate: Gate,
        credential: str,
        *,
        transport: Optional[httpx2.BaseTransport] = None,
        deadline_ms: Optional[float] = None,
    ) -> None: ...

__all__ = ["HTTPTransport", "SyncHTTPTransport"]
