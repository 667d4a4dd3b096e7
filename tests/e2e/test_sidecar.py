#!/usr/bin/env python3
"""End-to-end test of `sluice serve` from another language (standard library only).

Usage: python3 tests/e2e/test_sidecar.py path/to/sluice

Starts two `sluice fake-api` processes and one `sluice serve` in front of them,
drives turns over HTTP with urllib, and asserts on what the fakes recorded
(request start times and counts): the article's timing test, single-flight
across two requests sharing a turn_id, shedding, and the proxy's secret
injection. Every process is killed at the end, even on failure. Exits non-zero
when a test fails.
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request

SECRET = "sk-e2e-4d2c9a7f1b-never-print"
START_TIMEOUT_S = 60


class Process:
    """A child process whose first stdout line is `listening on http://ADDR`."""

    def __init__(self, name, argv, env=None):
        self.name = name
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=env,
        )
        self.url = self._read_address()

    def _read_address(self):
        line = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()))
        reader.daemon = True
        reader.start()
        reader.join(START_TIMEOUT_S)
        if not line:
            raise AssertionError(f"{self.name}: no first line within {START_TIMEOUT_S} s\n{self.stderr()}")
        text = line[0].decode().rstrip("\n")
        prefix = "listening on http://"
        if not text.startswith(prefix):
            raise AssertionError(f"{self.name}: unexpected first line {text!r}\n{self.stderr()}")
        return "http://" + text[len(prefix):]

    def stderr(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def request(method, url, body=None, headers=None, timeout=30):
    """(status, headers, parsed JSON or text) for one HTTP request."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("content-type", "application/json")
    for name, value in (headers or {}).items():
        req.add_header(name, value)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            status, head, raw = response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        status, head, raw = error.code, dict(error.headers), error.read()
    try:
        return status, head, json.loads(raw)
    except ValueError:
        return status, head, raw.decode(errors="replace")


def turn(sidecar, calls, turn_id=None):
    body = {"calls": calls}
    if turn_id is not None:
        body["turn_id"] = turn_id
    status, _, answer = request("POST", sidecar.url + "/v1/turns", body)
    assert status == 200, (status, answer)
    results = answer["results"]
    assert [r["id"] for r in results] == [c["id"] for c in calls], results
    return results


def records(fake):
    status, _, stats = request("GET", fake.url + "/_fake/stats")
    assert status == 200, stats
    return stats


def reset(fake):
    status, _, _ = request("POST", fake.url + "/_fake/reset")
    assert status == 200


def call(call_id, tool, **args):
    return {"id": call_id, "tool": tool, "args": args}


# --- tests -------------------------------------------------------------------


def test_article_fanout_respects_the_window(env):
    """The fake allows 3 requests per 200 ms (Retry-After 0.2 s); five distinct calls."""
    fake, sidecar = env["window_fake"], env["sidecar"]
    reset(fake)
    results = turn(sidecar, [call(f"c{i}", "search_tickets", query=q) for i, q in enumerate("abcde")])
    stats = records(fake)
    starts = [r["t_ms"] for r in stats["requests"]]
    # Requests 4 and 5 must not start before the window elapses.
    assert starts[3] - starts[2] >= 200, starts
    assert starts[4] - starts[2] >= 200, starts
    # Nothing exploded into retries: exactly one request per logical call.
    assert len(starts) == 5, stats
    assert stats["throttled"] == 0, stats
    # Short inline waits stayed invisible to the model.
    assert all(r["status"] != "rate_limited" for r in results), results
    assert all(r["status"] == "ok" for r in results), results
    assert results[0]["body"]["path"] == "/api/v2/search.json?query=a", results[0]


