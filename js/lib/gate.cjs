"use strict";
// `Gate` and `Turn`: the engine's gate over a configuration, the calls of
// one model step, function tools, and `gate.fetch`.

const native = require("./native.cjs");
const { attempt } = require("./attempt.cjs");
const { ConfigError, SluiceDeferred } = require("./errors.cjs");
const { Outcome } = require("./outcome.cjs");

// The engine refuses deadlines past a week.
const MAX_MS = 7 * 24 * 3600 * 1000;

/** A deadline in whole milliseconds, or undefined; throws RangeError/TypeError. */
function deadline(value, what = "deadlineMs") {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "number" || Number.isNaN(value)) {
    throw new TypeError(`${what} must be a number of milliseconds, not ${String(value)}`);
  }
  if (!(value > 0)) throw new RangeError(`${what} must be positive, not ${value}`);
  return Math.min(Math.ceil(value), MAX_MS);
}

/** JSON text of a call's arguments; throws TypeError when they are not JSON. */
function argsText(args) {
  if (args === undefined || args === null) return "{}";
  let text;
  try {
    text = JSON.stringify(args);
  } catch (error) {
    throw new TypeError(`args are not JSON: ${error.message}`);
  }
  // A function or a symbol stringifies to nothing: not a JSON object.
  return text === undefined ? "[]" : text;
}

/** Runs `start(canceller)` under an optional AbortSignal. */
async function cancellable(signal, start) {
  if (signal === undefined || signal === null) return start(undefined);
  if (!(signal instanceof AbortSignal)) throw new TypeError("signal must be an AbortSignal");
  signal.throwIfAborted();
  const canceller = new native.Canceller();
  const abort = () => canceller.cancel();
  signal.addEventListener("abort", abort, { once: true });
  try {
    return await start(canceller);
  } catch (error) {
    if (signal.aborted) throw signal.reason;
    throw error;
  } finally {
    signal.removeEventListener("abort", abort);
  }
}

/** A native InvalidArg as the TypeError JavaScript code expects. */
function typeError(error) {
  return error && error.code === "InvalidArg" ? new TypeError(error.message) : error;
}

class Gate {
  #core;
  #functions = new Map();

  /**
   * @param {object|string} config sluice.toml's schema as an object, or TOML text
   */
  constructor(config) {
    let text;
    let toml;
    if (typeof config === "string") {
      text = config;
      toml = true;
    } else if (config !== null && typeof config === "object" && !Array.isArray(config)) {
      try {
        text = JSON.stringify(config);
      } catch (error) {
        throw new TypeError(`config is not JSON: ${error.message}`);
      }
      toml = false;
    } else {
      throw new TypeError("config must be an object with sluice.toml's schema, or TOML text");
    }
    let made;
    try {
      made = native.openGate(text, toml);
    } catch (error) {
      throw typeError(error);
    }
    if (!(made instanceof native.GateCore)) {
      throw new ConfigError(made.message, made.field);
    }
    this.#core = made;
    this.credentials = Object.freeze(made.credentials());
  }

  /** Every tool's name: configured ones and function tools. */
  get tools() {
    return [...this.#core.tools(), ...this.#functions.keys()];
  }

  /** A new turn: the calls of one model step, sharing single-flight and a read cache. */
  turn() {
    return new Turn(this, this.#core.turn());
  }

  /** One call in a turn of its own. */
  call(tool, args, options) {
    return this.turn().call(tool, args, options);
  }

  /** Calls in flight on a credential's own scope right now. */
  inFlight(credential) {
    return this.#core.inFlight(String(credential));
  }

  #credential(credential) {
    if (typeof credential !== "string" || !this.credentials.includes(credential)) {
      const known = this.credentials.join(", ") || "none";
      throw new TypeError(`unknown credential ${JSON.stringify(credential)} (configured: ${known})`);
    }
    return credential;
  }

  /**
   * Registers `fn` as the tool `name`, spending `credential`. A `read` is
   * coalesced and cached within a turn; a write is retried after server
   * errors only when `idempotent`. Returns `fn`.
   */
  tool(name, options, fn) {
    if (typeof name !== "string" || name === "") throw new TypeError("a tool's name must be a non-empty string");
    if (typeof fn !== "function") throw new TypeError(`tool ${name}: fn must be a function`);
    const { credential, read = false, idempotent = false, deadlineMs } = options ?? {};
    this.#functions.set(name, {
      fn,
      credential: this.#credential(credential),
      read: Boolean(read),
      idempotent: Boolean(idempotent),
      deadlineMs: deadline(deadlineMs),
    });
    return fn;
  }

  /** The registered function tool `name`, if any (for sluice/ai). */
  _function(name) {
    return this.#functions.get(name);
  }

  /**
   * A `fetch` whose every request is a call on `credential`, sent from Rust
   * when the engine grants it. Rejects with `SluiceDeferred` when sluice
   * answers instead of the server.
   */
  fetch(credential, options) {
    const name = this.#credential(credential);
    const base = deadline(options?.deadlineMs);
    const core = this.#core;
    return async function sluiceFetch(input, init) {
      const request = await readRequest(input, init);
      const signal = init?.signal ?? (input instanceof Request ? input.signal : undefined);
      const call = { credential: name, ...request, deadlineMs: base };
      let answer;
      try {
        answer = await cancellable(signal, (canceller) => core.fetch(call, canceller));
      } catch (error) {
        throw typeError(error);
      }
      if (answer.outcome === null || answer.outcome === undefined) {
        return respond(answer, request.url);
      }
      const outcome = new Outcome(answer.outcome);
      if (outcome.status === "error") {
        throw new TypeError(`fetch failed: ${outcome.message}`, { cause: outcome });
      }
      throw new SluiceDeferred(outcome);
    };
  }
}

