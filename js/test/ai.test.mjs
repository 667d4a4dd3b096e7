// generateText from the AI SDK, with its own mock model, runs the 8 calls
// of the turn test through gateTools: the run completes, the step's calls
// share a turn (the duplicate read runs once), and the model sees each
// deferral as an object, not a tool error.
import assert from "node:assert/strict";
import { test } from "node:test";

import { generateText, jsonSchema, stepCountIs, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { FakeApi, Gate } from "sluice";
import { gateTools } from "sluice/ai";
import { supportConfig } from "./helpers.mjs";

const QUERIES = ["a", "b", "c", "a", "d", "e", "f", "g"];
const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

test("generateText runs the 8 calls through gateTools; the model sees deferrals as objects", async () => {
  const fake = await FakeApi.start({ allowed: 3, windowS: 1 });
  try {
    const gate = new Gate(supportConfig(fake.url, { rate: "3/1s", defaults: { inline_wait: "500ms" } }));
    let runs = 0;
    const tools = gateTools(
      gate,
      {
        search_tickets: tool({
          description: "Search the support tickets",
          inputSchema: jsonSchema({ type: "object", properties: { query: { type: "string" } }, required: ["query"] }),
          // A fetch Response: its status and headers are read for signals.
          execute: async ({ query }) => {
            runs++;
            return fetch(`${fake.url}/api/v2/search.json?query=${encodeURIComponent(query)}`);
          },
        }),
      },
      { credential: "support", reads: ["search_tickets"] },
    );
    const prompts = [];
    const model = new MockLanguageModelV3({
      doGenerate: async (options) => {
        prompts.push(options.prompt);
        if (prompts.length === 1) {
          return {
            content: QUERIES.map((query, i) => ({
              type: "tool-call",
              toolCallId: `call-${i}`,
              toolName: "search_tickets",
              input: JSON.stringify({ query }),
            })),
            finishReason: { unified: "tool-calls", raw: undefined },
            usage,
            warnings: [],
          };
        }
        return {
          content: [{ type: "text", text: "done" }],
          finishReason: { unified: "stop", raw: undefined },
          usage,
          warnings: [],
        };
      },
    });

    const result = await generateText({ model, tools, prompt: "find the tickets", stopWhen: stepCountIs(3) });

    assert.equal(result.text, "done");
    const paths = fake.requests().map((r) => r.path);
    assert.equal(paths.filter((p) => p.endsWith("query=a")).length, 1, "the step's calls shared a turn: the duplicate read ran once");
    assert.equal(runs, paths.length, "every run sent one request");
    const results = prompts[1]
      .filter((message) => message.role === "tool")
      .flatMap((message) => message.content)
      .filter((part) => part.type === "tool-result");
    assert.equal(results.length, 8);
    const deferred = results.filter((part) => part.output.value?.status === "rate_limited");
    assert.ok(deferred.length >= 1, "some calls were deferred");
    for (const part of deferred) {
      assert.equal(part.output.type, "json", "a deferral is an object the model reads, not an error");
      assert.ok(part.output.value.retry_after_ms > 0);
      assert.ok(part.output.value.hint);
    }
    const byId = Object.fromEntries(results.map((part) => [part.toolCallId, part.output]));
    assert.deepEqual(byId["call-3"], byId["call-0"], "the duplicate has the first one's answer");
    const answered = results.filter((part) => part.output.value?.path);
    // The step's calls asked for slots in the model's order: the first three got them.
    const ids = answered.map((part) => part.toolCallId);
    for (const id of ["call-0", "call-1", "call-2", "call-3"]) assert.ok(ids.includes(id), `${id} in ${ids}`);
    assert.equal(answered.length + deferred.length, 8);
    assert.ok(result.steps[0].content.every((part) => part.type !== "tool-error"));
  } finally {
    fake.close();
  }
});
