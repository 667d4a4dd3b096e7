#!/usr/bin/env node
// The live page in a real browser (issue 20).
//
// Usage: node tests/ui/test_ui.mjs path/to/sluice path/to/chromium [screenshot.png]
//
// Starts `sluice fake-api` as the demo's API (10 per rolling second, answers
// in 300-500 ms, IETF RateLimit headers) and `sluice serve` in front of it
// with a bearer token and two credentials: `support`, enforcing, whose key a
// production sync job also spends (4 requests a second, sent straight to the
// API), and `billing`, in shadow mode. Drives an agent's fan-out turns
// through the sidecar, opens /ui in headless Chromium, and checks what the
// page renders: credential names, limits, modes and non-zero counts, live at
// 1 Hz or better, loading nothing from anywhere but the sidecar. With a
// third argument, saves a screenshot of the page after a minute of that
// load (SLUICE_UI_LOAD_S seconds, if set).
//
// Prints "passed" and exits 0 when every check holds; every process is
// stopped at the end, even on failure.

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

const [sluice, chromiumPath, screenshot] = process.argv.slice(2);
if (!sluice || !chromiumPath) {
  console.error('usage: node tests/ui/test_ui.mjs path/to/sluice path/to/chromium [screenshot.png]');
  process.exit(2);
}

const TOKEN = 'ui-test-token-7f3a9c1e5b';
const SUPPORT_KEY = 'sk-support-ui-never-shown';
const BILLING_KEY = 'sk-billing-ui-never-shown';
const START_TIMEOUT_MS = 60_000;
const children = [];
const dir = mkdtempSync(join(tmpdir(), 'sluice-ui-'));
let stopping = false;

