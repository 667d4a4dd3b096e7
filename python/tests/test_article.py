"""The article's test: five searches in one turn against a key allowing three
per 200 ms. sluice waits for the window below the model's view: the fourth
request starts a whole window after the first, nothing is rejected, and the
model is told of no throttling."""

import asyncio

import sluice


def test_five_searches_in_one_turn_stay_under_the_limit(fake_api):
    gate = sluice.Gate(
        {
            "credentials": {"support": {"base_url": fake_api.url, "rate": "3/200ms"}},
            "tools": {
                "search_tickets": {"credential": "support", "path": "/api/v2/search.json?query={query}"}
            },
        }
    )
    fake_api.set_rate_limit(allowed=3, retry_after_s=0.2)

    async def turn():
        queries = ["refund", "late delivery", "invoice", "password", "cancel"]
        return await gate.turn().execute([sluice.call("search_tickets", {"query": q}) for q in queries])

    results = asyncio.run(turn())

    starts = fake_api.request_starts()
    # No 200 ms holds more than three starts (the first three need not
    # arrive together on a loaded machine: the fourth follows the first).
    assert starts[3] - starts[0] >= 0.2
    assert len(starts) == 5
    assert not any(result.status == "rate_limited" for result in results)
