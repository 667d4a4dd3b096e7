#!/usr/bin/env python3
"""End-to-end test of `sluice mcp` over Streamable HTTP, between the official
MCP Python SDK's client and server (pinned in requirements.txt).

Usage: python3 tests/e2e/test_mcp_http.py path/to/sluice

Every combination of transports: a stdio client with a remote server
(`--upstream URL`), HTTP clients with a stdio server (`--listen ADDR -- CMD`),
and HTTP clients with a remote server (`--listen ADDR --upstream URL`),
the server answering with event streams, with JSON, and statelessly. Each
test asserts on what the server recorded (start times, calls in progress,
counts; see mcp_server.py) and on what the client received.
"""

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback

try:
    import importlib.metadata

    import httpx
    from mcp import Client, StdioServerParameters
except ImportError as missing:
    print(f"FAILED: the MCP Python SDK is not installed ({missing}). Run: pip install -r tests/e2e/requirements.txt")
    print("0 passed, 1 failed")
    sys.exit(1)

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "mcp_server.py")
TEST_TIMEOUT_S = 90
WINDOW_SLACK_S = 0.1

LIMITS = """
[defaults]
inline_wait = "10s"
deadline = "60s"

[credentials.api]
rate = "4/1s"
max_in_flight = 2
queue = 64
"""

SHEDDING = """
[credentials.api]
rate = "100/1s"
max_in_flight = 1
queue = 1
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, deadline_s=20):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port}")


class Setup:
    """One sluice and one server, in the given transports."""

    def __init__(self, sluice, toml, server="stdio", listen=False, json_response=False, stateless=False, latency_s=0.2):
        self.dir = tempfile.mkdtemp(prefix="sluice-mcp-http-")
        self.config = os.path.join(self.dir, "sluice.toml")
        self.record = os.path.join(self.dir, "record.jsonl")
        with open(self.config, "w") as f:
            f.write(toml)
        self.procs = []
        env = dict(os.environ, SLUICE_E2E_RECORD=self.record, RUST_LOG="warn", SLUICE_E2E_LATENCY_S=str(latency_s))
        if server == "http":
            port = free_port()
            env_server = dict(env, SLUICE_E2E_HTTP_PORT=str(port))
            if json_response:
                env_server["SLUICE_E2E_JSON"] = "1"
            if stateless:
                env_server["SLUICE_E2E_STATELESS"] = "1"
            self.procs.append(
                subprocess.Popen([sys.executable, SERVER], env=env_server, stderr=subprocess.DEVNULL)
            )
            wait_for_port(port)
            upstream = ["--upstream", f"http://127.0.0.1:{port}/mcp"]
        else:
            upstream = ["--", sys.executable, SERVER]
        args = ["mcp", "--config", self.config]
        if listen:
            args += ["--listen", "127.0.0.1:0"]
            # A command comes last, after `--`.
            cmd = [sluice] + args + upstream
            sidecar = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
            self.procs.append(sidecar)
            first = sidecar.stdout.readline().strip()
            assert first.startswith("listening on http://"), first
            self.url = first.removeprefix("listening on ") + "/mcp"
            self.params = None
        else:
            self.url = None
            self.params = StdioServerParameters(command=sluice, args=args + upstream, env=env)

    def client(self, mode="auto"):
        target = self.url if self.url else self.params
        return Client(target, read_timeout_seconds=60, mode=mode)

    def records(self):
        if not os.path.exists(self.record):
            return []
        with open(self.record) as f:
            return [json.loads(line) for line in f if line.strip()]

    def starts(self, tool=None):
        return [r for r in self.records() if r["event"] == "start" and (tool is None or r["tool"] == tool)]

    def close(self):
        for proc in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def assert_rate(starts, count, window_s):
    times = sorted(s["t"] for s in starts)
    for i in range(len(times) - count):
        gap = times[i + count] - times[i]
        assert gap >= window_s - WINDOW_SLACK_S, f"{count + 1} calls within {gap:.3f} s: {times}"


def outcome(result):
    assert result.is_error, result
    structured = result.structured_content
    assert isinstance(structured, dict), result
    return structured


async def limits_hold(setup, clients=1, mode="auto", calls=8):
    """`calls` sends from each of `clients` sessions: all answered, the gate's limits held across them."""

    async def one(k):
        async with setup.client(mode) as client:
            listed = await client.list_tools()
            assert {t.name for t in listed.tools} == {"lookup", "search", "send", "limited", "limited_write"}
            results = await asyncio.gather(*[client.call_tool("send", {"n": k * 100 + n}) for n in range(calls)])
            assert all(not r.is_error for r in results), [r for r in results if r.is_error]
            texts = [r.content[0].text for r in results]
            for n, text in enumerate(texts):
                assert text.startswith(f"send {json.dumps({'n': k * 100 + n})}"), text
    await asyncio.gather(*[one(k) for k in range(clients)])
    starts = setup.starts("send")
    assert len(starts) == clients * calls, f"the server saw {len(starts)} calls"
    peak = peak_in_flight(setup.records(), "send")
    assert peak <= 2, f"{peak} calls in flight at once, limit 2"
    assert peak == 2, "never two at once: the test would prove nothing"
    assert_rate(starts, 4, 1.0)


