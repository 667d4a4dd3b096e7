#!/usr/bin/env python3
"""A small MCP server (official Python SDK) for tests/e2e/test_mcp.py.

Run over stdio by `sluice mcp ... -- python3 tests/e2e/mcp_server.py`. Every
tool call is recorded, as one JSON line at its start and one at its end, in
the file named by SLUICE_E2E_RECORD: the tool, its arguments, the time
(time.monotonic(), seconds) and how many calls were in progress, the call
itself included. That file is the witness the test asserts on: it is what
the server behind sluice actually saw.

Over Streamable HTTP instead when SLUICE_E2E_HTTP_PORT is set (see the end).

Tools: `lookup` and `search` are marked read-only (annotations.readOnlyHint);
`send` is a write. Each takes LATENCY_S to answer. `limited` (read-only) and
`limited_write` fail their first call for each argument with GitHub's
rate-limit text and a stated wait, as a tool over a throttled API does.
"""

import asyncio
import json
import os
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

LATENCY_S = float(os.environ.get("SLUICE_E2E_LATENCY_S", "0.2"))
RECORD = os.environ["SLUICE_E2E_RECORD"]

server = MCPServer("sluice-e2e")
in_flight = 0


def record(event, tool, args):
    line = json.dumps({"event": event, "tool": tool, "args": args, "t": time.monotonic(), "in_flight": in_flight})
    with open(RECORD, "a") as f:
        f.write(line + "\n")


async def work(tool, args):
    global in_flight
    in_flight += 1
    record("start", tool, args)
    try:
        await asyncio.sleep(LATENCY_S)
        return f"{tool} {json.dumps(args, sort_keys=True)} at {time.monotonic():.6f}"
    finally:
        in_flight -= 1
        record("end", tool, args)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def lookup(key: str) -> str:
    """Look a key up (read-only)."""
    return await work("lookup", {"key": key})


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def search(query: str) -> str:
    """Search (read-only)."""
    return await work("search", {"query": query})


@server.tool()
async def send(n: int) -> str:
    """Send something (a write)."""
    return await work("send", {"n": n})


LIMITED_WAIT_S = 2
failed_once = set()


async def limited_work(tool, key):
    record("start", tool, {"key": key})
    record("end", tool, {"key": key})
    if (tool, key) not in failed_once:
        failed_once.add((tool, key))
        # A ToolError's text reaches the client (other exceptions are masked),
        # as a result with isError: true.
        raise ToolError(
            f"GET https://api.github.com/search/issues: 403 API rate limit exceeded for user ID 1. "
            f"Retry after {LIMITED_WAIT_S}s"
        )
    return f"{tool} {key} ok"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def limited(key: str) -> str:
    """A read whose API is rate-limited at first."""
    return await limited_work("limited", key)


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
async def limited_write(key: str) -> str:
    """A write whose API is rate-limited at first."""
    return await limited_work("limited_write", key)


if __name__ == "__main__":
    # Over Streamable HTTP when SLUICE_E2E_HTTP_PORT is set (JSON answers
    # with SLUICE_E2E_JSON=1, the stateless form with SLUICE_E2E_STATELESS=1).
    port = os.environ.get("SLUICE_E2E_HTTP_PORT")
    if port:
        server.settings.log_level = "WARNING"
        server.run(
            "streamable-http",
            host="127.0.0.1",
            port=int(port),
            json_response=os.environ.get("SLUICE_E2E_JSON") == "1",
            stateless_http=os.environ.get("SLUICE_E2E_STATELESS") == "1",
        )
    else:
        server.run("stdio")
