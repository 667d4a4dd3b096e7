// Bad configs name their field; AbortSignal cancels a waiting call (which
// then never sends); function tools; and no input crashes the process.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ConfigError, FakeApi, Gate } from "sluice";
import { supportConfig } from "./helpers.mjs";

const BAD = [
  [{ credentials: { support: { rate: "0/1s" } } }, "credentials.support.rate"],
  [{ credentials: { support: { rate: "10/1s", colour: "red" } } }, "credentials.support.colour"],
  [{ defaults: { deadline: "300000000000y" } }, "defaults.deadline"],
  [{ credentials: { support: { max_in_flight: -1 } } }, "credentials.support.max_in_flight"],
  [{ tools: { t: { credential: "nobody", path: "/x" } } }, "tools.t.credential"],
  [{ credentials: { s: { base_url: "ftp://x" } } }, "credentials.s.base_url"],
  ['[credentials.support]\nrate = "0/1s"\n', "credentials.support.rate"],
];

test("a bad config throws ConfigError naming the field, an unknown field too", () => {
  for (const [config, field] of BAD) {
    assert.throws(
      () => new Gate(config),
      (error) => error instanceof ConfigError && error.field === field && error.message.startsWith(field),
      field,
    );
  }
  assert.throws(() => new Gate("[credentials"), (error) => error instanceof ConfigError && /line 1/.test(error.message));
  for (const notConfig of [42, null, undefined, [], true]) {
    assert.throws(() => new Gate(notConfig), TypeError);
  }
  assert.throws(() => new Gate({ credentials: { s: { rate: 10n } } }), TypeError);
});

test("a missing secret is named, never shown", () => {
  const config = { credentials: { s: { base_url: "http://127.0.0.1:9", secret_env: "SLUICE_JS_TEST_KEY" } } };
  delete process.env.SLUICE_JS_TEST_KEY;
  assert.throws(() => new Gate(config), (error) => error.field === "credentials.s.secret_env");
  process.env.SLUICE_JS_TEST_KEY = "sk-very-secret";
  const gate = new Gate(config);
  assert.ok(!JSON.stringify(gate.credentials).includes("sk-very-secret"));
});

test("an AbortSignal cancels a call waiting for its slot: it rejects and never sends", async () => {
  const fake = await FakeApi.start();
  try {
    const gate = new Gate(supportConfig(fake.url, { rate: "1/1s", defaults: { inline_wait: "5s" } }));
    const turn = gate.turn();
    assert.equal((await turn.call("search_tickets", { query: "a" })).status, "ok");
    const controller = new AbortController();
    const waiting = turn.call("search_tickets", { query: "b" }, { signal: controller.signal });
    setTimeout(() => controller.abort(), 100);
    await assert.rejects(waiting, (error) => error.name === "AbortError");
    const batch = new AbortController();
    const both = gate.turn().execute(
      [{ tool: "search_tickets", args: { query: "c" } }, { tool: "search_tickets", args: { query: "d" } }],
      { signal: batch.signal },
    );
    setTimeout(() => batch.abort(new Error("stop")), 100);
    await assert.rejects(both, /stop/);
    await assert.rejects(gate.call("search_tickets", { query: "e" }, { signal: AbortSignal.abort() }), (e) => e.name === "AbortError");
    const fetchAbort = new AbortController();
    const fetching = gate.fetch("support")(`${fake.url}/f`, { signal: fetchAbort.signal });
    setTimeout(() => fetchAbort.abort(), 100);
    await assert.rejects(fetching, (error) => error.name === "AbortError");
    // Past the slot the cancelled calls would have had: none of them was sent.
    await new Promise((resolve) => setTimeout(resolve, 1300));
    assert.deepEqual(fake.requests().map((r) => r.path), ["/api/v2/search.json?query=a"]);
  } finally {
    fake.close();
  }
});

