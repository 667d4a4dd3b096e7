"""The httpx transport, with the real OpenAI and Anthropic SDKs pointed at
the fake (`max_retries=0`, raw responses), and with plain httpx clients."""

import asyncio

import anthropic
import httpx
import httpx2
import openai
import pytest

import sluice
import sluice.httpx2
from conftest import most_in_window


def sdk_gate(credential, rate=None, **defaults):
    # The engine's allowance for a request reaching the server later than
    # its start slot (a busy event loop starts a task late).
    defaults.setdefault("window_margin", "100ms")
    limits = {} if rate is None else {"rate": rate}
    return sluice.Gate({"defaults": defaults, "credentials": {credential: limits}}, seed=11)


def run(coroutine):
    return asyncio.run(coroutine)


def chat(client):
    return client.chat.completions.with_raw_response.create(
        model="gpt-test", messages=[{"role": "user", "content": "hi"}]
    )


def test_openai_async_requests_are_paced_to_the_key(fake_api):
    fake_api.set_rate_limit(allowed=2, window_s=1.0)
    # The fifth request starts past 2 s (two windows widened by the margin):
    # an inline wait of 3 s lets all five wait below the SDK's view.
    gate = sdk_gate("openai", rate="2/1s", inline_wait="3s")

    async def five():
        transport = sluice.HTTPTransport(gate, credential="openai")
        async with httpx.AsyncClient(transport=transport) as http_client:
            client = openai.AsyncOpenAI(
                api_key="sk-test", base_url=f"{fake_api.url}/v1", http_client=http_client, max_retries=0
            )
            return await asyncio.gather(*[chat(client) for _ in range(5)])

    raws = run(five())
    assert [raw.status_code for raw in raws] == [200] * 5
    assert raws[0].http_response.json()["path"] == "/v1/chat/completions"
    records = fake_api.requests()
    assert [r["status"] for r in records] == [200] * 5, "no request was refused"
    assert {r["key"] for r in records} == {"Bearer sk-test"}
    starts = fake_api.request_starts()
    assert most_in_window(starts, 1.0) <= 2
    assert starts[4] - starts[0] >= 2.0


def test_openai_sees_deferred_when_the_server_asks_for_a_long_wait(fake_api):
    fake_api.set_rate_limit(allowed=1, retry_after_s=30)
    gate = sdk_gate("openai")

    async def three():
        transport = sluice.HTTPTransport(gate, credential="openai")
        async with httpx.AsyncClient(transport=transport) as http_client:
            client = openai.AsyncOpenAI(
                api_key="sk-test", base_url=f"{fake_api.url}/v1", http_client=http_client, max_retries=0
            )
            first = await chat(client)
            deferred = []
            for _ in range(2):
                with pytest.raises(sluice.Deferred) as error:
                    await chat(client)
                deferred.append(error.value.outcome)
            return first, deferred

    first, deferred = run(three())
    assert first.status_code == 200
    assert [o.status for o in deferred] == ["rate_limited", "rate_limited"]
    assert all(25_000 <= o.retry_after_ms <= 30_100 for o in deferred)
    assert deferred[0].scope == "api_key"
    # The server's 429 was seen once; after it, sluice sent nothing.
    assert [r["status"] for r in fake_api.requests()] == [200, 429]


def test_openai_sync_client_through_the_sync_transport(fake_api):
    fake_api.set_rate_limit(allowed=2, window_s=1.0)
    gate = sdk_gate("openai", rate="2/1s")
    with httpx.Client(transport=sluice.SyncHTTPTransport(gate, credential="openai")) as http_client:
        client = openai.OpenAI(api_key="sk-test", base_url=f"{fake_api.url}/v1", http_client=http_client, max_retries=0)
        raws = [chat(client) for _ in range(3)]
    assert [raw.status_code for raw in raws] == [200] * 3
    starts = fake_api.request_starts()
    assert len(starts) == 3 and most_in_window(starts, 1.0) <= 2
    assert starts[2] - starts[0] >= 1.0


def anthropic_message(client):
    return client.messages.with_raw_response.create(
        model="claude-test", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
    )


