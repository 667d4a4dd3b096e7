"use strict";
// One attempt of a function tool, answered as the native executor reads it
// (crates/sluice-js/src/executor.rs), as JSON text:
// {"kind":"response",status,headers,body} for an HTTP response or a value,
// {"kind":"raised",message} when the tool threw (an `error`, never retried).

function describe(error) {
  if (error instanceof Error) {
    return error.message ? `${error.name}: ${error.message}` : error.name;
  }
  return `thrown: ${String(error)}`;
}

function isResponse(value) {
  return typeof Response !== "undefined" && value instanceof Response;
}

async function responseAnswer(response) {
  const body = await response.text();
  return { kind: "response", status: response.status, headers: [...response.headers], body };
}

/** Runs `fn(args, extra)` once; never throws. */
async function attempt(fn, args, extra) {
  let value;
  try {
    value = await fn(args, extra);
  } catch (error) {
    return JSON.stringify({ kind: "raised", message: describe(error) });
  }
  try {
    if (isResponse(value)) {
      return JSON.stringify(await responseAnswer(value));
    }
    const body = JSON.stringify(value === undefined ? null : value);
    return JSON.stringify({
      kind: "response",
      status: 200,
      headers: [["content-type", "application/json"]],
      body,
    });
  } catch (error) {
    return JSON.stringify({
      kind: "raised",
      message: `the tool returned a value that is not JSON: ${describe(error)}`,
    });
  }
}

module.exports = { attempt, describe };
