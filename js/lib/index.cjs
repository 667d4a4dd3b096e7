"use strict";
// The package's entry point (CommonJS; index.mjs re-exports it for ESM).
const { Gate, Turn } = require("./gate.cjs");
const { Outcome } = require("./outcome.cjs");
const { FakeApi } = require("./fake.cjs");
const { ConfigError, SluiceDeferred } = require("./errors.cjs");

module.exports = { Gate, Turn, Outcome, FakeApi, ConfigError, SluiceDeferred };
