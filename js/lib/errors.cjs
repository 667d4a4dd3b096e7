"use strict";
// The package's errors: a refused configuration, a call sluice answered
// instead of the server, and a bug in sluice.

/** A configuration sluice refuses; `field` names the field at fault. */
class ConfigError extends Error {
  constructor(message, field) {
    super(message);
    this.name = "ConfigError";
    /** e.g. `credentials.support.rate`, or null when no one field is at fault. */
    this.field = field ?? null;
  }
}

/** sluice answered a `gate.fetch` request instead of the server: not yet, and when. */
class SluiceDeferred extends Error {
  constructor(outcome) {
    super(outcome.hint || `sluice deferred the request (${outcome.status})`);
    this.name = "SluiceDeferred";
    /** The call's `Outcome`. */
    this.outcome = outcome;
    /** When to come back, in milliseconds, when the outcome says. */
    this.retryAfterMs = outcome.retryAfterMs;
  }
}

module.exports = { ConfigError, SluiceDeferred };
