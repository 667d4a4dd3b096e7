"""sluice against the Python limiters people use instead, on one bursty load.

An agent runs a turn of 8 parallel calls every 500 ms against a key that
allows 10 requests in any rolling second (the fake API, answering in 50 ms).
Each limiter is set to the key's limit and drives the same kind of httpx
client: sluice through its transport, aiolimiter 1.3 (a leaky bucket) and
pyrate-limiter 4.5 (an in-memory sliding log) around each request. The fake
records every request; from its records:

- the most requests that started in any rolling second (the key allows 10);
- the server's 429s;
- how each call ended: answered, deferred to the model (sluice's
  ``rate_limited``, when the wait would pass the 2 s inline threshold), failed.

Then the cost of sluice where a user would feel it, side by side in one
run (median of interleaved rounds):

- an httpx GET to a loopback server (the fake API, in-process), bare and
  through ``sluice.HTTPTransport``: the goal is at most 5% added;
- a no-op function tool awaited bare and called through a turn
  (``@gate.tool``): the goal is at most 10 µs added.

And, as context, the per-call overhead of a non-waiting acquisition on an
in-memory transport (httpx.MockTransport, no network time): a request
through each limiter minus the same request without one, and aiolimiter's
and pyrate-limiter's ``acquire`` alone.

Run from the repository root, after ``pip install ./python`` (a release
build) and ``pip install -r python/requirements-test.txt``::

    python3 python/bench/compare.py              # about a minute
    python3 python/bench/compare.py --json       # the same figures as JSON
    python3 python/bench/compare.py --cost-only  # only the cost, not the load
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from typing import Any, Awaitable, Callable, Dict, List

import aiolimiter
import httpx
import pyrate_limiter

import sluice
from sluice.testing import FakeApi

LIMIT = 10  # requests per rolling second, the key's limit
WINDOW_S = 1.0
TURN_CALLS = 8
TURN_EVERY_S = 0.5
LATENCY_S = 0.05


def most_in_window(starts: List[float], window_s: float) -> int:
    most, j = 0, 0
    for i, start in enumerate(starts):
        while starts[j] <= start - window_s:
            j += 1
        most = max(most, i - j + 1)
    return most


class Harness:
    """One limiter in front of requests to the fake."""

    name = ""

    def __init__(self, url: str) -> None:
        self.url = url
        self.fake: Any = None

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=30.0)

    async def request(self, client: httpx.AsyncClient, path: str) -> httpx.Response:
        return await client.get(f"{self.url}{path}")

    def turn(self) -> Any:
        return None

    def reset(self) -> None:
        if self.fake is not None:
            self.fake.reset()


class SluiceHarness(Harness):
    name = "sluice"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.gate = sluice.Gate({"credentials": {"api": {"rate": f"{LIMIT}/1s"}}})

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=sluice.HTTPTransport(self.gate, credential="api"), timeout=30.0)

    def turn(self) -> Any:
        return self.gate.turn()


class AiolimiterHarness(Harness):
    name = "aiolimiter 1.3"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.limiter = aiolimiter.AsyncLimiter(LIMIT, WINDOW_S)

    async def request(self, client: httpx.AsyncClient, path: str) -> httpx.Response:
        async with self.limiter:
            return await client.get(f"{self.url}{path}")


class PyrateHarness(Harness):
    name = "pyrate-limiter 4.5"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.limiter = pyrate_limiter.Limiter(pyrate_limiter.Rate(LIMIT, pyrate_limiter.Duration.SECOND))

    async def request(self, client: httpx.AsyncClient, path: str) -> httpx.Response:
        await self.limiter.try_acquire_async("api")
        return await client.get(f"{self.url}{path}")


async def one_call(harness: Harness, client: httpx.AsyncClient, path: str, results: Dict[str, int]) -> None:
    try:
        response = await harness.request(client, path)
    except sluice.Deferred:
        results["deferred"] += 1
        return
    except Exception:
        results["failed"] += 1
        return
    results["answered" if response.status_code < 400 else "failed"] += 1


async def drive(harness: Harness, turns: int) -> Dict[str, int]:
    results = {"answered": 0, "deferred": 0, "failed": 0}
    async with harness.client() as client:
        # One request first, so no limiter pays for imports and the first
        # connection inside the measured load; then the fake forgets it.
        await harness.request(client, "/warm-up")
        harness.reset()
        started = time.monotonic()
        pending = []
        for k in range(turns):
            delay = started + k * TURN_EVERY_S - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            turn = harness.turn()

            async def run_turn(k: int = k, turn: Any = turn) -> None:
                calls = [one_call(harness, client, f"/search?q=t{k}c{j}", results) for j in range(TURN_CALLS)]
                if turn is None:
                    await asyncio.gather(*calls)
                else:
                    with turn:
                        await asyncio.gather(*calls)

            # Turns do not wait for each other: the model's next step comes on time.
            pending.append(asyncio.ensure_future(run_turn()))
        await asyncio.gather(*pending)
    return results


def load_figures(harness_type: type, turns: int) -> Dict[str, Any]:
    with FakeApi(allowed=LIMIT, window_s=WINDOW_S, latency_s=LATENCY_S) as fake:
        harness = harness_type(fake.url)
        harness.fake = fake
        began = time.monotonic()
        results = asyncio.run(drive(harness, turns))
        elapsed = time.monotonic() - began
        records = fake.requests()
        starts = fake.request_starts()
    return {
        "limiter": harness.name,
        "calls": turns * TURN_CALLS,
        "requests": len(records),
        "most_in_rolling_second": most_in_window(starts, WINDOW_S),
        "server_429s": sum(1 for r in records if r["status"] == 429),
        "answered": results["answered"],
        "deferred": results["deferred"],
        "failed": results["failed"],
        "elapsed_s": round(elapsed, 1),
    }


async def per_call(variants: Dict[str, Callable[[], Awaitable[Any]]], n: int, rounds: int) -> Dict[str, float]:
    """For each variant, the median over rounds of the mean time of one call,
    in microseconds. Rounds interleave the variants, so a change in the
    machine's load falls on all of them alike."""
    for fn in variants.values():
        for _ in range(max(n // 10, 1)):
            await fn()
    means: Dict[str, List[float]] = {name: [] for name in variants}
    order = list(variants.items())
    for round_ in range(rounds):
        # Each round starts with a different variant: none always runs
        # first (after the previous round's garbage) or last.
        shift = round_ % len(order)
        for name, fn in order[shift:] + order[:shift]:
            began = time.perf_counter()
            for _ in range(n):
                await fn()
            means[name].append((time.perf_counter() - began) / n * 1e6)
    return {name: statistics.median(values) for name, values in means.items()}


async def overheads(n: int, rounds: int) -> Dict[str, float]:
    big = 1_000_000  # never waits within a run

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"ok": True})

    url = "http://api.invalid/search?q=x"
    bare = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    gate = sluice.Gate({"credentials": {"api": {"rate": f"{big}/1s"}}})
    through_sluice = httpx.AsyncClient(
        transport=sluice.HTTPTransport(gate, credential="api", transport=httpx.MockTransport(handler))
    )
    leaky = aiolimiter.AsyncLimiter(big, 1)
    pyrate = pyrate_limiter.Limiter(pyrate_limiter.Rate(big, pyrate_limiter.Duration.SECOND))

    @gate.tool("noop", credential="api")
    async def noop() -> dict:
        return {}

    async def with_aiolimiter() -> Any:
        async with leaky:
            return await bare.get(url)

    async def with_pyrate() -> Any:
        await pyrate.try_acquire_async("api")
        return await bare.get(url)

    async def aiolimiter_acquire() -> None:
        await leaky.acquire()

    async def pyrate_acquire() -> None:
        await pyrate.try_acquire_async("api")

    turn = gate.turn()

    async def sluice_function_tool() -> Any:
        return await turn.call("noop")

    async def noop_directly() -> Any:
        return await noop()

    figures = await per_call(
        {
            "bare_request_us": lambda: bare.get(url),
            "sluice_request_us": lambda: through_sluice.get(url),
            "aiolimiter_request_us": with_aiolimiter,
            "pyrate_request_us": with_pyrate,
            "aiolimiter_acquire_us": aiolimiter_acquire,
            "pyrate_acquire_us": pyrate_acquire,
            "noop_tool_directly_us": noop_directly,
            "sluice_function_tool_call_us": sluice_function_tool,
        },
        n,
        rounds,
    )
    for name in ("sluice", "aiolimiter", "pyrate"):
        figures[f"{name}_overhead_us"] = figures[f"{name}_request_us"] - figures["bare_request_us"]
    figures["sluice_function_tool_overhead_us"] = (
        figures["sluice_function_tool_call_us"] - figures["noop_tool_directly_us"]
    )
    await bare.aclose()
    await through_sluice.aclose()
    return {key: round(value, 2) for key, value in figures.items()}


