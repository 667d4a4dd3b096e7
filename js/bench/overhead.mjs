// The cost of gate.fetch: sequential GETs to a loopback server (node:http,
// in a process of its own, answering a small JSON body), through Node's
// bare fetch and through gate.fetch, one of each in turn (which goes first
// alternates), each request timed: the medians, so that a busy machine's
// preemptions weigh on both alike and on neither's median.
//
//   node bench/overhead.mjs [--requests N] [--json]
import { spawn } from "node:child_process";
import { once } from "node:events";

import { Gate } from "sluice";

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(name);
  return at >= 0 ? Number(args[at + 1]) : fallback;
};
const requests = option("--requests", 5000);

const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};

const SERVER = `
const http = require("node:http");
const server = http.createServer((request, response) => {
  const body = JSON.stringify({ path: request.url, ok: true });
  response.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  response.end(body);
});
server.keepAliveTimeout = 60_000;
server.listen(0, "127.0.0.1", () => console.log(server.address().port));
`;
const server = spawn(process.execPath, ["-e", SERVER], { stdio: ["ignore", "pipe", "inherit"] });
const [port] = await once(server.stdout, "data");
const api = { url: `http://127.0.0.1:${String(port).trim()}` };
const gate = new Gate({ credentials: { loopback: { base_url: api.url } } });
const clients = { "bare fetch": fetch, "gate.fetch": gate.fetch("loopback") };

async function timed(send, i) {
  const started = process.hrtime.bigint();
  const response = await send(`${api.url}/items/${i}`);
  await response.arrayBuffer();
  const took = Number(process.hrtime.bigint() - started) / 1e3;
  if (response.status !== 200) throw new Error(`status ${response.status}`);
  return took;
}

const names = Object.keys(clients);
for (let i = 0; i < 300; i++) for (const name of names) await timed(clients[name], i); // warm: connections, JIT
const times = Object.fromEntries(names.map((name) => [name, []]));
for (let i = 0; i < requests; i++) {
  const order = i % 2 ? [...names].reverse() : names;
  for (const name of order) times[name].push(await timed(clients[name], i));
}
server.kill();

const percentile = (values, p) => [...values].sort((a, b) => a - b)[Math.floor((values.length - 1) * p)];
const bare = median(times["bare fetch"]);
const gated = median(times["gate.fetch"]);
const result = {
  node: process.version,
  requests,
  bare_fetch_us: Number(bare.toFixed(1)),
  gate_fetch_us: Number(gated.toFixed(1)),
  bare_fetch_p90_us: Number(percentile(times["bare fetch"], 0.9).toFixed(1)),
  gate_fetch_p90_us: Number(percentile(times["gate.fetch"], 0.9).toFixed(1)),
  added_us: Number((gated - bare).toFixed(1)),
  added_percent: Number((((gated - bare) / bare) * 100).toFixed(1)),
};
if (args.includes("--json")) {
  console.log(JSON.stringify(result));
} else {
  console.log(`per request, median (p90) of ${requests} each, Node ${process.version}:`);
  console.log(`  bare fetch   ${result.bare_fetch_us} µs (${result.bare_fetch_p90_us})`);
  console.log(`  gate.fetch   ${result.gate_fetch_us} µs (${result.gate_fetch_p90_us})  ${result.added_percent >= 0 ? "+" : ""}${result.added_percent}%`);
}
