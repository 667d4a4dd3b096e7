"use strict";
// `FakeApi`: the throttling fake (sluice-fake), served in-process on
// loopback, with the records tests assert on.

const native = require("./native.cjs");

function seconds(value, name) {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "number" || !(value >= 0) || !Number.isFinite(value)) {
    throw new RangeError(`${name} must be a non-negative number of seconds, not ${String(value)}`);
  }
  return value;
}

class FakeApi {
  #core;

  constructor(core) {
    this.#core = core;
  }

  /**
   * Starts a fake: at most `allowed` requests in any rolling `windowS`
   * (default `retryAfterS`, else 1 s); past it, 429 with `Retry-After`.
   */
  static async start(options = {}) {
    const { allowed, retryAfterS, windowS, latencyS, headers } = options ?? {};
    if (allowed !== undefined && allowed !== null && !(Number.isInteger(allowed) && allowed >= 0 && allowed <= 0xffffffff)) {
      throw new RangeError(`allowed must be a whole number of requests, not ${String(allowed)}`);
    }
    let core;
    try {
      core = new native.FakeCore({
        allowed: allowed ?? undefined,
        retryAfterS: seconds(retryAfterS, "retryAfterS"),
        windowS: seconds(windowS, "windowS"),
        latencyS: seconds(latencyS, "latencyS"),
        headers: headers ?? undefined,
      });
    } catch (error) {
      throw error && error.code === "InvalidArg" ? new RangeError(error.message) : error;
    }
    return new FakeApi(core);
  }

  /** `http://127.0.0.1:PORT`. */
  get url() {
    return this.#core.url;
  }

  /** When each request arrived, in seconds since the fake started, in order. */
  requestStarts() {
    return this.#core.requestStarts();
  }

  /** Every request so far, in order (`path`, `status`, `t_ms`, …). */
  requests() {
    return JSON.parse(this.#core.requests());
  }

  /** Forgets every request and every key's window. */
  reset() {
    this.#core.reset();
  }

  /** Stops serving. */
  close() {
    this.#core.close();
  }
}

module.exports = { FakeApi };
