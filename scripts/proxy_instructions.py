#!/usr/bin/env python3
"""Instructions per proxied request: `sluice serve` under callgrind.

    python3 scripts/proxy_instructions.py [target/release/sluice]

Starts the fake API (unlimited, outside valgrind), then `sluice serve`
with one worker under callgrind, sends 400 requests over 4 keep-alive
connections to warm it, zeroes the counters, sends 2,000 more, dumps them
and prints the instructions per request (docs/PERFORMANCE.md, "How to
measure"). Every wait is bounded: a step that does not finish in time ends the run with an error.
"""

import argparse
import glob
import http.client
import pathlib
import re
import subprocess
import sys
import tempfile
import threading
import time

WARM, MEASURED, CONNECTIONS = 400, 2_000, 4


def started(command, cwd, limit=120):
    """Runs `command`; returns it and the address it prints as `listening on http://ADDR`."""
    child = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    found = {}

    def read():
        for line in child.stdout:
            if line.startswith("listening on http://"):
                found["addr"] = line.split("http://", 1)[1].strip()
                break
        for _ in child.stdout:
            pass

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + limit
    while "addr" not in found:
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            sys.exit(f"{command[0]} did not start")
        time.sleep(0.05)
    return child, found["addr"]


def load(addr, requests):
    """`requests` GETs through the proxy, spread over keep-alive connections."""
    host, port = addr.rsplit(":", 1)
    failures = []

    def worker(count):
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        for _ in range(count):
            conn.request("GET", "/proxy/api/items")
            reply = conn.getresponse()
            reply.read()
            if reply.status != 200:
                failures.append(reply.status)
        conn.close()

    threads = [threading.Thread(target=worker, args=(requests // CONNECTIONS,)) for _ in range(CONNECTIONS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
        if thread.is_alive():
            sys.exit("the load did not finish in 300 s")
    if failures:
        sys.exit(f"{len(failures)} requests failed, e.g. status {failures[0]}")


def control(*args):
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True, timeout=60)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary", nargs="?", default="target/release/sluice")
    args = parser.parse_args()
    binary = str(pathlib.Path(args.binary).resolve())
    with tempfile.TemporaryDirectory() as dir:
        fake, upstream = started([binary, "fake-api", "--listen", "127.0.0.1:0", "--limit", "1000000/1s"], dir)
        config = pathlib.Path(dir, "sluice.toml")
        config.write_text(
            "[server]\nworkers = 1\n\n"
            f'[credentials.api]\nbase_url = "http://{upstream}"\n'
            'rate = "1000000/1s"\nmax_in_flight = 100000\nqueue = 100000\n'
        )
        out = pathlib.Path(dir, "out")
        tool = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}.%p"]
        sidecar, addr = started(tool + [binary, "serve", "--config", str(config), "--listen", "127.0.0.1:0"], dir)
        try:
            load(addr, WARM)
            control("--zero", str(sidecar.pid))
            load(addr, MEASURED)
            control("--dump", str(sidecar.pid))
            dumps = sorted(glob.glob(f"{out}.{sidecar.pid}.*"))
            text = pathlib.Path(dumps[-1]).read_text()
            total = int(re.search(r"^(?:summary|totals): (\d+)", text, re.M).group(1))
            print(f"instructions per proxied request: {total / MEASURED:,.0f} ({total:,} over {MEASURED:,})")
        finally:
            sidecar.terminate()
            sidecar.wait(timeout=120)
            fake.kill()


if __name__ == "__main__":
    main()
