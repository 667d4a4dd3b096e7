#!/usr/bin/env python3
"""The official MCP conformance suite against sluice mcp --listen, both modes.

    python3 tests/mcp-conformance/run.py target/debug/sluice

Runs every server scenario of @modelcontextprotocol/conformance (pinned in
package-lock.json here; `npm ci --prefix tests/mcp-conformance`) with
`--suite all`: its default run leaves out the two 0.1.16 lists as pending,
json-schema-2020-12 and server-sse-polling. They run against
server.py three ways: directly (Streamable HTTP), through `sluice mcp
--listen --upstream URL`, and through `sluice mcp --listen -- python3
server.py` (stdio). A scenario that passes directly and fails through
sluice fails the run. The suite runs on the Node pinned beside it (22.x):
its 0.1.16 imports `globSync` from `fs`, which Node 20 lacks.

Exit status: 0 when nothing is lost through sluice, 1 when something is,
2 when the suite is not installed.
"""

import os
import re
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NODE = os.path.join(HERE, "node_modules", ".bin", "node")
SUITE = os.path.join(HERE, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
SERVER = os.path.join(HERE, "server.py")
CONFIG = """[credentials.api]
rate = "1000/1s"
max_in_flight = 64
queue = 256
"""
# Scenarios that must pass directly, so that a suite that ran nothing or
# a broken server cannot pass this run by losing nothing.
# The server implements what every scenario of the pinned suite checks, the
# two it calls pending (json-schema-2020-12, server-sse-polling) included.
MUST_PASS_DIRECTLY = {
    "server-initialize",
    "tools-call-simple-text",
    "dns-rebinding-protection",
    "logging-set-level",
    "tools-call-with-logging",
    "resources-subscribe",
    "resources-unsubscribe",
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
    "json-schema-2020-12",
    "server-sse-polling",
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, process, within=20.0):
    began = time.monotonic()
    while time.monotonic() - began < within:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with {process.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing listened on port {port} within {within} s")


def start_sluice(binary, config, args):
    process = subprocess.Popen(
        [binary, "mcp", "--config", config, "--listen", "127.0.0.1:0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = process.stdout.readline().strip()
    match = re.match(r"listening on (http://\S+)", line)
    if not match:
        process.kill()
        raise SystemExit(f"sluice mcp did not start: {line!r}")
    return process, match.group(1) + "/mcp"


def run_suite(url, workdir):
    """Each scenario's name -> passed, from the suite's summary."""
    done = subprocess.run(
        [NODE, SUITE, "server", "--suite", "all", "--url", url],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=600,
    )
    results = {}
    for line in done.stdout.splitlines():
        match = re.match(r"^([✓✗]) (\S+): (\d+) passed, (\d+) failed", line)
        if match:
            results[match.group(2)] = match.group(1) == "✓"
    if not results:
        raise SystemExit(f"the suite reported no scenario:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return results


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    if not (os.path.exists(NODE) and os.path.exists(SUITE)):
        print("the conformance suite is not installed: run `npm ci --prefix tests/mcp-conformance`", file=sys.stderr)
        return 2
    processes = []
    try:
        with tempfile.TemporaryDirectory(prefix="sluice-conformance-") as workdir:
            config = os.path.join(workdir, "sluice.toml")
            with open(config, "w") as f:
                f.write(CONFIG)
            port = free_port()
            server = subprocess.Popen(
                [sys.executable, SERVER, "--port", str(port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            processes.append(server)
            wait_for_port(port, server)
            direct = f"http://127.0.0.1:{port}/mcp"
            upstream, upstream_url = start_sluice(binary, config, ["--upstream", direct])
            processes.append(upstream)
            stdio, stdio_url = start_sluice(binary, config, ["--", sys.executable, SERVER])
            processes.append(stdio)
            targets = [
                ("directly", direct),
                ("sluice mcp --listen --upstream", upstream_url),
                ("sluice mcp --listen -- (stdio)", stdio_url),
            ]
            results = {name: run_suite(url, workdir) for name, url in targets}
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    baseline = results["directly"]
    passed_directly = {name for name, ok in baseline.items() if ok}
    lost = {}
    print(f"{'scenario':40} " + " ".join(f"{name[:30]:>30}" for name, _ in targets))
    for scenario in baseline:
        marks = ["pass" if results[name].get(scenario) else "FAIL" for name, _ in targets]
        print(f"{scenario:40} " + " ".join(f"{m:>30}" for m in marks))
        for name, _ in targets[1:]:
            if scenario in passed_directly and not results[name].get(scenario):
                lost.setdefault(name, []).append(scenario)
    print(
        f"\n{len(passed_directly)} of {len(baseline)} scenarios pass directly; "
        + "; ".join(
            f"{name}: {sum(1 for s in passed_directly if results[name].get(s))} of them" for name, _ in targets[1:]
        )
    )
    missing = MUST_PASS_DIRECTLY - passed_directly
    if missing:
        print(f"the server itself fails {sorted(missing)}: the run proves nothing", file=sys.stderr)
        return 1
    if lost:
        for name, scenarios in lost.items():
            print(f"lost through {name}: {', '.join(scenarios)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
