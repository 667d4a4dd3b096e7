// Builds the native module from source: `cargo build -p sluice-js`, then
// copies the library to ./sluice.node. npm runs this as the package's
// install script, in place, without installing the package's own
// dependencies: so it uses nothing but Node and cargo.
//
// SLUICE_JS_PROFILE picks the cargo profile: `release` (the default, for
// users) or `dev` (faster to build; what the tests use).
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, renameSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const pkg = resolve(here, "..");
const root = resolve(pkg, "..");
const profile = process.env.SLUICE_JS_PROFILE || "release";

if (!existsSync(join(root, "crates", "sluice-js", "Cargo.toml"))) {
  console.error(`sluice: ${root} is not the sluice repository; cannot build the native module`);
  process.exit(1);
}
const cargo = process.env.CARGO || "cargo";
const built = spawnSync(cargo, ["build", "--locked", "-p", "sluice-js", "--profile", profile], {
  cwd: root,
  stdio: "inherit",
});
if (built.error) {
  console.error(`sluice: cannot run ${cargo} (${built.error.message}); install Rust from https://rustup.rs`);
  process.exit(1);
}
if (built.status !== 0) {
  process.exit(built.status ?? 1);
}

const targetDir = process.env.CARGO_TARGET_DIR
  ? resolve(root, process.env.CARGO_TARGET_DIR)
  : join(root, "target");
// cargo puts `dev` and `test` in target/debug, `bench` in target/release,
// any other profile in a folder of its name.
const folders = { dev: "debug", test: "debug", bench: "release" };
const out = join(targetDir, folders[profile] ?? profile);
const names = {
  linux: "libsluice_js.so",
  darwin: "libsluice_js.dylib",
  win32: "sluice_js.dll",
};
const library = join(out, names[process.platform] ?? "libsluice_js.so");
if (!existsSync(library)) {
  console.error(`sluice: cargo built nothing at ${library}`);
  process.exit(1);
}
// Copied beside, then renamed over: a process that has the old module
// loaded keeps its mapping.
const dest = join(pkg, "sluice.node");
copyFileSync(library, `${dest}.tmp`);
renameSync(`${dest}.tmp`, dest);
console.error(`sluice: built ${dest} (${profile})`);