test("function tools: a value, a Response read for signals, a throw that is not retried, reads coalesced", async () => {
  const fake = await FakeApi.start({ allowed: 1, windowS: 1 });
  try {
    const gate = new Gate({
      defaults: { inline_wait: "3s" },
      credentials: { billing: { rate: "10/1s" } },
    });
    const runs = [];
    gate.tool("lookup", { credential: "billing", read: true }, async ({ id }) => {
      runs.push(id);
      await new Promise((resolve) => setTimeout(resolve, 30));
      return { id };
    });
    gate.tool("usage", { credential: "billing", read: true }, async ({ id }) => fetch(`${fake.url}/usage/${id}`));
    let thrown = 0;
    gate.tool("broken", { credential: "billing" }, async () => {
      thrown++;
      throw new RangeError("no such customer");
    });
    const outs = await gate.turn().execute([
      { tool: "lookup", args: { id: "c1" } },
      { tool: "lookup", args: { id: "c1" } },
      { tool: "broken" },
    ]);
    assert.deepEqual(outs.map((o) => o.status), ["ok", "ok", "error"]);
    assert.deepEqual(outs[0].body, { id: "c1" });
    assert.deepEqual(runs, ["c1"], "identical reads in one turn run once");
    assert.deepEqual(outs[2].toJSON(), { status: "error", message: "RangeError: no such customer" });
    assert.equal(thrown, 1);

    // The second call's first attempt is refused with Retry-After; sluice
    // waits it out and retries through the bucket.
    const usage = await gate.turn().execute([{ tool: "usage", args: { id: "a" } }, { tool: "usage", args: { id: "b" } }]);
    assert.deepEqual(usage.map((o) => o.status), ["ok", "ok"]);
    assert.deepEqual(fake.requests().map((r) => r.status), [200, 429, 200]);
    const starts = fake.requestStarts();
    assert.ok(starts[2] - starts[0] >= 1.0, "the retry waited for the server's window");
    assert.ok(gate.tools.includes("usage"));
  } finally {
    fake.close();
  }
});

test("no input crashes: each is an outcome, a TypeError or a RangeError", async () => {
  const fake = await FakeApi.start();
  try {
    const gate = new Gate(supportConfig(fake.url));
    const turn = gate.turn();
    const cyclic = {};
    cyclic.self = cyclic;
    const weird = [undefined, null, 0, -1, NaN, Infinity, "", "x", [], [1], {}, { query: 1n }, cyclic, () => 1, Symbol("s"), new Date(0), { query: "\u0000\ud800" }];
    for (const tool of [...weird, "search_tickets", "create_ticket", "no_such_tool"]) {
      for (const args of weird) {
        for (const deadlineMs of [undefined, 1, 0, -5, NaN, Infinity, "10", 1e300]) {
          try {
            const out = await turn.call(tool, args, { deadlineMs });
            assert.ok(["ok", "error", "rate_limited", "timed_out"].includes(out.status), `${out.status}`);
          } catch (error) {
            assert.ok(error instanceof TypeError || error instanceof RangeError, `${error}`);
          }
        }
      }
    }
    for (const calls of [undefined, null, "x", [null], [1], [{}], [{ tool: 5, args: "x" }]]) {
      try {
        const outs = await turn.execute(calls);
        assert.ok(Array.isArray(outs));
      } catch (error) {
        assert.ok(error instanceof TypeError || error instanceof RangeError, `${error}`);
      }
    }
    assert.throws(() => gate.tool("", { credential: "support" }, async () => 1), TypeError);
    assert.throws(() => gate.tool("t", { credential: "nobody" }, async () => 1), TypeError);
    assert.throws(() => gate.tool("t", null, async () => 1), TypeError);
    assert.throws(() => gate.tool("t", { credential: "support" }, "not a function"), TypeError);
    assert.throws(() => gate.fetch("nobody"), TypeError);
    assert.throws(() => gate.fetch("support", { deadlineMs: -1 }), RangeError);
    for (const options of [{ allowed: -1 }, { allowed: 1.5 }, { windowS: -1 }, { retryAfterS: NaN }, { headers: "nonsense" }]) {
      await assert.rejects(FakeApi.start(options), RangeError, JSON.stringify(options));
    }
    assert.equal(gate.inFlight("nobody"), 0);
    const sluiceFetch = gate.fetch("support");
    const badFetches = [
      [undefined],
      [123],
      ["not a url"],
      [`${fake.url}/x`, { headers: { "bad header": "x" } }],
      [`${fake.url}/x`, { method: "GET", body: "x" }],
      [`${fake.url}/x`, { method: "BAD METHOD" }],
      [`${fake.url}/x`, { signal: "not a signal" }],
      ["http://127.0.0.1:1/elsewhere"],
    ];
    for (const call of badFetches) {
      await assert.rejects(sluiceFetch(...call), TypeError, JSON.stringify(call));
    }
    const functionsOnly = new Gate({ credentials: { billing: {} } });
    await assert.rejects(functionsOnly.fetch("billing")("http://127.0.0.1:9/x"), /has no base_url/);
  } finally {
    fake.close();
  }
});
