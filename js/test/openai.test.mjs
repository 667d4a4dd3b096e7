// The OpenAI JS SDK over gate.fetch: its requests are calls on the
// credential, sent from Rust when the engine grants them, so six concurrent
// completions against a fake allowing three per second all succeed and the
// fake refuses none.
import assert from "node:assert/strict";
import { test } from "node:test";

import OpenAI from "openai";
import { FakeApi, Gate, SluiceDeferred } from "sluice";
import { mostInWindow } from "./helpers.mjs";

test("six concurrent completions through gate.fetch: all succeed, zero 429s", async () => {
  const fake = await FakeApi.start({ allowed: 3, windowS: 1 });
  try {
    const gate = new Gate({
      defaults: { inline_wait: "10s" },
      credentials: { support: { base_url: fake.url, rate: "3/1s" } },
    });
    const client = new OpenAI({
      apiKey: "sk-test",
      baseURL: `${fake.url}/v1`,
      fetch: gate.fetch("support"),
      maxRetries: 0,
    });
    const completions = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        client.chat.completions.create({ model: "gpt-test", messages: [{ role: "user", content: `question ${i}` }] }),
      ),
    );
    assert.equal(completions.length, 6);
    const records = fake.requests();
    assert.equal(records.length, 6);
    assert.deepEqual(records.map((r) => r.status), [200, 200, 200, 200, 200, 200], "zero 429s");
    assert.ok(records.every((r) => r.method === "POST" && r.path === "/v1/chat/completions"));
    assert.ok(mostInWindow(fake.requestStarts(), 1.0) <= 3);
  } finally {
    fake.close();
  }
});

test("gate.fetch rejects with SluiceDeferred when sluice answers instead of the server", async () => {
  const fake = await FakeApi.start();
  try {
    const gate = new Gate({ credentials: { support: { base_url: fake.url, rate: "1/10s" } } });
    const sluiceFetch = gate.fetch("support", { deadlineMs: 300 });
    const first = await sluiceFetch(`${fake.url}/v1/models`);
    assert.equal(first.status, 200);
    assert.deepEqual(await first.json(), { path: "/v1/models", seq: 1 });
    await assert.rejects(sluiceFetch(`${fake.url}/v1/models?page=2`), (error) => {
      assert.ok(error instanceof SluiceDeferred);
      assert.equal(error.outcome.status, "rate_limited");
      assert.ok(error.retryAfterMs > 9000 && error.retryAfterMs <= 10100, `retryAfterMs ${error.retryAfterMs}`);
      return true;
    });
    assert.equal(fake.requests().length, 1, "the deferred request was never sent");
  } finally {
    fake.close();
  }
});

test("gate.fetch hands back the server's error responses and refuses other origins", async () => {
  const fake = await FakeApi.start();
  try {
    const gate = new Gate({ credentials: { support: { base_url: fake.url } } });
    const sluiceFetch = gate.fetch("support");
    const missing = await sluiceFetch(`${fake.url}/_fake/nothing-here`);
    assert.equal(missing.status, 404);
    const posted = await sluiceFetch(new Request(`${fake.url}/v1/things`, { method: "POST", body: "{}" }));
    assert.equal(posted.status, 200);
    const bytes = await sluiceFetch(new URL(`${fake.url}/v1/bytes`), {
      method: "post",
      body: new TextEncoder().encode("{}"),
      headers: { "content-type": "application/json" },
    });
    assert.equal(bytes.status, 200);
    assert.equal(bytes.url, `${fake.url}/v1/bytes`);
    assert.deepEqual(fake.requests().filter((r) => r.method === "POST").map((r) => [r.method, r.path]), [["POST", "/v1/things"], ["POST", "/v1/bytes"]]);
    await assert.rejects(sluiceFetch(`${fake.url}/x`, { body: "not on a GET" }), TypeError);
    await assert.rejects(sluiceFetch("http://127.0.0.1:9/elsewhere"), TypeError);
    await assert.rejects(sluiceFetch(`${fake.url}/x`, { method: "BAD METHOD" }), TypeError);
  } finally {
    fake.close();
  }
});
