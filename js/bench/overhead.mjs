// The cost of gate.fetch: sequential GETs to a loopback server (node:http,
// in a process of its own, answering a small JSON body), through Node's
// bare fetch and through gate.fetch, in alternating rounds; the median of
// the rounds' per-request times.
//
//   node bench/overhead.mjs [--rounds N] [--per-round N] [--json]
import { spawn } from "node:child_process";
import { once } from "node:events";

import { Gate } from "sluice";

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(name);
  return at >= 0 ? Number(args[at + 1]) : fallback;
};
const rounds = option("--rounds", 15);
const perRound = option("--per-round", 400);

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

async function round(send, n) {
  const started = process.hrtime.bigint();
  for (let i = 0; i < n; i++) {
    const response = await send(`${api.url}/items/${i}`);
    await response.arrayBuffer();
    if (response.status !== 200) throw new Error(`status ${response.status}`);
  }
  return Number(process.hrtime.bigint() - started) / 1e3 / n;
}

for (const send of Object.values(clients)) await round(send, 200); // warm: connections, JIT
const times = Object.fromEntries(Object.keys(clients).map((name) => [name, []]));
for (let r = 0; r < rounds; r++) {
  // Alternating order, so that neither always runs first.
  const names = r % 2 ? Object.keys(clients).reverse() : Object.keys(clients);
  for (const name of names) times[name].push(await round(clients[name], perRound));
}
server.kill();

const bare = median(times["bare fetch"]);
const gated = median(times["gate.fetch"]);
const result = {
  node: process.version,
  rounds,
  per_round: perRound,
  bare_fetch_us: Number(bare.toFixed(1)),
  gate_fetch_us: Number(gated.toFixed(1)),
  added_us: Number((gated - bare).toFixed(1)),
  added_percent: Number((((gated - bare) / bare) * 100).toFixed(1)),
};
if (args.includes("--json")) {
  console.log(JSON.stringify(result));
} else {
  console.log(`per request (median of ${rounds} rounds of ${perRound}, Node ${process.version}):`);
  console.log(`  bare fetch   ${result.bare_fetch_us} µs`);
  console.log(`  gate.fetch   ${result.gate_fetch_us} µs  (${result.added_percent >= 0 ? "+" : ""}${result.added_percent}%)`);
}
