"""Cancelling the awaiting task cancels the call: a queued call sends
nothing (the fake's record says so), an attempt in flight is dropped."""

import asyncio

import httpx

import sluice
import sluice.testing
from conftest import support_gate


def test_a_queued_call_that_is_cancelled_sends_nothing(fake_api):
    # One per second: the second call waits inline for its slot.
    gate = support_gate(fake_api.url, rate="1/1s")

    async def scenario():
        turn = gate.turn()
        first = await turn.call("search_tickets", {"query": "a"})
        waiting = asyncio.ensure_future(turn.call("search_tickets", {"query": "b"}))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        waiting.cancel()
        try:
            await waiting
        except asyncio.CancelledError:
            cancelled = True
        else:
            cancelled = False
        await asyncio.sleep(1.2)
        later = await gate.turn().call("search_tickets", {"query": "c"})
        return first, cancelled, later

    first, cancelled, later = asyncio.run(scenario())
    assert first.status == "ok" and later.status == "ok"
    assert cancelled
    paths = [r["path"] for r in fake_api.requests()]
    assert paths == ["/api/v2/search.json?query=a", "/api/v2/search.json?query=c"]


def test_a_cancelled_batch_sends_none_of_its_queued_calls(fake_api):
    gate = support_gate(fake_api.url, rate="2/1s")

    async def scenario():
        batch = asyncio.ensure_future(
            gate.turn().execute([sluice.call("search_tickets", {"query": str(i)}) for i in range(6)])
        )
        await asyncio.sleep(0.2)
        batch.cancel()
        await asyncio.gather(batch, return_exceptions=True)
        await asyncio.sleep(1.5)

    asyncio.run(scenario())
    assert len(fake_api.request_starts()) == 2, "only the two admitted at once were sent"


def test_a_function_tool_in_flight_is_cancelled_with_its_caller():
    gate = sluice.Gate({"credentials": {"billing": {"rate": "10/1s"}}})
    events = []

    @gate.tool("slow", credential="billing")
    async def slow():
        events.append("started")
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            events.append("cancelled")
            raise

    async def scenario():
        task = asyncio.ensure_future(gate.turn().call("slow"))
        await asyncio.sleep(0.1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0.05)
        return task.cancelled()

    assert asyncio.run(scenario())
    assert events == ["started", "cancelled"]


def test_a_transport_request_in_flight_is_dropped_with_its_caller():
    fake_slow = sluice.testing.FakeApi(latency_s=5.0)
    try:
        gate = sluice.Gate({"credentials": {"plain": {}}})

        async def scenario():
            async with httpx.AsyncClient(transport=sluice.HTTPTransport(gate, credential="plain")) as client:
                task = asyncio.ensure_future(client.get(f"{fake_slow.url}/slow"))
                # Cancel once the request is in flight: the fake has it.
                for _ in range(500):
                    if fake_slow.request_starts():
                        break
                    await asyncio.sleep(0.01)
                started = asyncio.get_running_loop().time()
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                waited = asyncio.get_running_loop().time() - started
                # The slot is free again: the scope's in-flight count is back to 0.
                await asyncio.sleep(0.05)
                return task.cancelled(), waited, gate.in_flight("plain")

        cancelled, waited, in_flight = asyncio.run(scenario())
        assert cancelled
        assert waited < 1.0, "the caller did not wait for the upstream answer"
        assert in_flight == 0
        assert len(fake_slow.request_starts()) == 1
    finally:
        fake_slow.close()
