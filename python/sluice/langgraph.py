"""sluice under LangGraph: a ``ToolNode`` whose tool calls go through a gate.

``sluice.langgraph.ToolNode(tools, gate=gate, credential="support",
reads={"search_tickets"})`` is a drop-in for ``langgraph.prebuilt.ToolNode``
as a graph node (``tools_condition`` routes to it). The tool calls of the
last AI message run as one sluice turn, admitted in the model's order:
identical reads send one request, every call is paced by the credential's
limits, and a call that would wait past the inline threshold is deferred
to the model with ``retry_after_ms``.

It returns ``{"messages": [ToolMessage, ...]}``, one per call, in order,
with the call's ``tool_call_id`` and ``name``. ``content`` is the tool's
result when the outcome is ``ok``, else the outcome's JSON; ``status`` is
``"error"`` only for ``error`` and ``timed_out``: a deferral is not a
failure.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from typing import Any, Awaitable, Callable, Collection, Optional, Sequence

from . import _adapters
from ._gate import Gate, Turn
from ._sluice import Outcome

try:
    from langchain_core.messages import ToolMessage
    from langgraph.errors import GraphBubbleUp
    from langgraph.prebuilt import ToolNode as _ToolNode
    from langgraph.types import Command
except ImportError as error:  # pragma: no cover - exercised without the extra
    raise _adapters.missing_framework("langgraph", "LangGraph (langgraph)", "langgraph") from error

__all__ = ["ToolNode"]

# The turn of the node invocation running now: set around the node's own
# function, so every call it runs (tasks, or threads for a sync graph,
# which copy the context) shares it.
_turn: "contextvars.ContextVar[Optional[Turn]]" = contextvars.ContextVar("sluice_langgraph_turn", default=None)


class ToolNode(_ToolNode):
    """``langgraph.prebuilt.ToolNode`` with every tool call under ``gate`` on
    ``credential``; ``reads`` names the tools that are reads (coalesced
    within the turn, retried after server errors). ``name``, ``tags`` and
    ``messages_key`` are ``ToolNode``'s own.

    A tool may return an ``httpx.Response`` or raise
    ``httpx.HTTPStatusError``: sluice reads the server's status and
    rate-limit headers from it. Any other exception is an ``error`` result
    the model reads; LangGraph's interrupts pass through."""

    def __init__(
        self,
        tools: Sequence[Any],
        *,
        gate: Gate,
        credential: str,
        reads: Collection[str] = (),
        name: str = "tools",
        tags: Optional[list] = None,
        messages_key: str = "messages",
    ) -> None:
        _adapters.check_credential(gate, credential)
        super().__init__(
            tools,
            name=name,
            tags=tags,
            messages_key=messages_key,
            wrap_tool_call=self._gated_sync,
            awrap_tool_call=self._gated,
        )
        reads = _adapters.names(reads, "reads")
        unknown = sorted(reads - set(self.tools_by_name))
        if unknown:
            known = ", ".join(sorted(self.tools_by_name)) or "none"
            raise ValueError(f"reads names tools this node does not have: {', '.join(unknown)} (tools: {known})")
        self._gate = gate
        self._credential = credential
        self._reads = reads

    # `config` and `runtime` are left unannotated: LangGraph passes them by
    # name to a node function whose parameters are unannotated or typed as
    # its own types, and to no other.
    def _func(self, input: Any, config, runtime) -> Any:  # type: ignore[no-untyped-def]
        token = _turn.set(self._gate.turn())
        try:
            return super()._func(input, config, runtime)
        finally:
            _turn.reset(token)

    async def _afunc(self, input: Any, config, runtime) -> Any:  # type: ignore[no-untyped-def]
        token = _turn.set(self._gate.turn())
        try:
            return await super()._afunc(input, config, runtime)
        finally:
            _turn.reset(token)

    async def _gated(self, request: Any, execute: Callable[[Any], Awaitable[Any]]) -> Any:
        tool = request.tool
        if tool is None:
            # Not one of this node's tools: ToolNode's own answer.
            return await execute(request)
        call = request.tool_call
        injected = self._inject_tool_args(call, request.runtime, tool)
        config = request.runtime.config

        def invoke() -> Awaitable[Any]:
            # Called with the arguments alone, the tool returns its own value
            # (not a ToolMessage), so sluice can read an httpx response.
            return tool.ainvoke(injected["args"], config)

        outcome, value = await _adapters.call(
            _turn.get() or self._gate.turn(),
            call["name"],
            call["args"],
            invoke,
            credential=self._credential,
            read=call["name"] in self._reads,
            passthrough=(GraphBubbleUp,),
        )
        return _message(call, outcome, value)

    def _gated_sync(self, request: Any, execute: Callable[[Any], Any]) -> Any:
        if request.tool is None:
            return execute(request)
        coroutine = self._gated(request, _unused)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(coroutine)
        # A loop runs on this thread: the call runs on a loop of its own elsewhere.
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sluice") as pool:
            return pool.submit(contextvars.copy_context().run, asyncio.run, coroutine).result()


async def _unused(request: Any) -> Any:  # pragma: no cover - only for tools the node lacks
    raise RuntimeError("unreachable: the sync path answers unknown tools itself")


def _message(call: Any, outcome: Outcome, value: Any) -> Any:
    """What the model reads for one call."""
    if outcome.status == "ok":
        if isinstance(value, Command):
            return value
        if isinstance(value, ToolMessage):
            return value.model_copy(update={"tool_call_id": call["id"]})
        return ToolMessage(content=_adapters.text(value), tool_call_id=call["id"], name=call["name"])
    failed = outcome.status in ("error", "timed_out")
    return ToolMessage(
        content=outcome.to_json(),
        tool_call_id=call["id"],
        name=call["name"],
        status="error" if failed else "success",
    )
