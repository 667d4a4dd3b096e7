// A turn of 8 calls against a fake allowing 3 per rolling second, with a
// 500 ms inline wait: the rate holds, the duplicate read is sent once, and
// the calls that cannot start within 500 ms are deferred with when to come back.
import assert from "node:assert/strict";
import { test } from "node:test";

import { FakeApi, Gate } from "sluice";
import { mostInWindow, supportConfig } from "./helpers.mjs";

export const QUERIES = ["a", "b", "c", "a", "d", "e", "f", "g"];

test("eight calls: the rate bound, one request for the duplicate, a deferral with retry_after_ms", async () => {
  const fake = await FakeApi.start({ allowed: 3, windowS: 1 });
  try {
    const gate = new Gate(supportConfig(fake.url, { rate: "3/1s", defaults: { inline_wait: "500ms" } }));
    const outcomes = await gate.turn().execute(QUERIES.map((query) => ({ tool: "search_tickets", args: { query } })));

    const starts = fake.requestStarts();
    assert.ok(mostInWindow(starts, 1.0) <= 3, `starts ${starts}`);
    const paths = fake.requests().map((r) => r.path);
    assert.equal(paths.filter((p) => p.endsWith("query=a")).length, 1, "the duplicate read was sent once");
    assert.ok(fake.requests().every((r) => r.status === 200), "the fake refused nothing");

    assert.equal(outcomes[0].status, "ok");
    assert.deepEqual(outcomes[3].toJSON(), outcomes[0].toJSON(), "the duplicate has the first one's answer");
    const deferred = outcomes.filter((o) => o.status === "rate_limited");
    assert.ok(deferred.length >= 1, "some calls could not start within 500 ms");
    // Each deferred call is told when a start would be free for it, after
    // the calls ahead of it (issue 50): seven distinct calls at 3 a second
    // all start within two windows widened by the margin.
    for (const outcome of deferred) {
      assert.ok(outcome.retryAfterMs > 0 && outcome.retryAfterMs <= 2200, `retry_after_ms ${outcome.retryAfterMs}`);
      assert.equal(outcome.toJSON().retry_after_ms, outcome.retryAfterMs);
      assert.ok(outcome.hint);
    }
    const sent = outcomes.filter((o) => o.status === "ok").length;
    assert.equal(sent + deferred.length, 8);
  } finally {
    fake.close();
  }
});

test("toJSON is the sidecar's JSON, keys in its order", async () => {
  const fake = await FakeApi.start();
  try {
    const gate = new Gate(supportConfig(fake.url));
    const out = await gate.call("search_tickets", { query: "a" });
    assert.equal(JSON.stringify(out), '{"status":"ok","http_status":200,"body":{"path":"/api/v2/search.json?query=a","seq":1}}');
    assert.equal(out.httpStatus, 200);
    assert.equal(out.retryAfterMs, null);
    const unknown = await gate.call("no_such_tool");
    assert.deepEqual(unknown.toJSON(), { status: "error", message: 'unknown tool "no_such_tool"' });
  } finally {
    fake.close();
  }
});
