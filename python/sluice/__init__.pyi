from typing import Optional

import httpx

from ._errors import ConfigError as ConfigError
from ._errors import Deferred as Deferred
from ._errors import Error as Error
from ._errors import InternalError as InternalError
from ._errors import deferred_from as deferred_from
from ._gate import Call as Call
from ._gate import Gate as Gate
from ._gate import Turn as Turn
from ._gate import call as call
from ._gate import current_turn as current_turn
from ._sluice import Outcome as Outcome

__version__: str
__all__: list[str]

# Built by sluice._transport.transports for httpx (sluice.httpx2 has the same for httpx2).
class HTTPTransport(httpx.AsyncBaseTransport):
    def __init__(
        self,
        gate: Gate,
        credential: str,
        *,
        transport: Optional[httpx.AsyncBaseTransport] = None,
        deadline_ms: Optional[float] = None,
    ) -> None: ...

class SyncHTTPTransport(httpx.BaseTransport):
    def __init__(
        self,
        gate: Gate,
        credential: str,
        *,
        transport: Optional[httpx.BaseTransport] = None,
        deadline_ms: Optional[float] = None,
    ) -> None: ...
