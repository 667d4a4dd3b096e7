"""sluice under LangGraph, driven by LangChain's FakeMessagesListChatModel in a
compiled graph routed by tools_condition: one AI message asks for eight
parallel calls against the fake."""

import asyncio

import pytest

pytest.importorskip("langgraph", reason="the langgraph extra is not installed")

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode as PrebuiltToolNode  # noqa: E402
from langgraph.prebuilt import tools_condition  # noqa: E402

import frameworks  # noqa: E402
import sluice.langgraph  # noqa: E402


def graph(tools, calls, **node):
    """A model whose first answer asks for ``calls`` at once, a sluice ToolNode, and back."""
    model = FakeMessagesListChatModel(
        responses=[
            AIMessage(
                content="",
                tool_calls=[{"name": name, "args": args, "id": f"call_{i}"} for i, (name, args) in enumerate(calls)],
            ),
            AIMessage(content="done"),
        ]
    )
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", sluice.langgraph.ToolNode(tools, **node))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile()


def tool_messages(state):
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


def test_eight_parallel_calls_run_as_one_turn(fake_api):
    fake_api.set_rate_limit(allowed=3, window_s=1.0)
    tools = [tool(fn) for fn in frameworks.tools(fake_api.url)]
    app = graph(tools, frameworks.CALLS, gate=frameworks.gate(), credential="support", reads=frameworks.READS)
    state = asyncio.run(app.ainvoke({"messages": [HumanMessage("what is going on with refunds?")]}))
    assert state["messages"][-1].content == "done"
    messages = tool_messages(state)
    assert [(m.tool_call_id, m.name) for m in messages] == [
        (f"call_{i}", name) for i, (name, _) in enumerate(frameworks.CALLS)
    ]
    frameworks.check(fake_api, [frameworks.decode(m.content) for m in messages])
    # A deferral is not a failure: only error and timed_out are marked so.
    assert all(m.status == "success" for m in messages)


def test_a_sync_graph_runs_the_same_turn(fake_api):
    fake_api.set_rate_limit(allowed=3, window_s=1.0)
    tools = [tool(fn) for fn in frameworks.tools(fake_api.url)]
    app = graph(tools, frameworks.CALLS, gate=frameworks.gate(), credential="support", reads=frameworks.READS)
    state = app.invoke({"messages": [HumanMessage("what is going on with refunds?")]})
    frameworks.check(fake_api, [frameworks.decode(m.content) for m in tool_messages(state)])


def test_an_api_answering_500_gives_the_model_an_error_result():
    sent = []
    tools = [tool(frameworks.failing_get_usage(sent))]
    app = graph(
        tools, [("get_usage", {"customer_id": "c1"})], gate=frameworks.failing_gate(), credential="support", reads=["get_usage"]
    )
    state = asyncio.run(app.ainvoke({"messages": [HumanMessage("usage?")]}))
    [message] = tool_messages(state)
    assert message.status == "error"
    frameworks.check_failed(frameworks.decode(message.content), sent)
    assert state["messages"][-1].content == "done", "the run went on"


def test_it_is_a_tool_node_and_checks_its_arguments():
    gate = frameworks.gate()
    tools = [tool(fn) for fn in frameworks.tools("http://127.0.0.1:9")]
    node = sluice.langgraph.ToolNode(tools, gate=gate, credential="support")
    assert isinstance(node, PrebuiltToolNode)
    assert sorted(node.tools_by_name) == sorted(frameworks.READS)
    with pytest.raises(ValueError, match="unknown credential 'nobody'"):
        sluice.langgraph.ToolNode(tools, gate=gate, credential="nobody")
    with pytest.raises(ValueError, match="reads names tools this node does not have: search"):
        sluice.langgraph.ToolNode(tools, gate=gate, credential="support", reads={"search"})
    with pytest.raises(ValueError, match="not the string"):
        sluice.langgraph.ToolNode(tools, gate=gate, credential="support", reads="get_usage")
