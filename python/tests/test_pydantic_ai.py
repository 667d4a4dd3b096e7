"""sluice under pydantic-ai, driven by pydantic-ai's own FunctionModel: one
model response asks for eight parallel calls against the fake."""

import pytest

pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.toolsets import FunctionToolset, WrapperToolset  # noqa: E402

import frameworks  # noqa: E402
import sluice.pydantic_ai  # noqa: E402


def run_agent(toolset, calls):
    """Runs an agent whose model asks for ``calls`` at once, then answers; the tool returns in call order."""

    def model(messages, info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[ToolCallPart(name, args, tool_call_id=f"call_{i}") for i, (name, args) in enumerate(calls)]
            )
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(model), toolsets=[toolset])
    result = agent.run_sync("what is going on with refunds?")
    assert result.output == "done"
    returns = {
        part.tool_call_id: part
        for message in result.all_messages()
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    }
    return [returns[f"call_{i}"] for i in range(len(calls))]


def test_eight_parallel_calls_share_a_turn_and_respect_the_key(fake_api):
    fake_api.set_rate_limit(allowed=3, window_s=1.0)
    toolset = sluice.pydantic_ai.GatedToolset(
        FunctionToolset(list(frameworks.tools(fake_api.url))),
        gate=frameworks.gate(),
        credential="support",
        reads=frameworks.READS,
    )
    parts = run_agent(toolset, frameworks.CALLS)
    assert [part.tool_name for part in parts] == [name for name, _ in frameworks.CALLS]
    frameworks.check(fake_api, [part.content for part in parts])


def test_an_api_answering_500_gives_the_model_an_error_result():
    sent = []
    toolset = sluice.pydantic_ai.GatedToolset(
        FunctionToolset([frameworks.failing_get_usage(sent)]),
        gate=frameworks.failing_gate(),
        credential="support",
        reads=["get_usage"],
    )
    [part] = run_agent(toolset, [("get_usage", {"customer_id": "c1"})])
    frameworks.check_failed(part.content, sent)


def test_it_is_a_wrapper_toolset_and_checks_its_arguments():
    gate = frameworks.gate()
    toolset = FunctionToolset(list(frameworks.tools("http://127.0.0.1:9")))
    assert isinstance(sluice.pydantic_ai.GatedToolset(toolset, gate=gate, credential="support"), WrapperToolset)
    with pytest.raises(ValueError, match="unknown credential 'nobody'"):
        sluice.pydantic_ai.GatedToolset(toolset, gate=gate, credential="nobody")
    with pytest.raises(ValueError, match="not the string"):
        sluice.pydantic_ai.GatedToolset(toolset, gate=gate, credential="support", reads="get_usage")


def test_a_tools_own_model_retry_reaches_pydantic_ai():
    from pydantic_ai import ModelRetry

    attempts = []

    async def get_usage(customer_id: str) -> dict:
        """A customer's usage this month."""
        attempts.append(customer_id)
        if customer_id != "c1":
            raise ModelRetry("customer ids look like c1")
        return {"customer_id": customer_id}

    seen = []

    def model(messages, info: AgentInfo) -> ModelResponse:
        seen[:] = [part for message in messages for part in getattr(message, "parts", [])]
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("get_usage", {"customer_id": "one"}, tool_call_id="a")])
        if len(messages) == 3:
            return ModelResponse(parts=[ToolCallPart("get_usage", {"customer_id": "c1"}, tool_call_id="b")])
        return ModelResponse(parts=[TextPart("done")])

    toolset = sluice.pydantic_ai.GatedToolset(
        FunctionToolset([get_usage]), gate=frameworks.gate(), credential="support", reads=["get_usage"]
    )
    result = Agent(FunctionModel(model), toolsets=[toolset]).run_sync("usage?")
    assert result.output == "done"
    assert attempts == ["one", "c1"], "sluice did not retry the tool itself"
    # pydantic-ai's own retry message, not a sluice error outcome.
    retry = [part for part in seen if getattr(part, "tool_call_id", None) == "a" and not isinstance(part, ToolCallPart)]
    assert [part.content for part in retry] == ["customer ids look like c1"]
