"""What the framework adapters' tests share: the support API's three tools
on the fake, one model response asking for eight calls, and the checks on
what the fake recorded."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Dict, List, Tuple

import httpx

import sluice
from conftest import most_in_window

#: One model response: 4 `search_tickets` (one a duplicate), 3 `get_usage`, 1 `list_customers`.
CALLS: List[Tuple[str, Dict[str, Any]]] = [
    ("search_tickets", {"query": "refund"}),
    ("search_tickets", {"query": "login"}),
    ("search_tickets", {"query": "refund"}),
    ("search_tickets", {"query": "invoice"}),
    ("get_usage", {"customer_id": "c1"}),
    ("get_usage", {"customer_id": "c2"}),
    ("get_usage", {"customer_id": "c3"}),
    ("list_customers", {}),
]
DUPLICATE = (0, 2)  # the positions of the two identical searches
READS = ("search_tickets", "get_usage", "list_customers")


def gate() -> sluice.Gate:
    """The key's own limit, 3 per rolling second, with a 500 ms inline wait:
    three calls start at once, the rest would wait about a second and are
    deferred to the model instead. The window margin is the most allowed
    (a tenth of the window): on a loaded machine a request reaches the
    fake later after its start slot than on an idle one."""
    return sluice.Gate(
        {
            "defaults": {"inline_wait": "500ms", "window_margin": "100ms"},
            "credentials": {"support": {"rate": "3/1s"}},
        },
        seed=11,
    )


def tools(url: str) -> Tuple[Any, Any, Any]:
    """The three tools, calling the fake at ``url``; each raises
    ``httpx.HTTPStatusError`` on an error status, as tools usually do.

    They share one client per event loop, as real tools should: a client
    made per call builds its TLS context each time, which on a loaded
    machine puts tens of milliseconds between a call's start slot and its
    request."""
    clients: Dict[Any, httpx.AsyncClient] = {}

    async def get(path: str, params: Dict[str, str]) -> Any:
        loop = asyncio.get_running_loop()
        client = clients.get(loop)
        if client is None:
            client = clients[loop] = httpx.AsyncClient(base_url=url)
        response = await client.get(path, params=params)
        response.raise_for_status()
        return response.json()

    async def search_tickets(query: str) -> dict:
        """Searches the support tickets."""
        return await get("/api/v2/search.json", {"query": query})

    async def get_usage(customer_id: str) -> dict:
        """A customer's usage this month."""
        return await get(f"/usage/{customer_id}", {})

    async def list_customers() -> dict:
        """Every customer."""
        return await get("/customers", {})

    return search_tickets, get_usage, list_customers


def decode(result: Any) -> Any:
    """A result the model sees, as a value: JSON text decoded, else as it is."""
    if isinstance(result, str):
        try:
            return json.loads(result)
        except ValueError:
            return result
    return result


def check(fake: Any, results: List[Any]) -> None:
    """The checks every framework's test makes, on the fake's records and on
    the eight results the model sees (decoded)."""
    records = fake.requests()
    statuses = [record["status"] for record in records]
    assert 429 not in statuses, statuses
    assert most_in_window(fake.request_starts(), 1.0) <= 3
    refund = [record for record in records if "query=refund" in record["path"]]
    assert len(refund) == 1, "the duplicate search was sent once"

    assert len(results) == 8
    first, second = (results[i] for i in DUPLICATE)
    assert first == second, "both identical searches got the same result"
    assert isinstance(first, dict) and first.get("path", "").startswith("/api/v2/search.json")
    deferred = [r for r in results if isinstance(r, dict) and r.get("status") == "rate_limited"]
    assert deferred, f"at least one call was deferred: {results}"
    assert all(r["retry_after_ms"] > 0 for r in deferred)
    # Every call sent was answered; every other one was deferred, none lost.
    answered = [r for r in results if isinstance(r, dict) and "seq" in r]
    assert len(answered) + len(deferred) == 8
    assert len(answered) == len(records) + 1  # the duplicate answered without a request


def failing_gate() -> sluice.Gate:
    """A gate whose retries after a 500 come quickly."""
    return sluice.Gate(
        {"defaults": {"backoff_base": "5ms", "backoff_cap": "10ms"}, "credentials": {"support": {"rate": "10/1s"}}},
        seed=5,
    )


def failing_get_usage(sent: List[str]) -> Any:
    """``get_usage`` on an API that answers every request with 500; ``sent``
    records each request."""

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        return httpx.Response(500, json={"error": "boom"})

    async def get_usage(customer_id: str) -> dict:
        """A customer's usage this month."""
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer), base_url="http://billing.invalid") as client:
            response = await client.get(f"/usage/{customer_id}")
        response.raise_for_status()
        return response.json()

    return get_usage


def check_failed(result: Any, sent: List[str]) -> None:
    """The model got an error result for the 500, after sluice's bounded retries."""
    assert isinstance(result, dict) and result["status"] == "error", result
    assert result["http_status"] == 500
    assert 1 <= len(sent) <= 5, sent