async def loopback(url: str, n: int, rounds: int) -> Dict[str, float]:
    """An httpx GET to a loopback server, bare and through sluice's transport."""
    gate = sluice.Gate({"credentials": {"api": {"rate": "1000000/1s"}}})
    async with httpx.AsyncClient(base_url=url) as bare, httpx.AsyncClient(
        base_url=url, transport=sluice.HTTPTransport(gate, credential="api")
    ) as gated:
        figures = await per_call(
            {"loopback_bare_us": lambda: bare.get("/search?q=x"), "loopback_sluice_us": lambda: gated.get("/search?q=x")},
            n,
            rounds,
        )
    figures["loopback_added_pct"] = (figures["loopback_sluice_us"] / figures["loopback_bare_us"] - 1) * 100
    return {key: round(value, 2) for key, value in figures.items()}


def cost_figures(n: int, rounds: int) -> Dict[str, float]:
    # The fake keeps a record per request: it forgets them between runs.
    with FakeApi(allowed=1_000_000, window_s=1.0) as fake:
        figures = asyncio.run(loopback(fake.url, max(n // 10, 1), rounds))
    figures.update(asyncio.run(overheads(n, rounds)))
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=20, help="turns per limiter (one every 500 ms)")
    parser.add_argument("--calls", type=int, default=5000, help="calls per overhead round")
    parser.add_argument("--rounds", type=int, default=8, help="overhead rounds (the median is reported)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--cost-only", action="store_true", help="measure the cost only, not the load")
    args = parser.parse_args()

    load_at_start = os.getloadavg()[0]
    kinds = () if args.cost_only else (SluiceHarness, AiolimiterHarness, PyrateHarness)
    load = [load_figures(kind, args.turns) for kind in kinds]
    cost = cost_figures(args.calls, args.rounds)
    verdict = {
        "request_added_pct": cost["loopback_added_pct"],
        "request_goal_met": cost["loopback_added_pct"] <= 5.0,
        "function_tool_added_us": cost["sluice_function_tool_overhead_us"],
        "function_tool_goal_met": cost["sluice_function_tool_overhead_us"] <= 10.0,
        # Context, not a goal: aiolimiter's acquire() is arithmetic on one bucket.
        "overhead_vs_aiolimiter_acquire": round(cost["sluice_overhead_us"] / cost["aiolimiter_acquire_us"], 1),
    }
    if load:
        verdict["sluice_never_over_limit"] = load[0]["most_in_rolling_second"] <= LIMIT
    setup = {
        "turns": args.turns,
        "turn_calls": TURN_CALLS,
        "turn_every_ms": int(TURN_EVERY_S * 1000),
        "limit": LIMIT,
        "latency_ms": int(LATENCY_S * 1000),
    }
    machine = {"load": load_at_start, "python": sys.version.split()[0], "cores": os.cpu_count()}
    if args.json:
        print(json.dumps({"setup": setup, "machine": machine, "load": load, "overhead": cost, "goals": verdict}, indent=2))
        return 0

    print(f"load {load_at_start:.2f}; Python {sys.version.split()[0]}\n")
    if load:
        print(
            f"{args.turns} turns of {TURN_CALLS} calls every {int(TURN_EVERY_S * 1000)} ms; "
            f"the key allows {LIMIT} per rolling second\n"
        )
        columns = [h["limiter"] for h in load]
        rows = [
            ("calls", "calls"),
            ("requests sent", "requests"),
            ("most starts in a rolling second", "most_in_rolling_second"),
            ("server 429s", "server_429s"),
            ("answered", "answered"),
            ("deferred to the model", "deferred"),
            ("failed", "failed"),
            ("run time (s)", "elapsed_s"),
        ]
        print(f"{'':34}" + "".join(f"{c:>20}" for c in columns))
        for label, key in rows:
            print(f"{label:34}" + "".join(f"{h[key]:>20}" for h in load))
        print()
    print("the cost a user feels (µs per call, median of interleaved rounds)")
    for label, key in [
        ("GET to a loopback server, bare", "loopback_bare_us"),
        ("the same through sluice.HTTPTransport", "loopback_sluice_us"),
        ("added (%)", "loopback_added_pct"),
        ("no-op tool awaited directly", "noop_tool_directly_us"),
        ("the same tool through a turn", "sluice_function_tool_call_us"),
        ("added (µs)", "sluice_function_tool_overhead_us"),
    ]:
        print(f"  {label:44}{cost[key]:>10.2f}")
    print("\ncontext: per call, no wait (µs, median of rounds; MockTransport, no network)")
    for label, key in [
        ("request, no limiter", "bare_request_us"),
        ("request through sluice's transport", "sluice_request_us"),
        ("request in `async with aiolimiter`", "aiolimiter_request_us"),
        ("request after pyrate try_acquire", "pyrate_request_us"),
        ("sluice overhead per request", "sluice_overhead_us"),
        ("aiolimiter overhead per request", "aiolimiter_overhead_us"),
        ("pyrate-limiter overhead per request", "pyrate_overhead_us"),
        ("aiolimiter acquire() alone", "aiolimiter_acquire_us"),
        ("pyrate try_acquire_async() alone", "pyrate_acquire_us"),
        ("no-op tool awaited directly", "noop_tool_directly_us"),
        ("the same tool as a sluice function tool", "sluice_function_tool_call_us"),
        ("sluice overhead per function-tool call", "sluice_function_tool_overhead_us"),
    ]:
        print(f"  {label:44}{cost[key]:>10.2f}")
    if load:
        over = "never" if verdict["sluice_never_over_limit"] else "YES"
        print(f"\nsluice over {LIMIT} in a rolling second: {over}")
    print(
        f"\nrequest: +{verdict['request_added_pct']}% (goal <= 5%: "
        f"{'met' if verdict['request_goal_met'] else 'missed'}); "
        f"function tool: +{verdict['function_tool_added_us']} µs (goal <= 10 µs: "
        f"{'met' if verdict['function_tool_goal_met'] else 'missed'}); "
        f"context: sluice's overhead on a MockTransport request is "
        f"{verdict['overhead_vs_aiolimiter_acquire']}x aiolimiter's acquire()"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
