"""Testing a harness against a server that throttles like real APIs do.

:class:`FakeApi` is sluice-fake, the throttling fake API, served in-process
on loopback. It counts requests per key (``Authorization``, else
``x-api-key``) in an exact rolling window, answers 429 with
``Retry-After`` past it, and records every request: the witness tests
assert on. The pytest plugin gives each test a fresh one as ``fake_api``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ._sluice import FakeCore


class FakeApi:
    """A throttling fake API on ``127.0.0.1``. By default each key may start
    10 requests in any rolling second, each answered at once with
    ``{"path": ..., "seq": N}``. ``allowed``, ``retry_after_s`` and
    ``window_s`` are as for :meth:`set_rate_limit`; ``latency_s`` delays
    every admitted answer; ``headers`` picks the rate-limit headers sent
    (``"none"``, ``"retry-after"``, ``"ietf"``, ``"github"``, ``"openai"``).

    Use it as a context manager (``with FakeApi() as fake:``), or call
    :meth:`close`."""

    def __init__(
        self,
        *,
        allowed: Optional[int] = None,
        retry_after_s: Optional[float] = None,
        window_s: Optional[float] = None,
        latency_s: float = 0.0,
        headers: str = "retry-after",
    ) -> None:
        self._core = FakeCore(allowed, retry_after_s, window_s, latency_s, headers)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, no trailing slash."""
        return self._core.url

    def set_rate_limit(
        self, allowed: int, retry_after_s: Optional[float] = None, window_s: Optional[float] = None
    ) -> None:
        """From now on, at most ``allowed`` requests per key start in any
        rolling window of ``window_s`` (else ``retry_after_s``, else 1 s).
        A request over it gets 429 with ``Retry-After: retry_after_s``, or
        the time until the window frees. Records are kept."""
        self._core.set_rate_limit(allowed, retry_after_s, window_s)

    def request_starts(self) -> List[float]:
        """When each request arrived, in seconds since the fake started, in order."""
        return self._core.request_starts()

    def requests(self) -> List[Dict[str, Any]]:
        """Every request's record, in order: ``t_ms``, ``end_ms``, ``key``,
        ``resource``, ``method``, ``path``, ``status``, ``in_flight``."""
        return self._core.requests()

    def reset(self) -> None:
        """Forgets every request and every key's window."""
        self._core.reset()

    def close(self) -> None:
        """Stops serving."""
        self._core.close()

    def __enter__(self) -> "FakeApi":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FakeApi(url={self.url!r})"


__all__ = ["FakeApi"]