// fetch normalizes these methods' case (Fetch standard, "normalize a method").
const NORMALIZED = new Set(["DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT"]);

/**
 * `{ method, url, headers (flat), body }` of a fetch call. The common call,
 * a URL with a string or bytes body (what SDKs send), is read directly; any
 * other goes through a `Request`, which reads it as fetch does.
 */
async function readRequest(input, init) {
  const body = init?.body;
  const simple =
    (typeof input === "string" || input instanceof URL) &&
    (body === undefined || body === null || typeof body === "string" || body instanceof Uint8Array || body instanceof ArrayBuffer);
  if (!simple) {
    const request = new Request(input, init);
    const headers = [];
    for (const [key, value] of request.headers) headers.push(key, value);
    const bytes = request.body === null ? undefined : Buffer.from(await request.arrayBuffer());
    return { method: request.method, url: request.url, headers, body: bytes };
  }
  let method = init?.method === undefined ? "GET" : String(init.method);
  if (NORMALIZED.has(method.toUpperCase())) method = method.toUpperCase();
  const url = new URL(input).href;
  const given = new Headers(init?.headers);
  let bytes;
  if (body !== undefined && body !== null) {
    if (method === "GET" || method === "HEAD") throw new TypeError("a GET or HEAD request cannot have a body");
    if (typeof body === "string") {
      bytes = Buffer.from(body);
      if (!given.has("content-type")) given.set("content-type", "text/plain;charset=UTF-8");
    } else {
      bytes = Buffer.from(body instanceof ArrayBuffer ? new Uint8Array(body) : body);
    }
  }
  const headers = [];
  for (const [key, value] of given) headers.push(key, value);
  return { method, url, headers, body: bytes };
}

// Statuses whose response has no body (Fetch standard, "null body status").
const NULL_BODY = new Set([101, 103, 204, 205, 304]);
// Not the response's own: the body has been read whole.
const DROPPED = new Set(["transfer-encoding", "connection", "keep-alive"]);

function respond(answer, url) {
  const headers = new Headers();
  for (let i = 0; i + 1 < answer.headers.length; i += 2) {
    if (!DROPPED.has(answer.headers[i])) headers.append(answer.headers[i], answer.headers[i + 1]);
  }
  const body = NULL_BODY.has(answer.status) ? null : answer.body;
  const response = new Response(body, { status: answer.status, headers });
  Object.defineProperty(response, "url", { value: url });
  return response;
}

class Turn {
  #gate;
  #core;

  constructor(gate, core) {
    this.#gate = gate;
    this.#core = core;
  }

  /** Upstream requests (attempts) this turn has caused so far. */
  get upstreamRequests() {
    return this.#core.upstreamRequests();
  }

  _prepare(tool, args, deadlineMs, fn = this.#gate._function(tool)) {
    const text = argsText(args);
    const due = deadline(deadlineMs);
    if (fn === undefined) {
      return this.#core.tool(String(tool), text, due);
    }
    const parsed = JSON.parse(text);
    const start = () => attempt(fn.fn, parsed);
    return this.#core.function(tool, fn.credential, fn.read, fn.idempotent, fn.deadlineMs, text, due, start);
  }

  /**
   * Runs one call in this turn; resolves to its `Outcome`. `deadlineMs`
   * overrides the tool's deadline; `signal` cancels the call.
   */
  async call(tool, args, options) {
    return this._run(this._prepare(tool, args, options?.deadlineMs), options?.signal);
  }

  /** One call of `fn` ({ fn, credential, read, idempotent, deadlineMs }) as the tool `tool`. */
  async _callFunction(tool, fn, args, options) {
    return this._run(this._prepare(tool, args, options?.deadlineMs, fn), options?.signal);
  }

  async _run(prepared, signal) {
    const text = await cancellable(signal, (canceller) => this.#core.run(prepared, canceller));
    return new Outcome(text);
  }

  /** Runs calls concurrently; resolves to one `Outcome` per call, in order. */
  async execute(calls, options) {
    if (!Array.isArray(calls)) throw new TypeError("calls must be an array of { tool, args, deadlineMs }");
    const prepared = calls.map((call, index) => {
      if (call === null || typeof call !== "object") throw new TypeError(`calls[${index}] must be { tool, args, deadlineMs }`);
      return this._prepare(call.tool, call.args, call.deadlineMs);
    });
    const texts = await cancellable(options?.signal, (canceller) => this.#core.runAll(prepared, canceller));
    return texts.map((text) => new Outcome(text));
  }
}

module.exports = { Gate, Turn };
