#!/usr/bin/env python3
"""Production lines per crate, by issue 55's rule.

    python3 scripts/count_lines.py

Counts every line of `crates/*/src/**/*.rs` and `*.lua`, except the
`#[cfg(test)]` modules: the attribute, the `mod name {` it marks and
everything to its closing brace. A `#[cfg(test)] mod name;` that names a
file of its own leaves that file out too. Blank lines and comments count:
they are part of what a reader carries.
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CFG_TEST = re.compile(r"^\s*#\[cfg\(test\)\]\s*$")
MOD_BLOCK = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?mod\s+(\w+)\s*\{")
MOD_FILE = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?mod\s+(\w+)\s*;")


def braces(line):
    """The change in brace depth of a line, ignoring braces in strings."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    line = line.split("//", 1)[0]
    return line.count("{") - line.count("}")


def count(path, skipped):
    """Lines of one file without its test modules; adds test-only files to `skipped`."""
    lines = path.read_text(encoding="utf-8").splitlines()
    kept = 0
    i = 0
    while i < len(lines):
        if CFG_TEST.match(lines[i]) and i + 1 < len(lines):
            following = lines[i + 1]
            if MOD_BLOCK.match(following):
                depth = braces(following)
                i += 2
                while i < len(lines) and depth > 0:
                    depth += braces(lines[i])
                    i += 1
                continue
            named = MOD_FILE.match(following)
            if named:
                name = named.group(3)
                base = path.parent if path.name in ("mod.rs", "lib.rs", "main.rs") else path.with_suffix("")
                skipped.update({base / f"{name}.rs", base / name / "mod.rs"})
                i += 2
                continue
        kept += 1
        i += 1
    return kept


def main():
    totals = {}
    skipped = set()
    files = sorted((ROOT / "crates").glob("*/src/**/*"))
    # Parents first, so a test-only file is known before it is reached.
    for path in sorted(files, key=lambda p: len(p.parts)):
        if path.suffix not in (".rs", ".lua") or path in skipped:
            continue
        crate = path.relative_to(ROOT / "crates").parts[0]
        if path.suffix == ".lua":
            n = len(path.read_text(encoding="utf-8").splitlines())
        else:
            n = count(path, skipped)
        totals[crate] = totals.get(crate, 0) + n
    width = max(len(c) for c in totals)
    for crate, n in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"{crate:<{width}} {n:>7,}")
    print(f"{'total':<{width}} {sum(totals.values()):>7,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