def peak_in_flight(records, tool):
    """The most calls of `tool` running at once across every server process.

    Each HTTP session may get a server process of its own, whose `in_flight`
    counts only its own calls; the gate is shared, so the calls are counted
    together, from their start and end times on the machine's monotonic
    clock (an end at the same instant as a start is counted first).
    """
    events = sorted(
        (r["t"], 1 if r["event"] == "start" else -1)
        for r in records
        if r["tool"] == tool and r["event"] in ("start", "end")
    )
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


async def sheds(setup, mode="auto"):
    async with setup.client(mode) as client:
        await client.list_tools()
        results = await asyncio.gather(*[client.call_tool("send", {"n": n}) for n in range(5)])
    ok = [r for r in results if not r.is_error]
    shed = [outcome(r) for r in results if r.is_error]
    assert len(ok) == 2 and len(shed) == 3, (ok, shed)
    for o in shed:
        assert o["status"] == "rate_limited" and o["reason"] == "shed", o
    assert len(setup.starts("send")) == 2, setup.starts("send")


def run(sluice, toml, check, **kwargs):
    async def test():
        setup = Setup(sluice, toml, **kwargs)
        try:
            await check(setup)
        finally:
            setup.close()
    return test


async def http_sessions_are_separate_and_deleted(sluice):
    """Two raw clients: each its own Mcp-Session-Id; DELETE ends one, the other goes on."""
    setup = Setup(sluice, LIMITS, server="http", listen=True)
    try:
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
        async with httpx.AsyncClient(timeout=30) as http:
            ids = []
            for _ in range(2):
                answer = await http.post(setup.url, json=init, headers=headers)
                assert answer.status_code == 200, answer.text
                ids.append(answer.headers["mcp-session-id"])
                assert "text/event-stream" in answer.headers["content-type"]
                assert '"protocolVersion":"2025-06-18"' in answer.text, answer.text
            assert ids[0] != ids[1]
            for sid in ids:
                h = dict(headers, **{"mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"})
                sent = await http.post(setup.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h)
                assert sent.status_code == 202, sent.text
            gone = await http.delete(setup.url, headers={"mcp-session-id": ids[0]})
            assert gone.status_code == 204, gone.text
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "send", "arguments": {"n": 1}}}
            after = await http.post(setup.url, json=call, headers=dict(headers, **{"mcp-session-id": ids[0]}))
            assert after.status_code == 404, after.text
            # JSON only when the client takes no stream.
            live = await http.post(setup.url, json=call, headers={"accept": "application/json", "content-type": "application/json",
                                                                  "mcp-session-id": ids[1], "mcp-protocol-version": "2025-06-18"})
            assert live.status_code == 200, live.text
            body = live.json()
            assert body["id"] == 2 and body["result"]["content"][0]["text"].startswith("send"), body
        assert len(setup.starts("send")) == 1
    finally:
        setup.close()