def test_single_flight_across_two_requests(env):
    """Two HTTP requests with one turn_id, the same read, at the same time: one upstream request."""
    fake, sidecar = env["slow_fake"], env["sidecar"]
    reset(fake)
    answers = {}

    def post(call_id):
        answers[call_id] = turn(sidecar, [call(call_id, "slow_search", query="refund")], turn_id="turn-e2e")

    threads = [threading.Thread(target=post, args=(name,)) for name in ("first", "second")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert set(answers) == {"first", "second"}, answers
    for name, results in answers.items():
        assert results[0]["status"] == "ok", (name, results)
    assert answers["first"][0]["body"] == answers["second"][0]["body"], answers
    stats = records(fake)
    assert stats["total"] == 1, stats

    # Another turn sends its own request.
    turn(sidecar, [call("third", "slow_search", query="refund")], turn_id="turn-e2e-other")
    assert records(fake)["total"] == 2


def test_a_full_queue_sheds(env):
    """max_in_flight 1, queue 1: of four slow calls two are sent and two shed at once."""
    fake, sidecar = env["slow_fake"], env["sidecar"]
    reset(fake)
    started = time.monotonic()
    results = turn(sidecar, [call(f"s{i}", "slow_search", query=f"q{i}") for i in range(4)])
    elapsed = time.monotonic() - started
    statuses = [r["status"] for r in results]
    assert statuses.count("ok") == 2, results
    shed = [r for r in results if r["status"] == "rate_limited"]
    assert len(shed) == 2, results
    for result in shed:
        assert result["reason"] == "shed", result
        assert result["retry_after_ms"] >= 1, result
    stats = records(fake)
    assert stats["total"] == 2, stats
    assert max(r["in_flight"] for r in stats["requests"]) == 1, stats
    # One after the other: the queue waited for the permit, it did not overlap.
    first, second = sorted(r["t_ms"] for r in stats["requests"])
    assert second - first >= 250, stats
    assert elapsed < 5, elapsed


def test_the_proxy_swaps_in_the_secret(env):
    fake, sidecar = env["window_fake"], env["sidecar"]
    reset(fake)
    status, headers, body = request(
        "GET",
        sidecar.url + "/proxy/support/api/v2/tickets/7?x=1",
        headers={"authorization": "Bearer agent-key"},
    )
    assert status == 200, (status, body)
    assert body["path"] == "/api/v2/tickets/7?x=1", body
    lowered = {k.lower(): v for k, v in headers.items()}
    assert lowered.get("x-sluice-outcome") == "ok", headers
    stats = records(fake)
    assert stats["total"] == 1, stats
    # The fake keys requests by their Authorization: the credential's, not the agent's.
    assert stats["requests"][0]["key"] == "Bearer " + SECRET, stats

    status, _, body = request("GET", sidecar.url + "/proxy/support/%2e%2e/admin")
    assert status == 400, (status, body)
    assert records(fake)["total"] == 1


def test_status_and_metrics_never_show_the_secret(env):
    sidecar = env["sidecar"]
    status, _, body = request("GET", sidecar.url + "/v1/status")
    assert status == 200, body
    names = [c["name"] for c in body["credentials"]]
    assert names == ["slow", "support"], names
    status, _, text = request("GET", sidecar.url + "/metrics")
    assert status == 200
    assert "sluice_calls_total" in text, text
    status, _, body = request("GET", sidecar.url + "/healthz")
    assert status == 200, body
    for page in (json.dumps(request("GET", sidecar.url + "/v1/status")[2]), text):
        assert SECRET not in page


TESTS = [
    test_article_fanout_respects_the_window,
    test_single_flight_across_two_requests,
    test_a_full_queue_sheds,
    test_the_proxy_swaps_in_the_secret,
    test_status_and_metrics_never_show_the_secret,
]


def sidecar_config(window_url, slow_url):
    return f"""
[server]
listen = "127.0.0.1:7878"
max_body = "64KiB"

[defaults]
deadline = "10s"

[credentials.support]
base_url = "{window_url}"
secret_env = "SUPPORT_API_KEY"
rate = "3/200ms"

[credentials.slow]
base_url = "{slow_url}"
secret_env = "SUPPORT_API_KEY"
max_in_flight = 1
queue = 1

[tools.search_tickets]
credential = "support"
method = "GET"
path = "/api/v2/search.json?query={{query}}"
read = true

[tools.slow_search]
credential = "slow"
method = "GET"
path = "/search?query={{query}}"
read = true
"""


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    binary = os.path.abspath(sys.argv[1])
    processes = []
    passed = failed = 0
    try:
        window_fake = Process(
            "fake-api (window)",
            [binary, "fake-api", "--listen", "127.0.0.1:0", "--limit", "3/200ms", "--retry-after", "0.2"],
        )
        processes.append(window_fake)
        slow_fake = Process(
            "fake-api (slow)",
            [binary, "fake-api", "--listen", "127.0.0.1:0", "--limit", "100/1s", "--latency", "300ms"],
        )
        processes.append(slow_fake)
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as config:
            config.write(sidecar_config(window_fake.url, slow_fake.url))
        env = dict(os.environ, SUPPORT_API_KEY=SECRET, RUST_LOG="debug")
        sidecar = Process(
            "sluice serve",
            [binary, "serve", "--config", config.name, "--listen", "127.0.0.1:0"],
            env=env,
        )
        processes.append(sidecar)
        context = {"window_fake": window_fake, "slow_fake": slow_fake, "sidecar": sidecar}
        for test in TESTS:
            try:
                test(context)
            except Exception:  # report every failure, then go on
                failed += 1
                print(f"FAIL {test.__name__}", flush=True)
                traceback.print_exc()
            else:
                passed += 1
                print(f"ok   {test.__name__}", flush=True)
        sidecar.stop()
        logs = sidecar.stderr()
        if SECRET in logs:
            failed += 1
            print("FAIL the sidecar logged the secret", flush=True)
        if failed:
            print("--- sluice serve stderr ---\n" + logs[-4000:], file=sys.stderr)
        os.unlink(config.name)
    except Exception:
        failed += 1
        traceback.print_exc()
        for process in processes:
            print(f"--- {process.name} stderr ---\n{process.stderr()[-2000:]}", file=sys.stderr)
    finally:
        for process in processes:
            process.stop()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
