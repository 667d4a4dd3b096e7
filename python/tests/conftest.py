"""Shared helpers: gates on the fake API, and counting starts in rolling windows."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import sluice


def support_config(url: str, rate: Optional[str] = "10/1s", **defaults: Any) -> Dict[str, Any]:
    """A credential `support` on the fake and the tools the article uses."""
    credential: Dict[str, Any] = {"base_url": url}
    if rate is not None:
        credential["rate"] = rate
    return {
        "defaults": defaults,
        "credentials": {"support": credential},
        "tools": {
            "search_tickets": {"credential": "support", "path": "/api/v2/search.json?query={query}"},
            "create_ticket": {"credential": "support", "method": "POST", "path": "/api/v2/tickets"},
            "get_ticket": {"credential": "support", "path": "/api/v2/tickets/{id}"},
        },
    }


def support_gate(url: str, rate: Optional[str] = "10/1s", **defaults: Any) -> sluice.Gate:
    return sluice.Gate(support_config(url, rate, **defaults), seed=7)


def most_in_window(starts: List[float], window_s: float) -> int:
    """The most starts in any interval [t, t + window_s)."""
    most = 0
    for i, start in enumerate(starts):
        count = sum(1 for other in starts[i:] if other - start < window_s)
        most = max(most, count)
    return most
