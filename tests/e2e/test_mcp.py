#!/usr/bin/env python3
"""End-to-end test of `sluice mcp` between a real MCP client and a real MCP server.

Usage: python3 tests/e2e/test_mcp.py path/to/sluice
Needs: pip install -r tests/e2e/requirements.txt (the official MCP Python SDK, pinned).

Each test writes a sluice.toml, connects the SDK's Client over stdio to
`sluice mcp --config <toml> -- python3 tests/e2e/mcp_server.py`, fires many
tool calls in parallel, and asserts on what the server recorded (the start
time of every call and the calls in progress at each start; see
mcp_server.py): concurrency and rate never exceeded the configured limits,
calls sluice deferred came back as structured `rate_limited` tool results
and never reached the server, and identical read-only calls sent one request.
Exits non-zero when a test fails, or when the SDK is missing.
"""

import asyncio
import json
import os
import shutil
import sys
import tempfile
import traceback

REQUIREMENTS = "pip install -r tests/e2e/requirements.txt"
try:
    import importlib.metadata

    from mcp import Client, StdioServerParameters
except ImportError as missing:
    print(
        f"FAILED: the MCP Python SDK is not installed ({missing}). Run: {REQUIREMENTS}",
        file=sys.stderr,
    )
    print("0 passed, 1 failed")
    sys.exit(1)

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "mcp_server.py")
TEST_TIMEOUT_S = 90
# Start times are taken by the server after the request crossed two pipes
# and an event loop: allow this much jitter when checking a rolling window.
WINDOW_SLACK_S = 0.1


class Session:
    """A `sluice mcp` session: its config file, the server's record file, the client's parameters."""

    def __init__(self, sluice, toml):
        self.dir = tempfile.mkdtemp(prefix="sluice-mcp-e2e-")
        self.config = os.path.join(self.dir, "sluice.toml")
        self.record = os.path.join(self.dir, "record.jsonl")
        with open(self.config, "w") as f:
            f.write(toml)
        self.params = StdioServerParameters(
            command=sluice,
            args=["mcp", "--config", self.config, "--", sys.executable, SERVER],
            env={"SLUICE_E2E_RECORD": self.record, "RUST_LOG": "warn"},
        )

    def client(self, mode="auto"):
        # "auto" settles on the per-request envelope (2026-07-28) with this
        # server; "legacy" forces the initialize handshake (2025-11-25).
        return Client(self.params, read_timeout_seconds=60, mode=mode)

    def records(self):
        if not os.path.exists(self.record):
            return []
        with open(self.record) as f:
            return [json.loads(line) for line in f if line.strip()]

    def starts(self, tool=None):
        return [r for r in self.records() if r["event"] == "start" and (tool is None or r["tool"] == tool)]

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def outcome(result):
    """The outcome object of a deferred call, after checking its text block says the same."""
    assert result.is_error, result
    structured = result.structured_content
    assert isinstance(structured, dict), result
    assert json.loads(result.content[0].text) == structured, result
    return structured


def assert_rate(starts, count, window_s):
    """At most `count` starts in any window of `window_s` (less the measuring slack)."""
    times = sorted(s["t"] for s in starts)
    for i in range(len(times) - count):
        gap = times[i + count] - times[i]
        assert gap >= window_s - WINDOW_SLACK_S, (
            f"{count + 1} calls started within {gap:.3f} s, limit {count}/{window_s}s: {times}"
        )


async def test_concurrency_and_rate_never_exceed_the_limits(sluice):
    session = Session(
        sluice,
        """
[defaults]
inline_wait = "10s"
deadline = "60s"

[credentials.api]
rate = "4/1s"
max_in_flight = 2
queue = 64
""",
    )
    try:
        async with session.client() as client:
            await client.list_tools()
            results = await asyncio.gather(*[client.call_tool("send", {"n": n}) for n in range(16)])
        assert all(not r.is_error for r in results), [r for r in results if r.is_error]
        starts = session.starts("send")
        assert len(starts) == 16, f"the server saw {len(starts)} calls, not 16"
        peak = max(s["in_flight"] for s in starts)
        assert peak <= 2, f"{peak} calls in flight at once, limit 2"
        assert peak == 2, "the server never ran two calls at once: the test would prove nothing"
        assert_rate(starts, 4, 1.0)
    finally:
        session.close()


async def test_deferred_calls_come_back_as_structured_rate_limited_results(sluice):
    session = Session(
        sluice,
        """
[defaults]
inline_wait = "200ms"

[credentials.api]
rate = "3/1s"
max_in_flight = 10
""",
    )
    try:
        async with session.client() as client:
            await client.list_tools()
            results = await asyncio.gather(*[client.call_tool("send", {"n": n}) for n in range(10)])
            ok = [r for r in results if not r.is_error]
            deferred = [outcome(r) for r in results if r.is_error]
            assert 1 <= len(ok) <= 3, f"{len(ok)} calls answered at once, limit 3 per second"
            assert len(ok) + len(deferred) == 10
            for o in deferred:
                assert o["status"] == "rate_limited", o
                assert o["reason"] == "throttled", o
                assert 0 < o["retry_after_ms"] <= 1100, o
                assert o["scope"] == "api_key", o
                assert o["hint"], o
            # Nothing deferred reached the server.
            assert len(session.starts("send")) == len(ok), (len(session.starts("send")), len(ok))
            # Honest waits: re-issued after retry_after_ms, the same calls go through.
            await asyncio.sleep(max(o["retry_after_ms"] for o in deferred) / 1000 + 0.05)
            again = await asyncio.gather(*[client.call_tool("send", {"n": 100 + n}) for n in range(3)])
            assert all(not r.is_error for r in again), again
        assert_rate(session.starts("send"), 3, 1.0)
    finally:
        session.close()


