// The article's test: five searches in one turn against a key allowing
// three per 200 ms. sluice waits for the window below the model's view: the
// fourth and fifth requests start a whole window after the third, nothing
// is rejected, and the model is told of no throttling.
import assert from "node:assert/strict";
import { test } from "node:test";

import { FakeApi, Gate } from "sluice";

test("five searches in one turn stay under the limit", async () => {
  const fake = await FakeApi.start({ allowed: 3, retryAfterS: 0.2 });
  try {
    const gate = new Gate({
      credentials: { support: { base_url: fake.url, rate: "3/200ms" } },
      tools: { search_tickets: { credential: "support", path: "/api/v2/search.json?query={query}" } },
    });
    const queries = ["refund", "late delivery", "invoice", "password", "cancel"];
    const results = await gate.turn().execute(queries.map((query) => ({ tool: "search_tickets", args: { query } })));

    const starts = fake.requestStarts();
    assert.equal(starts.length, 5);
    assert.ok(starts[3] - starts[2] >= 0.2, `4th started ${starts[3] - starts[2]} s after the 3rd`);
    assert.ok(starts[4] - starts[2] >= 0.2, `5th started ${starts[4] - starts[2]} s after the 3rd`);
    assert.ok(!results.some((result) => result.status === "rate_limited"));
    assert.deepEqual(fake.requests().map((r) => r.status), [200, 200, 200, 200, 200]);
  } finally {
    fake.close();
  }
});
