"""Load-independent counts of what one non-waiting sluice call costs.

Timings on a shared machine swing with its load; these counts do not. For
a request through ``sluice.HTTPTransport`` (on httpx's in-memory
MockTransport, no network) and for a no-op function tool, each next to the
same work without sluice, it counts per call:

- ``loop_iterations``: event-loop iterations the call needed (each one a
  pass through the loop's ready queue and a poll of its selector);
- ``py_calls`` and ``c_calls``: Python-level and C-level function calls
  (``sys.setprofile``), native code in ``sluice._sluice`` counting as one.

Run from the repository root, after ``pip install ./python``::

    python3 python/bench/per_call_counts.py          # a table
    python3 python/bench/per_call_counts.py --json   # the same as JSON
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any, Awaitable, Callable, Dict

import httpx

import sluice

CALLS = 200  # counted calls per variant (after 20 to warm up)


async def count(loop: Any, fn: Callable[[], Awaitable[Any]]) -> Dict[str, float]:
    for _ in range(20):
        await fn()
    counts = {"loop_iterations": 0, "py_calls": 0, "c_calls": 0}
    run_once = loop._run_once

    def counted_run_once() -> None:
        counts["loop_iterations"] += 1
        run_once()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            counts["py_calls"] += 1
        elif event == "c_call":
            counts["c_calls"] += 1

    loop._run_once = counted_run_once
    sys.setprofile(profile)
    try:
        for _ in range(CALLS):
            await fn()
    finally:
        sys.setprofile(None)
        loop._run_once = run_once
    return {name: value / CALLS for name, value in counts.items()}


async def measure() -> Dict[str, Dict[str, float]]:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"ok": True})

    url = "http://api.invalid/search?q=x"
    gate = sluice.Gate({"credentials": {"api": {"rate": "1000000/1s"}}})
    bare = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    through = httpx.AsyncClient(
        transport=sluice.HTTPTransport(gate, credential="api", transport=httpx.MockTransport(handler))
    )

    @gate.tool("noop", credential="api")
    async def noop() -> dict:
        return {}

    turn = gate.turn()

    async def tool() -> Any:
        return await turn.call("noop")

    loop = asyncio.get_running_loop()
    figures = {
        "request_bare": await count(loop, lambda: bare.get(url)),
        "request_through_sluice": await count(loop, lambda: through.get(url)),
        "noop_directly": await count(loop, noop),
        "noop_as_function_tool": await count(loop, tool),
    }
    for sluiced, plain, name in (
        ("request_through_sluice", "request_bare", "sluice_request_adds"),
        ("noop_as_function_tool", "noop_directly", "sluice_function_tool_adds"),
    ):
        figures[name] = {key: figures[sluiced][key] - figures[plain][key] for key in figures[plain]}
    await bare.aclose()
    await through.aclose()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = parser.parse_args()
    figures = asyncio.run(measure())
    if args.json:
        print(json.dumps({"python": sys.version.split()[0], "per_call": figures}, indent=2))
        return 0
    print(f"per call, Python {sys.version.split()[0]}")
    print(f"{'':28}{'loop iterations':>17}{'Python calls':>14}{'C calls':>10}")
    for name, row in figures.items():
        print(f"{name:28}{row['loop_iterations']:>17.1f}{row['py_calls']:>14.1f}{row['c_calls']:>10.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
