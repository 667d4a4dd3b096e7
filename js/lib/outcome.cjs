"use strict";
// `Outcome`: what the model is told about one call, read-only, with
// `toJSON()` giving exactly the sidecar's JSON.

class Outcome {
  #json;

  /** @param {string} text the sidecar's JSON, as the native module answers it */
  constructor(text) {
    const json = JSON.parse(text);
    this.#json = json;
    /** "ok", "rate_limited", "quota_exhausted", "timed_out" or "error". */
    this.status = json.status;
    this.retryAfterMs = json.retry_after_ms ?? null;
    this.reason = json.reason ?? null;
    this.scope = json.scope ?? null;
    this.hint = json.hint ?? null;
    this.httpStatus = json.http_status ?? null;
    this.body = json.status === "ok" ? json.body : null;
    this.message = json.message ?? null;
    this.afterMs = json.after_ms ?? null;
    this.window = json.window ?? null;
    Object.freeze(this);
  }

  /** True when the call succeeded. */
  get ok() {
    return this.status === "ok";
  }

  /** The outcome as the sidecar returns it, snake_case keys in its order. */
  toJSON() {
    return structuredClone(this.#json);
  }
}

module.exports = { Outcome };
