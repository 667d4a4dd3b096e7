"use strict";
// `gateTools`: an AI SDK `tools` record whose calls go through a gate. The
// calls of one step share a turn; a call sluice does not answer `ok`
// resolves to the outcome's JSON, which the model sees.

const { Gate } = require("./gate.cjs");

/**
 * @param {Gate} gate
 * @param {Record<string, any>} tools an AI SDK tools record (`tool({ description, inputSchema, execute })`)
 * @param {{ credential: string, reads?: string[], idempotent?: string[], deadlineMs?: number }} options
 */
function gateTools(gate, tools, options) {
  if (!(gate instanceof Gate)) throw new TypeError("gate must be a sluice Gate");
  if (tools === null || typeof tools !== "object") throw new TypeError("tools must be an AI SDK tools record");
  const { credential, reads = [], idempotent = [], deadlineMs } = options ?? {};
  if (typeof credential !== "string" || !gate.credentials.includes(credential)) {
    const known = gate.credentials.join(", ") || "none";
    throw new TypeError(`unknown credential ${JSON.stringify(credential)} (configured: ${known})`);
  }
  const readSet = new Set(reads);
  const idempotentSet = new Set(idempotent);
  // One turn per step: the AI SDK hands every call of a step the same
  // `messages` array.
  const turns = new WeakMap();
  const turnFor = (messages) => {
    if (messages === null || typeof messages !== "object") return gate.turn();
    let turn = turns.get(messages);
    if (turn === undefined) {
      turn = gate.turn();
      turns.set(messages, turn);
    }
    return turn;
  };
  const wrapped = {};
  for (const [name, tool] of Object.entries(tools)) {
    if (tool === null || typeof tool !== "object" || typeof tool.execute !== "function") {
      wrapped[name] = tool;
      continue;
    }
    const execute = tool.execute;
    const read = readSet.has(name);
    wrapped[name] = {
      ...tool,
      async execute(input, callOptions) {
        const fn = {
          fn: (args) => execute(args, callOptions),
          credential,
          read,
          idempotent: idempotentSet.has(name),
          deadlineMs: undefined,
        };
        const turn = turnFor(callOptions?.messages);
        const outcome = await turn._callFunction(name, fn, input, {
          deadlineMs,
          signal: callOptions?.abortSignal,
        });
        return outcome.ok ? outcome.body : outcome.toJSON();
      },
    };
  }
  return wrapped;
}

module.exports = { gateTools };
