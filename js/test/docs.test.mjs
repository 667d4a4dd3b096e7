// The examples in docs/typescript.md marked `example=NAME` run as written
// and print what their comments say.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const doc = readFileSync(resolve(here, "..", "..", "docs", "typescript.md"), "utf8");
const examples = [...doc.matchAll(/```js example=([\w-]+)\n([\s\S]*?)```/g)].map((m) => [m[1], m[2]]);

test("the guide has its two runnable examples", () => {
  assert.deepEqual(examples.map(([name]) => name), ["ai-sdk", "openai"]);
});

const expected = {
  "ai-sdk": ["[ 'ok', 'ok', 'ok', 'rate_limited', 'rate_limited' ]", "true"],
  openai: ["6", "[ 200, 200, 200, 200, 200, 200 ]"],
};

for (const [name, code] of examples) {
  test(`docs/typescript.md: the ${name} example runs`, () => {
    // Inside the package, so that `import "sluice"` resolves to it.
    const file = join(here, `.docs-${name}.mjs`);
    writeFileSync(file, code);
    try {
      const printed = execFileSync(process.execPath, [file], { encoding: "utf8", timeout: 60_000 });
      assert.deepEqual(printed.trim().split("\n"), expected[name]);
    } finally {
      rmSync(file, { force: true });
    }
  });
}
