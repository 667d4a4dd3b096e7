"""sluice under the OpenAI Agents SDK, driven by the SDK's own ScriptedModel:
one model response asks for eight parallel calls against the fake."""

import asyncio

import pytest

agents = pytest.importorskip("agents", reason="the openai-agents extra is not installed")

from agents import Agent, RunConfig, Runner  # noqa: E402
from agents.items import ToolCallOutputItem  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402

import frameworks  # noqa: E402
import sluice.openai_agents  # noqa: E402

CONFIG = RunConfig(tracing_disabled=True)


def run_agent(tools, calls):
    """Runs one agent whose model asks for ``calls`` at once, then answers; the tool outputs in call order."""
    model = ScriptedModel(
        [
            [function_call(name, args, call_id=f"call_{i}") for i, (name, args) in enumerate(calls)],
            [assistant_message("done")],
        ]
    )
    agent = Agent(name="support", model=model, tools=tools)
    result = asyncio.run(Runner.run(agent, "what is going on with refunds?", run_config=CONFIG))
    outputs = {item.raw_item["call_id"]: item.output for item in result.new_items if isinstance(item, ToolCallOutputItem)}
    model.assert_complete()
    return [outputs[f"call_{i}"] for i in range(len(calls))]


def test_eight_parallel_calls_share_a_turn_and_respect_the_key(fake_api):
    fake_api.set_rate_limit(allowed=3, window_s=1.0)
    gate = frameworks.gate()
    search_tickets, get_usage, list_customers = frameworks.tools(fake_api.url)
    tools = [
        sluice.openai_agents.function_tool(gate, credential="support", read=True)(search_tickets),
        sluice.openai_agents.function_tool(gate, credential="support", read=True)(get_usage),
        sluice.openai_agents.function_tool(gate, credential="support", read=True)(list_customers),
    ]
    outputs = run_agent(tools, frameworks.CALLS)
    frameworks.check(fake_api, [frameworks.decode(o) for o in outputs])
    # An ok result is the function's own value, not a JSON round trip.
    assert isinstance(outputs[0], dict)


def test_the_tool_is_the_one_agents_function_tool_builds():
    gate = frameworks.gate()
    search_tickets, _, _ = frameworks.tools("http://127.0.0.1:9")
    plain = agents.function_tool(search_tickets)
    gated = sluice.openai_agents.function_tool(gate, credential="support", read=True)(search_tickets)
    assert isinstance(gated, agents.FunctionTool)
    assert (gated.name, gated.description, gated.params_json_schema) == (
        plain.name,
        plain.description,
        plain.params_json_schema,
    )
    renamed = sluice.openai_agents.function_tool(gate, credential="support", name_override="find_tickets")(
        search_tickets
    )
    assert renamed.name == "find_tickets"


def test_a_sync_function_runs_under_the_gate(fake_api):
    gate = frameworks.gate()

    def add(a: int, b: int) -> int:
        """Adds two numbers."""
        return a + b

    tool = sluice.openai_agents.function_tool(gate, credential="support")(add)
    assert run_agent([tool], [("add", {"a": 2, "b": 3})]) == [5]


def test_an_api_answering_500_gives_the_model_an_error_result():
    sent = []
    gate = frameworks.failing_gate()
    tool = sluice.openai_agents.function_tool(gate, credential="support", read=True)(frameworks.failing_get_usage(sent))
    [output] = run_agent([tool], [("get_usage", {"customer_id": "c1"})])
    frameworks.check_failed(frameworks.decode(output), sent)


def test_gate_tool_paces_an_existing_tool(fake_api):
    fake_api.set_rate_limit(allowed=3, window_s=1.0)
    gate = frameworks.gate()
    search_tickets, get_usage, list_customers = frameworks.tools(fake_api.url)
    tools = [
        sluice.openai_agents.gate_tool(gate, agents.function_tool(fn), credential="support", read=True)
        for fn in (search_tickets, get_usage, list_customers)
    ]
    outputs = run_agent(tools, frameworks.CALLS)
    frameworks.check(fake_api, [frameworks.decode(o) for o in outputs])


def test_arguments_are_checked():
    gate = frameworks.gate()
    with pytest.raises(ValueError, match="unknown credential 'nobody'"):
        sluice.openai_agents.function_tool(gate, credential="nobody")
    with pytest.raises(ValueError, match="deadline_ms"):
        sluice.openai_agents.function_tool(gate, credential="support", deadline_ms=0)
    with pytest.raises(ValueError, match="agents.FunctionTool"):
        sluice.openai_agents.gate_tool(gate, lambda: 1, credential="support")
