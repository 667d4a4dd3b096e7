"""Function tools: an `async def` under the whole pipeline. Every timing
assertion is on the fake's recorded starts: the functions call the fake."""

import asyncio

import httpx
import pytest

import sluice
from conftest import most_in_window


def billing_gate(rate="2/1s", **defaults):
    return sluice.Gate({"defaults": defaults, "credentials": {"billing": {"rate": rate}}}, seed=3)


def run(coroutine):
    return asyncio.run(coroutine)


def test_a_json_value_is_an_ok_outcome_with_that_body():
    gate = billing_gate()

    @gate.tool("lookup_usage", credential="billing", read=True)
    async def lookup_usage(customer_id, month="2026-11"):
        return {"customer_id": customer_id, "month": month, "calls": [1, 2.5, None, True]}

    out = run(gate.turn().call("lookup_usage", {"customer_id": "c1"}))
    assert out.status == "ok"
    assert out.http_status == 200
    assert out.body == {"customer_id": "c1", "month": "2026-11", "calls": [1, 2.5, None, True]}
    assert "lookup_usage" in gate.tools


def test_calls_are_paced_by_the_credentials_rate(fake_api):
    # The margin is the engine's allowance for a request reaching the server
    # later than its start slot; a busy event loop starts a task late. The
    # fifth call starts past 2 s (two windows of 1.1 s), so the inline wait
    # must cover that for all five to wait rather than be deferred.
    gate = billing_gate(rate="2/1s", window_margin="100ms", inline_wait="3s")
    client = httpx.AsyncClient()

    @gate.tool("lookup_usage", credential="billing", read=True)
    async def lookup_usage(customer_id):
        return await client.get(f"{fake_api.url}/usage/{customer_id}")

    async def turn():
        async with client:
            return await gate.turn().execute([sluice.call("lookup_usage", {"customer_id": f"c{i}"}) for i in range(5)])

    outs = run(turn())
    assert [o.status for o in outs] == ["ok"] * 5
    assert outs[0].body["path"] == "/usage/c0"
    starts = fake_api.request_starts()
    assert len(starts) == 5
    assert most_in_window(starts, 1.0) <= 2
    assert starts[4] - starts[0] >= 2.0


def test_identical_reads_coalesce_and_writes_do_not(fake_api):
    gate = billing_gate(rate="10/1s")
    runs = []

    @gate.tool("lookup_usage", credential="billing", read=True)
    async def lookup_usage(customer_id):
        runs.append(("read", customer_id))
        await asyncio.sleep(0.05)
        return {"customer_id": customer_id}

    @gate.tool("refund", credential="billing")
    async def refund(customer_id):
        runs.append(("write", customer_id))
        return {"refunded": customer_id}

    calls = [sluice.call("lookup_usage", {"customer_id": "c1"})] * 3 + [sluice.call("refund", {"customer_id": "c1"})] * 2
    outs = run(gate.turn().execute(calls))
    assert [o.status for o in outs] == ["ok"] * 5
    assert sorted(runs) == [("read", "c1"), ("write", "c1"), ("write", "c1")]


def test_an_httpx_response_is_read_as_sluice_reads_its_own(fake_api):
    gate = billing_gate(rate="10/1s", inline_wait="3s")
    fake_api.set_rate_limit(allowed=1, window_s=1.0)

    @gate.tool("lookup_usage", credential="billing", read=True)
    async def lookup_usage(customer_id):
        async with httpx.AsyncClient() as client:
            return await client.get(f"{fake_api.url}/usage/{customer_id}")

    # The second call's first attempt is refused with Retry-After; sluice
    # waits it out and retries through the bucket, below the model's view.
    outs = run(gate.turn().execute([sluice.call("lookup_usage", {"customer_id": c}) for c in ("a", "b")]))
    assert [o.status for o in outs] == ["ok", "ok"]
    statuses = [r["status"] for r in fake_api.requests()]
    assert statuses == [200, 429, 200]
    starts = fake_api.request_starts()
    assert starts[2] - starts[0] >= 1.0, "the retry waited for the server's window"


def test_http_status_error_is_read_from_its_response(fake_api):
    gate = billing_gate(rate="10/1s")

    @gate.tool("lookup_usage", credential="billing", read=True)
    async def lookup_usage(customer_id):
        async with httpx.AsyncClient() as client:
            response = await client.get(f"{fake_api.url}/_fake/nothing-here")
            response.raise_for_status()
            return {"unreachable": True}

    out = run(gate.turn().call("lookup_usage", {"customer_id": "a"}))
    assert out.status == "error"
    assert out.http_status == 404
    assert "upstream answered 404" in out.message


def test_an_exception_is_an_error_outcome_with_its_message_and_is_not_retried():
    gate = billing_gate(rate="10/1s")
    attempts = []

    @gate.tool("lookup_usage", credential="billing", read=True)
    async def lookup_usage(customer_id):
        attempts.append(customer_id)
        raise KeyError(customer_id)

    out = run(gate.turn().call("lookup_usage", {"customer_id": "c9"}))
    assert out.to_dict() == {"status": "error", "message": "KeyError: 'c9'"}
    assert attempts == ["c9"]


def test_a_value_that_is_not_json_is_an_error_outcome():
    gate = billing_gate()

    @gate.tool("lookup_usage", credential="billing")
    async def lookup_usage():
        return {"when": object()}

    out = run(gate.turn().call("lookup_usage"))
    assert out.status == "error"
    assert "not JSON" in out.message


def test_a_transport_error_is_retried_like_a_connection_error(fake_api):
    gate = billing_gate(rate="10/1s", backoff_base="10ms", backoff_cap="20ms")
    attempts = []

    @gate.tool("lookup_usage", credential="billing", read=True)
    async def lookup_usage():
        attempts.append(1)
        if len(attempts) < 3:
            raise httpx.ConnectError("refused")
        async with httpx.AsyncClient() as client:
            return await client.get(f"{fake_api.url}/usage")

    out = run(gate.turn().call("lookup_usage"))
    assert out.status == "ok"
    assert len(attempts) == 3
    assert len(fake_api.request_starts()) == 1


def test_a_tool_that_outlives_its_deadline_is_cancelled_and_times_out():
    gate = billing_gate()
    seen = []

    @gate.tool("slow", credential="billing", deadline_ms=100)
    async def slow():
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def turn():
        out = await gate.turn().call("slow")
        await asyncio.sleep(0.05)
        return out

    out = run(turn())
    assert out.status == "timed_out"
    assert out.after_ms == 100
    assert seen == ["cancelled"]


def test_contextvars_of_the_caller_reach_the_tool():
    import contextvars

    request_id = contextvars.ContextVar("request_id", default=None)
    gate = billing_gate()

    @gate.tool("whoami", credential="billing")
    async def whoami():
        return {"request_id": request_id.get()}

    async def turn():
        request_id.set("r-42")
        return await gate.turn().call("whoami")

    assert run(turn()).body == {"request_id": "r-42"}


def test_registration_checks_its_arguments():
    gate = sluice.Gate({"credentials": {"billing": {}}, "tools": {}})
    with pytest.raises(ValueError, match="unknown credential"):
        gate.tool("t", credential="nobody")
    with pytest.raises(TypeError, match="async def"):

        @gate.tool("t", credential="billing")
        def not_async():
            return 1

    configured = sluice.Gate(
        {"credentials": {"s": {"base_url": "http://127.0.0.1:9"}}, "tools": {"x": {"credential": "s", "path": "/x"}}}
    )
    with pytest.raises(ValueError, match="already configured"):
        configured.tool("x", credential="s")
