"""What a call that needs no wait costs, counted rather than timed: the
event-loop iterations it takes, and the response it hands back."""

import asyncio
import sys

import httpx
import sluice


def counting_iterations(loop):
    """Counts the loop's iterations from now on: returns the counter and an undo."""
    counter = [0]
    run_once = loop._run_once

    def counted():
        counter[0] += 1
        run_once()

    loop._run_once = counted

    def undo():
        loop._run_once = run_once

    return counter, undo


def test_a_response_built_in_memory_is_handed_back_as_it_came():
    built = []

    def handler(request):
        response = httpx.Response(200, json={"n": len(built)})
        built.append(response)
        return response

    gate = sluice.Gate({"credentials": {"api": {}}})

    async def scenario():
        transport = sluice.HTTPTransport(gate, credential="api", transport=httpx.MockTransport(handler))
        async with httpx.AsyncClient(transport=transport) as client:
            first = await client.get("http://api.invalid/a")
            second = await client.post("http://api.invalid/b", json={"x": 1})
        return first, second

    first, second = asyncio.run(scenario())
    assert first is built[0] and second is built[1], "not rebuilt"
    assert first.json() == {"n": 0} and second.json() == {"n": 1}
    assert first.request.url == "http://api.invalid/a"


def test_a_streamed_response_is_rebuilt_from_the_body_read_once():
    class Streamed(httpx.AsyncByteStream):
        async def __aiter__(self):
            yield b'{"streamed": '
            yield b"true}"

    def handler(request):
        return httpx.Response(200, headers={"content-type": "application/json"}, stream=Streamed())

    gate = sluice.Gate({"credentials": {"api": {}}})

    async def scenario():
        transport = sluice.HTTPTransport(gate, credential="api", transport=httpx.MockTransport(handler))
        async with httpx.AsyncClient(transport=transport) as client:
            return await client.get("http://api.invalid/s")

    response = asyncio.run(scenario())
    assert response.json() == {"streamed": True}
    assert response.status_code == 200


# Eager tasks came in Python 3.12: there a call that needs no wait takes no
# iteration of the loop; before, its attempt's task takes three (created,
# run, its caller resumed).
ITERATIONS_PER_CALL = 0 if sys.version_info >= (3, 12) else 3


def test_a_call_that_needs_no_wait_takes_no_event_loop_iteration_from_3_12():
    gate = sluice.Gate({"credentials": {"api": {"rate": "1000/1s"}}})

    @gate.tool("noop", credential="api")
    async def noop():
        return {"done": True}

    async def scenario():
        loop = asyncio.get_running_loop()
        transport = sluice.HTTPTransport(
            gate, credential="api", transport=httpx.MockTransport(lambda r: httpx.Response(200, json={}))
        )
        async with httpx.AsyncClient(transport=transport) as client:
            turn = gate.turn()
            await turn.call("noop")
            await client.get("http://api.invalid/warm")
            counter, undo = counting_iterations(loop)
            try:
                outcomes = [await turn.call("noop") for _ in range(20)]
                responses = [await client.get(f"http://api.invalid/{i}") for i in range(20)]
            finally:
                undo()
        return counter[0], outcomes, responses

    iterations, outcomes, responses = asyncio.run(scenario())
    assert [o.status for o in outcomes] == ["ok"] * 20
    assert outcomes[0].body == {"done": True}
    assert [r.status_code for r in responses] == [200] * 20
    assert iterations == ITERATIONS_PER_CALL * 40