/** A child process whose first stdout line is `listening on http://ADDR`. */
function start(name, args, env) {
  const child = spawn(sluice, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let stderr = '';
  child.stderr.on('data', (chunk) => { stderr += chunk; });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name}: no address within ${START_TIMEOUT_MS} ms\n${stderr}`)), START_TIMEOUT_MS);
    const lines = createInterface({ input: child.stdout });
    lines.once('line', (line) => {
      clearTimeout(timer);
      const prefix = 'listening on ';
      if (!line.startsWith(prefix)) reject(new Error(`${name}: unexpected first line ${line}\n${stderr}`));
      else resolve({ url: line.slice(prefix.length).replace(/\/$/, ''), stderr: () => stderr });
    });
    child.once('exit', (code) => {
      if (!stopping) reject(new Error(`${name} exited with ${code}\n${stderr}`));
    });
  });
}

function stopAll() {
  stopping = true;
  for (const child of children) if (child.exitCode === null) child.kill('SIGTERM');
  rmSync(dir, { recursive: true, force: true });
}

function check(condition, message) {
  if (!condition) throw new Error('check failed: ' + message);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** The production job on support's key: one request every 250 ms, straight to the API. */
function syncJob(api, until) {
  let page = 0;
  const timer = setInterval(() => {
    if (Date.now() > until) { clearInterval(timer); return; }
    page += 1;
    fetch(`${api}/sync/tickets?page=${page}`, { headers: { authorization: `Bearer ${SUPPORT_KEY}` } })
      .then((r) => r.arrayBuffer()).catch(() => {});
  }, 250);
}

/** The agent: a fan-out turn every 800 ms, duplicates included (coalesced). */
async function agent(sidecar, until) {
  const tools = ['search_tickets', 'list_customers', 'get_usage', 'search_tickets'];
  let turn = 0;
  const pending = [];
  while (Date.now() < until) {
    turn += 1;
    const calls = [];
    for (let i = 0; i < 9; i += 1) {
      const tool = tools[(turn + i) % tools.length];
      calls.push({ id: `c${i}`, tool, args: { q: `t${turn}-${i % 7}` }, deadline_ms: 10_000 });
    }
    pending.push(fetch(`${sidecar}/v1/turns`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ calls }),
    }).then((r) => r.json()).catch(() => null));
    await sleep(800);
  }
  return Promise.all(pending);
}

async function main() {
  const api = await start('fake-api', [
    'fake-api', '--listen', '127.0.0.1:0', '--limit', '10/1s', '--latency', '300ms..500ms',
    '--headers', 'ietf', '--seed', '1',
  ]);
  const config = join(dir, 'sluice.toml');
  writeFileSync(config, `
[server]
auth_token_env = "SLUICE_UI_TOKEN"

[credentials.support]
base_url = "${api.url}"
secret_env = "SUPPORT_KEY"
# The key allows 10 per second; the production job takes 4 of them.
rate = "6/1s"
max_in_flight = 3
queue = 8

[credentials.billing]
base_url = "${api.url}"
secret_env = "BILLING_KEY"
rate = "4/1s"
max_in_flight = 2
queue = 3
enforce = false

[tools.search_tickets]
credential = "support"
path = "/api/search?q={q}"

[tools.list_customers]
credential = "support"
path = "/api/customers?q={q}"

[tools.get_usage]
credential = "billing"
path = "/api/usage?q={q}"
`);
  const sidecar = await start('sluice serve', ['serve', '--config', config, '--listen', '127.0.0.1:0'], {
    SLUICE_UI_TOKEN: TOKEN, SUPPORT_KEY, BILLING_KEY, RUST_LOG: 'warn',
  });

  // A screenshot waits for a full minute of history (SLUICE_UI_LOAD_S to change it).
  const loadFor = 1_000 * Number(process.env.SLUICE_UI_LOAD_S || (screenshot ? 65 : 12));
  const until = Date.now() + loadFor;
  syncJob(api.url, until);
  const load = agent(sidecar.url, until);

  const profile = mkdtempSync(join(dir, 'profile-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath,
    headless: true,
    viewport: { width: 1440, height: 1100 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const foreign = [];
  const errors = [];
  try {
    const page = await context.newPage();
    page.on('request', (request) => {
      if (!request.url().startsWith(sidecar.url + '/')) foreign.push(request.url());
    });
    page.on('pageerror', (error) => errors.push(String(error)));
    page.on('response', (response) => {
      if (response.status() >= 400) errors.push(`${response.status()} for ${response.url()}`);
    });
    page.on('console', (message) => { if (message.type() === 'error') errors.push(message.text()); });

    // Behind the token: without it, the same refusal as every endpoint
    // (on a page of its own: the browser logs the 401 as an error).
    const outsider = await context.newPage();
    const refused = await outsider.goto(`${sidecar.url}/ui`);
    check(refused.status() === 401, `/ui without the token answered ${refused.status()}`);
    check(!(await outsider.content()).includes('<script'), 'the refusal carries no page');
    await outsider.close();

    // As a person opens it: the token in the query, dropped at once.
    const opened = await page.goto(`${sidecar.url}/ui?token=${TOKEN}`);
    check(opened.status() === 200, `/ui?token= answered ${opened.status()}`);
    await page.waitForFunction(() => {
      const n = (selector) => Number(document.querySelector(selector)?.textContent || 0);
      return n('[data-credential="support"] [data-outcome="ok"]') > 0
        && n('[data-credential="billing"] [data-outcome="ok"]') > 0
        && n('[data-credential="billing"] [data-shadow="would_wait"]')
          + n('[data-credential="billing"] [data-shadow="would_defer"]')
          + n('[data-credential="billing"] [data-shadow="would_shed"]') > 0;
    }, null, { timeout: 20_000 });
    check(!page.url().includes('token'), `the token left the address bar: ${page.url()}`);

    const text = await page.locator('main').innerText();
    for (const expected of ['support', 'billing', 'rate 6/1s', 'rate 4/1s', 'max in flight 3', 'queue 8',
      'ENFORCING', 'SHADOW', 'in flight', 'queued', 'server remaining', 'blocked until', 'would wait', 'would defer']) {
      check(text.includes(expected), `the page shows "${expected}"`);
    }
    check(!text.includes(SUPPORT_KEY) && !text.includes(BILLING_KEY) && !text.includes(TOKEN), 'no secret on the page');
    const modes = await page.locator('[data-role="mode"]').allInnerTexts();
    check(modes.length === 2, `two credentials: ${modes}`);
    // Every scope's state is carried in words, not only in colour.
    const states = await page.locator('[data-role="state"]').allInnerTexts();
    check(states.length >= 2 && states.every((s) => /OK|AT THE LIMIT|OVER THE LIMIT|QUEUEING|BLOCKED|QUOTA/.test(s)),
      `states in words: ${states}`);
    const charts = await page.locator('svg.chart').count();
    check(charts >= 2, `a rolling-window chart per window: ${charts}`);
    const label = await page.locator('[data-credential="support"] svg.chart').first().getAttribute('aria-label');
    check(/of a limit of 6/.test(label), `the chart says its limit: ${label}`);
    const inFlight = await page.locator('[data-credential="support"] [data-meter="in flight"] .num').first().innerText();
    check(/^\d+ \/ 3$/.test(inFlight), `in flight against max_in_flight: ${inFlight}`);
    const live = await page.locator('#live').innerText();
    check(live.includes('Live'), `connection state: ${live}`);

    // Live: at least one update a second.
    const before = Number(await page.locator('main').getAttribute('data-updates'));
    await sleep(3_000);
    const after = Number(await page.locator('main').getAttribute('data-updates'));
    check(after - before >= 3, `updates in 3 s: ${after - before}`);

    // Sent as a header (an operator's proxy or extension), it works too.
    const withHeader = await context.newPage();
    await context.setExtraHTTPHeaders({ authorization: `Bearer ${TOKEN}` });
    const viaHeader = await withHeader.goto(`${sidecar.url}/ui`);
    check(viaHeader.status() === 200, `/ui with the header answered ${viaHeader.status()}`);
    await withHeader.waitForSelector('[data-credential="support"]', { timeout: 10_000 });
    await withHeader.close();
    await context.setExtraHTTPHeaders({});

    if (screenshot) {
      // Let the demo's load run on so the last minute's charts fill in.
      await sleep(Math.max(0, until - Date.now() - 1_000));
      await page.screenshot({ path: screenshot, fullPage: true });
      console.log(`screenshot written to ${screenshot}`);
    }
    check(foreign.length === 0, `requests only to the sidecar: ${foreign}`);
    check(errors.length === 0, `no script errors: ${errors}`);
  } catch (error) {
    // What the page showed, and what the sidecar said, for the failure.
    for (const page of context.pages()) {
      const body = await page.locator('body').innerText().catch(() => '(unreadable)');
      console.error(`--- page ${page.url()}\n${body.slice(0, 4000)}`);
    }
    console.error(`--- script errors\n${errors.join('\n')}\n--- foreign requests\n${foreign.join('\n')}`);
    console.error(`--- sluice serve stderr\n${sidecar.stderr().slice(-4000)}`);
    throw error;
  } finally {
    await context.close();
  }
  await load;
  console.log('live page in headless Chromium: passed');
}

main().then(() => { stopAll(); process.exit(0); }, (error) => {
  console.error(error && error.stack ? error.stack : error);
  stopAll();
  process.exit(1);
});
