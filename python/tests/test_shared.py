"""`shared = true`: two Python processes on one key, through a real
redis-server started here on a free port, spend one budget. The fake's
recorded starts are the witness."""

import json
import shutil
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import most_in_window

CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    import sluice

    config = sys.argv[1]
    ready, go = sys.argv[2], sys.argv[3]
    gate = sluice.Gate(config)
    open(ready, "w").close()

    async def main():
        # Start together: wait for the parent's signal.
        import os
        while not os.path.exists(go):
            await asyncio.sleep(0.01)
        calls = [sluice.call("search", {"q": f"{sys.argv[4]}-{i}"}) for i in range(8)]
        outcomes = await gate.turn().execute(calls)
        print(json.dumps([o.status for o in outcomes]))

    asyncio.run(main())
    """
)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_redis(port, deadline_s=10.0):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("redis-server did not start")


@pytest.fixture
def redis_url():
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (.ci/run installs it)")
    port = free_port()
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_redis(port)
        yield f"redis://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_two_processes_on_one_key_spend_one_budget(fake_api, redis_url, tmp_path):
    # The key allows 4 starts in any rolling second; so does the shared budget.
    fake_api.set_rate_limit(allowed=4, window_s=1.0)
    config = f"""
        [defaults]
        inline_wait = "10s"
        deadline = "30s"
        # The allowance for a request reaching the server later than its
        # slot: two busy processes start their tasks late.
        window_margin = "100ms"

        [shared]
        redis_url = "{redis_url}"

        [credentials.search_api]
        base_url = "{fake_api.url}"
        rate = "4/1s"
        shared = true

        [tools.search]
        credential = "search_api"
        path = "/search?q={{q}}"
    """
    go = tmp_path / "go"
    children = []
    for name in ("a", "b"):
        ready = tmp_path / f"ready-{name}"
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, config, str(ready), str(go), name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        children.append((child, ready))
    end = time.monotonic() + 30
    while not all(ready.exists() for _, ready in children):
        assert time.monotonic() < end, "the children did not start"
        assert all(child.poll() is None for child, _ in children), [c.stderr.read() for c, _ in children]
        time.sleep(0.02)
    go.touch()
    statuses = []
    for child, _ in children:
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        statuses.extend(json.loads(out.strip().splitlines()[-1]))

    assert statuses == ["ok"] * 16
    records = fake_api.requests()
    assert len(records) == 16
    assert [r["status"] for r in records] == [200] * 16, "the key was never over its limit"
    starts = fake_api.request_starts()
    assert most_in_window(starts, 1.0) <= 4
    # 16 starts at 4 per rolling second: at least three whole windows apart.
    assert starts[-1] - starts[0] >= 3.0