async def test_a_full_queue_sheds_with_a_wait(sluice, mode="auto"):
    session = Session(
        sluice,
        """
[credentials.api]
rate = "100/1s"
max_in_flight = 1
queue = 1
""",
    )
    try:
        async with session.client(mode) as client:
            await client.list_tools()
            results = await asyncio.gather(*[client.call_tool("send", {"n": n}) for n in range(5)])
        ok = [r for r in results if not r.is_error]
        shed = [outcome(r) for r in results if r.is_error]
        assert len(ok) == 2, f"{len(ok)} answered: one running and one queued expected"
        assert len(shed) == 3, shed
        for o in shed:
            assert o["status"] == "rate_limited" and o["reason"] == "shed", o
            assert o["retry_after_ms"] > 0, o
        starts = session.starts("send")
        assert len(starts) == 2, starts
        assert max(s["in_flight"] for s in starts) == 1
    finally:
        session.close()


async def test_identical_read_only_calls_send_one_request(sluice):
    session = Session(
        sluice,
        """
[credentials.api]
rate = "50/1s"
max_in_flight = 8
""",
    )
    try:
        async with session.client() as client:
            listed = await client.list_tools()
            hints = {t.name: bool(t.annotations and t.annotations.read_only_hint) for t in listed.tools}
            assert hints == {
                "lookup": True,
                "search": True,
                "send": False,
                "limited": True,
                "limited_write": False,
            }, hints
            results = await asyncio.gather(
                *[client.call_tool("lookup", {"key": "same"}) for _ in range(10)],
                *[client.call_tool("search", {"query": "q"}) for _ in range(6)],
                *[client.call_tool("send", {"n": 7}) for _ in range(3)],
            )
            assert all(not r.is_error for r in results), results
            lookups = {r.content[0].text for r in results[:10]}
            assert len(lookups) == 1, f"coalesced calls got different answers: {lookups}"
            assert len(session.starts("lookup")) == 1, session.starts("lookup")
            assert len(session.starts("search")) == 1, session.starts("search")
            # Writes are never coalesced.
            assert len(session.starts("send")) == 3, session.starts("send")
            # A repeat within the turn cache's TTL (3 s) sends nothing; other arguments do.
            cached = await client.call_tool("lookup", {"key": "same"})
            assert cached.content[0].text in lookups
            assert len(session.starts("lookup")) == 1, session.starts("lookup")
            await client.call_tool("lookup", {"key": "other"})
            assert len(session.starts("lookup")) == 2, session.starts("lookup")
    finally:
        session.close()


async def test_a_tool_reporting_a_rate_limit_is_waited_out_with_progress(sluice):
    session = Session(
        sluice,
        """
[defaults]
inline_wait = "5s"

[credentials.api]
rate = "50/1s"
""",
    )
    try:
        async with session.client() as client:
            await client.list_tools()
            progress = []

            async def on_progress(value, total, message):
                progress.append((value, message))

            # A read: retried below the model's view after the stated wait, with progress meanwhile.
            result = await client.call_tool("limited", {"key": "a"}, progress_callback=on_progress)
            assert not result.is_error, result
            assert result.content[0].text == "limited a ok", result
            starts = session.starts("limited")
            assert len(starts) == 2, starts
            gap = starts[1]["t"] - starts[0]["t"]
            assert gap >= 2.0 - WINDOW_SLACK_S, f"retried {gap:.3f} s after a 2 s wait"
            assert progress, "no progress notification during a 2 s wait"
            assert all("waiting for a rate-limit slot" in (m or "") for _, m in progress), progress

            # A destructive write: not run again; the model gets sluice's outcome, not the error text.
            result = await client.call_tool("limited_write", {"key": "b"})
            o = outcome(result)
            assert o["status"] == "rate_limited", o
            assert 0 < o["retry_after_ms"] <= 2100, o
            assert "api.github.com" not in result.content[0].text, result
            await asyncio.sleep(2.5)
            assert len(session.starts("limited_write")) == 1, session.starts("limited_write")
    finally:
        session.close()


async def test_the_initialize_handshake_era_too(sluice):
    await test_a_full_queue_sheds_with_a_wait(sluice, mode="legacy")


TESTS = [
    test_concurrency_and_rate_never_exceed_the_limits,
    test_deferred_calls_come_back_as_structured_rate_limited_results,
    test_a_full_queue_sheds_with_a_wait,
    test_identical_read_only_calls_send_one_request,
    test_a_tool_reporting_a_rate_limit_is_waited_out_with_progress,
    test_the_initialize_handshake_era_too,
]


async def run_all(sluice):
    passed = failed = 0
    for test in TESTS:
        try:
            await asyncio.wait_for(test(sluice), TEST_TIMEOUT_S)
        except Exception:  # report every failure, then go on
            failed += 1
            print(f"FAIL {test.__name__}", flush=True)
            traceback.print_exc()
        else:
            passed += 1
            print(f"ok   {test.__name__}", flush=True)
    return passed, failed


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    sluice = os.path.abspath(sys.argv[1])
    print(f"mcp {importlib.metadata.version('mcp')}, sluice at {sluice}", flush=True)
    passed, failed = asyncio.run(run_all(sluice))
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
