"use strict";
// The native module, built from crates/sluice-js by scripts/build.mjs.
const { join } = require("node:path");

let native;
try {
  native = require(join(__dirname, "..", "sluice.node"));
} catch (error) {
  throw new Error(
    `sluice: the native module is missing or does not load (${error.message}). ` +
      "It is built when the package is installed: rerun `npm install`, " +
      "or `node scripts/build.mjs` in the package's folder (needs Rust's cargo).",
    { cause: error },
  );
}
module.exports = native;