def test_anthropic_async_through_the_httpx2_transport(fake_api):
    fake_api.set_rate_limit(allowed=2, window_s=1.0)
    gate = sdk_gate("anthropic", rate="2/1s")

    async def three():
        transport = sluice.httpx2.HTTPTransport(gate, credential="anthropic")
        async with httpx2.AsyncClient(transport=transport) as http_client:
            client = anthropic.AsyncAnthropic(
                api_key="sk-ant-test", base_url=fake_api.url, http_client=http_client, max_retries=0
            )
            return await asyncio.gather(*[anthropic_message(client) for _ in range(3)])

    raws = run(three())
    assert [raw.status_code for raw in raws] == [200] * 3
    assert raws[0].http_response.json()["path"] == "/v1/messages"
    records = fake_api.requests()
    assert [r["status"] for r in records] == [200] * 3
    assert len({r["key"] for r in records}) == 1, "one key"
    assert most_in_window(fake_api.request_starts(), 1.0) <= 2


def test_anthropic_keeps_the_deferral_as_the_cause(fake_api):
    fake_api.set_rate_limit(allowed=1, retry_after_s=30)
    gate = sdk_gate("anthropic")
    with httpx2.Client(transport=sluice.httpx2.SyncHTTPTransport(gate, credential="anthropic")) as http_client:
        client = anthropic.Anthropic(api_key="sk-ant-test", base_url=fake_api.url, http_client=http_client, max_retries=0)
        assert anthropic_message(client).status_code == 200
        with pytest.raises(anthropic.APIConnectionError) as error:
            anthropic_message(client)
    deferred = sluice.deferred_from(error.value)
    assert deferred is not None
    assert deferred.outcome.status == "rate_limited"
    assert [r["status"] for r in fake_api.requests()] == [200, 429]


def test_requests_in_one_turn_coalesce_identical_gets(fake_api):
    gate = sdk_gate("plain", rate="10/1s")

    async def gets():
        async with httpx.AsyncClient(transport=sluice.HTTPTransport(gate, credential="plain")) as client:
            with gate.turn():
                together = await asyncio.gather(*[client.get(f"{fake_api.url}/items?page=1") for _ in range(3)])
            apart = await asyncio.gather(*[client.get(f"{fake_api.url}/items?page=2") for _ in range(2)])
            return together + apart

    responses = run(gets())
    assert [r.status_code for r in responses] == [200] * 5
    assert len({r.json()["seq"] for r in responses[:3]}) == 1, "one answer shared in the turn"
    paths = [r["path"] for r in fake_api.requests()]
    assert paths.count("/items?page=1") == 1
    assert paths.count("/items?page=2") == 2, "outside a turn, each request is its own"


def test_an_upstream_error_response_is_returned_as_is(fake_api):
    gate = sdk_gate("plain")

    async def get():
        async with httpx.AsyncClient(transport=sluice.HTTPTransport(gate, credential="plain")) as client:
            return await client.get(f"{fake_api.url}/_fake/nothing")

    response = run(get())
    assert response.status_code == 404
    assert "unknown control endpoint" in response.json()["error"]


def test_a_connection_failure_is_retried_then_raised_as_httpx_raised_it():
    gate = sdk_gate("plain", backoff_base="10ms", backoff_cap="20ms")
    attempts = []

    def refuse(request):
        attempts.append(request.url)
        raise httpx.ConnectError("refused", request=request)

    inner = httpx.MockTransport(refuse)
    with httpx.Client(transport=sluice.SyncHTTPTransport(gate, credential="plain", transport=inner)) as client:
        with pytest.raises(httpx.ConnectError, match="refused"):
            client.post("http://127.0.0.1:9/x", json={"a": 1})
    assert len(attempts) == 4, "a refused connection sent nothing, so even a write is retried"


def test_the_transport_checks_its_credential():
    gate = sdk_gate("openai")
    with pytest.raises(ValueError, match="unknown credential"):
        sluice.HTTPTransport(gate, credential="nobody")
    with pytest.raises(ValueError):
        sluice.HTTPTransport(object(), credential="openai")


def test_a_short_server_wait_is_absorbed_and_the_retry_paced(fake_api):
    # No rate configured: only the server's signals limit the key.
    fake_api.set_rate_limit(allowed=1, window_s=1.0)
    gate = sdk_gate("openai")
    with httpx.Client(transport=sluice.SyncHTTPTransport(gate, credential="openai")) as http_client:
        client = openai.OpenAI(api_key="sk-test", base_url=f"{fake_api.url}/v1", http_client=http_client, max_retries=0)
        raws = [chat(client) for _ in range(2)]
    assert [raw.status_code for raw in raws] == [200, 200], "the SDK never saw the 429"
    assert [r["status"] for r in fake_api.requests()] == [200, 429, 200]
    starts = fake_api.request_starts()
    assert starts[2] - starts[0] >= 1.0, "the retry waited for the server's window"
