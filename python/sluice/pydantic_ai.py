"""sluice under pydantic-ai: a toolset whose tool calls go through a gate.

``sluice.pydantic_ai.GatedToolset(toolset, gate=gate, credential="support",
reads={"search_tickets"})`` is a ``WrapperToolset``: every call of the
wrapped toolset's tools goes through the gate, and the calls of one model
response (one run step) share a sluice turn, so identical reads send one
request.

A non-ok outcome is the tool's return value: the outcome's dict
(``rate_limited`` with ``retry_after_ms``, ``timed_out``, ``error``), never
an exception and never ``ModelRetry``, which would tell the model its
arguments were wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Collection, Optional

from . import _adapters
from ._gate import Gate, Turn

try:
    from pydantic_ai import RunContext
    from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry
    from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
    from pydantic_ai.toolsets.abstract import ToolsetTool
    from pydantic_core import to_jsonable_python
except ImportError as error:  # pragma: no cover - exercised without the extra
    raise _adapters.missing_framework("pydantic_ai", "pydantic-ai (pydantic-ai-slim)", "pydantic-ai") from error

__all__ = ["GatedToolset"]

# pydantic-ai's own signals from inside a tool: passed to it as they are.
_FRAMEWORK_SIGNALS = (ModelRetry, CallDeferred, ApprovalRequired)


@dataclass
class GatedToolset(WrapperToolset[Any]):
    """``toolset`` with every tool call under ``gate`` on ``credential``;
    ``reads`` names the tools that are reads (coalesced within the turn,
    retried after server errors).

    A tool may return an ``httpx.Response`` or raise
    ``httpx.HTTPStatusError``: sluice reads the server's status and
    rate-limit headers from it. Any other exception is an ``error``
    outcome the model reads; ``ModelRetry``, ``CallDeferred`` and
    ``ApprovalRequired`` raised by a tool pass through to pydantic-ai."""

    gate: Gate = field(kw_only=True)
    credential: str = field(kw_only=True)
    reads: Collection[str] = field(kw_only=True, default=())
    # This run step's turn: a new one at each step (see `for_run_step`).
    _turn: Optional[Turn] = field(kw_only=True, default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        _adapters.check_credential(self.gate, self.credential)
        self.reads = _adapters.names(self.reads, "reads")

    async def for_run_step(self, ctx: RunContext[Any]) -> AbstractToolset[Any]:
        # pydantic-ai calls this once at the start of each run step (one
        # model request and the tool calls of its response), and calls the
        # tools on the toolset it returns: a copy with a fresh turn.
        return replace(self, wrapped=await self.wrapped.for_run_step(ctx), _turn=self.gate.turn())

    async def call_tool(self, name: str, tool_args: dict, ctx: RunContext[Any], tool: ToolsetTool[Any]) -> Any:
        outcome, value = await _adapters.call(
            self._turn or self.gate.turn(),
            name,
            to_jsonable_python(tool_args, fallback=str),
            lambda: self.wrapped.call_tool(name, tool_args, ctx, tool),
            credential=self.credential,
            read=name in self.reads,
            passthrough=_FRAMEWORK_SIGNALS,
        )
        return value if outcome.status == "ok" else outcome.to_dict()