async def closing_the_request_drops_a_queued_call(sluice):
    """A client that closes its POST while its call waits in sluice: nothing is sent for it."""
    toml = """
[defaults]
inline_wait = "20s"
deadline = "30s"
[credentials.api]
rate = "100/1s"
max_in_flight = 1
queue = 8
"""
    setup = Setup(sluice, toml, server="stdio", listen=True, latency_s=2.0)
    try:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
        base = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        async with httpx.AsyncClient(timeout=30) as http:
            answer = await http.post(setup.url, json=init, headers=base)
            h = dict(base, **{"mcp-session-id": answer.headers["mcp-session-id"]})
            await http.post(setup.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h)

            def call(n):
                return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "send", "arguments": {"n": n}}}

            running = asyncio.create_task(http.post(setup.url, json=call(1), headers=h))
            await asyncio.sleep(0.5)
            # Queued behind the first (max_in_flight = 1), then abandoned.
            try:
                early = await http.post(setup.url, json=call(2), headers=h, timeout=0.5)
                raise AssertionError(f"answered while the first call ran: {early.text}")
            except httpx.TimeoutException:
                pass
            first = await running
            assert '"id":1' in first.text and "send" in first.text, first.text
            await asyncio.sleep(1.0)
            later = await http.post(setup.url, json=call(3), headers=h)
            assert '"id":3' in later.text, later.text
        assert [s["args"]["n"] for s in setup.starts("send")] == [1, 3], setup.starts("send")
    finally:
        setup.close()


def tests(sluice):
    return [
        ("stdio->HTTP(sse): limits hold", run(sluice, LIMITS, limits_hold, server="http")),
        ("stdio->HTTP(json): handshake era sheds", run(sluice, SHEDDING, lambda s: sheds(s, "legacy"), server="http", json_response=True)),
        ("stdio->HTTP(stateless json): limits hold", run(sluice, LIMITS, limits_hold, server="http", json_response=True, stateless=True)),
        ("HTTP->stdio: two clients share the gate", run(sluice, LIMITS, lambda s: limits_hold(s, clients=2, calls=5), listen=True)),
        ("HTTP->stdio: handshake era sheds", run(sluice, SHEDDING, lambda s: sheds(s, "legacy"), listen=True)),
        ("HTTP->HTTP(sse): two clients share the gate", run(sluice, LIMITS, lambda s: limits_hold(s, clients=2, calls=5), server="http", listen=True)),
        ("HTTP->HTTP(stateless): limits hold", run(sluice, LIMITS, limits_hold, server="http", listen=True, json_response=True, stateless=True)),
        ("HTTP->HTTP: handshake era sheds", run(sluice, SHEDDING, lambda s: sheds(s, "legacy"), server="http", listen=True)),
        ("HTTP->HTTP: sessions separate, DELETE ends one", lambda: http_sessions_are_separate_and_deleted(sluice)),
        ("HTTP->stdio: closing the request drops a queued call", lambda: closing_the_request_drops_a_queued_call(sluice)),
    ]


async def run_all(sluice, only):
    passed = failed = 0
    for name, test in tests(sluice):
        if only and only not in name:
            continue
        try:
            await asyncio.wait_for(test(), TEST_TIMEOUT_S)
        except Exception:
            failed += 1
            print(f"FAIL {name}", flush=True)
            traceback.print_exc()
        else:
            passed += 1
            print(f"ok   {name}", flush=True)
    return passed, failed


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    sluice = os.path.abspath(sys.argv[1])
    only = sys.argv[2] if len(sys.argv) == 3 else None
    print(f"mcp {importlib.metadata.version('mcp')}, sluice at {sluice}", flush=True)
    passed, failed = asyncio.run(run_all(sluice, only))
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
