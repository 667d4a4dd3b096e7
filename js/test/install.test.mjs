// `npm install <abs path>/js` from another project: npm links the folder and
// runs its install script in place, without the folder's own dependencies;
// the script builds the native module with cargo, and the project imports
// the package, through ESM and CommonJS alike.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..");

test("npm install <path>/js builds the module, and the package imports", { timeout: 900_000 }, () => {
  const project = mkdtempSync(join(tmpdir(), "sluice-install-"));
  try {
    writeFileSync(join(project, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", private: true }));
    const npm = process.platform === "win32" ? "npm.cmd" : "npm";
    // The tests build the dev profile (SLUICE_JS_PROFILE, set by .ci/run); a user gets release.
    const env = { ...process.env, SLUICE_JS_PROFILE: process.env.SLUICE_JS_PROFILE || "dev" };
    execFileSync(npm, ["install", "--no-audit", "--no-fund", "--foreground-scripts", pkg], {
      cwd: project,
      env,
      stdio: ["ignore", "inherit", "inherit"],
    });
    const esm = `import { Gate, FakeApi, SluiceDeferred, ConfigError } from "sluice";
import { gateTools } from "sluice/ai";
const fake = await FakeApi.start({ allowed: 3, windowS: 1 });
const gate = new Gate({ credentials: { s: { base_url: fake.url, rate: "3/1s" } }, tools: { t: { credential: "s", path: "/x/{id}" } } });
const out = await gate.turn().call("t", { id: "1" });
fake.close();
console.log(JSON.stringify([out.status, typeof gateTools, typeof SluiceDeferred, typeof ConfigError]));`;
    writeFileSync(join(project, "main.mjs"), esm);
    const printed = execFileSync(process.execPath, ["main.mjs"], { cwd: project, encoding: "utf8" });
    assert.deepEqual(JSON.parse(printed), ["ok", "function", "function", "function"]);
    writeFileSync(join(project, "main.cjs"), `const { Gate } = require("sluice"); const { gateTools } = require("sluice/ai"); console.log(typeof Gate, typeof gateTools);`);
    assert.equal(execFileSync(process.execPath, ["main.cjs"], { cwd: project, encoding: "utf8" }).trim(), "function function");
  } finally {
    rmSync(project, { recursive: true, force: true });
  }
});
