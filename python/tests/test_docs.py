"""The examples in docs/python.md marked `<!-- test: run -->` run as written,
against the fake API, with the real SDKs."""

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"

BLOCK = re.compile(r"<!-- test: run -->\s*```python\n(.*?)```", re.DOTALL)


def examples():
    if not DOC.exists():
        return []
    return BLOCK.findall(DOC.read_text(encoding="utf-8"))


def test_the_guide_has_its_four_runnable_examples():
    if not DOC.exists():
        pytest.skip("docs/python.md is not beside this checkout")
    assert len(examples()) == 4


@pytest.mark.parametrize("index", range(len(examples())))
def test_example_runs(index, capsys):
    code = examples()[index]
    exec(compile(code, f"{DOC}:example {index + 1}", "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out.strip(), "the example prints its result"
