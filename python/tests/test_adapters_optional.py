"""The frameworks stay optional: importing an adapter without its framework
raises an ImportError naming the extra to install."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "adapter, framework, extra",
    [
        ("openai_agents", "agents", "openai-agents"),
        ("langgraph", "langgraph", "langgraph"),
        ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
    ],
)
def test_an_adapter_without_its_framework_names_the_extra(adapter, framework, extra):
    # In a fresh interpreter where the framework cannot be imported.
    code = (
        f"import sys; sys.modules[{framework!r}] = None\n"
        "import sluice\n"
        "try:\n"
        f"    import sluice.{adapter}\n"
        "except ImportError as error:\n"
        "    print(error)\n"
        "else:\n"
        "    print('imported')\n"
    )
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert f"[{extra}]" in output, output


def test_the_package_imports_no_framework():
    code = "import sluice, sys; print(sorted({'agents', 'langgraph', 'pydantic_ai'} & set(sys.modules)))"
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"
