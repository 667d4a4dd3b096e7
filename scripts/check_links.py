#!/usr/bin/env python3
"""Checks every relative link in the repository's Markdown files.

    scripts/check_links.py            # from anywhere; exits 1 when a link is broken

A link resolves when its file or directory exists (relative to the file
that holds it) and, when it names a `#fragment` in a Markdown file, that
file has a heading with that anchor, as GitHub derives anchors. Links to
other sites (`https:`, `mailto:`) are not fetched. Code blocks and inline
code are skipped, so examples that look like links are not read as links.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP_DIRS = {".git", "target", "corpus", "artifacts", "node_modules"}

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`+[^`]*`+")
# [text](target) and ![alt](target), with an optional "title".
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def markdown_files():
    for path in sorted(ROOT.rglob("*.md")):
        if not SKIP_DIRS.intersection(path.relative_to(ROOT).parts):
            yield path


def prose_lines(path):
    """(line number, text) of every line outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    text = INLINE_CODE.sub(lambda m: m.group(0).strip("`"), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        for _, line in prose_lines(path):
            match = HEADING.match(line)
            if not match:
                continue
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        cache[path] = found
    return cache[path]


def broken_links(path):
    for number, line in prose_lines(path):
        for target in LINK.findall(INLINE_CODE.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
                continue  # another site, or mailto:
            file_part, _, fragment = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path
            if not resolved.exists():
                yield number, target, "no such file"
            elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
                yield number, target, f"no heading with anchor #{fragment}"


def main():
    failures = 0
    checked = 0
    for path in markdown_files():
        checked += 1
        for number, target, why in broken_links(path):
            failures += 1
            print(f"{path.relative_to(ROOT)}:{number}: {target}: {why}")
    print(f"{checked} Markdown files checked, {failures} broken links", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
