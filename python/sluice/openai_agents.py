"""sluice under the OpenAI Agents SDK: function tools whose calls go through a gate.

``@sluice.openai_agents.function_tool(gate, credential="support", read=True)``
is ``@agents.function_tool`` with the whole pipeline under it: coalescing
(reads), admission, concurrency, rate, deadline and retries.
:func:`gate_tool` paces a ``FunctionTool`` you already have.

The calls of one model response share one sluice turn (single-flight and
the read cache). The SDK marks no response on a tool call, so the turn is
keyed by the run: every tool call of one ``Runner.run`` gets the run's
``usage`` object in its ``ToolContext``, and a run's calls share a turn
while any of them is in flight and for :data:`TURN_IDLE_S` after the last
one ends. The SDK starts all of a response's calls at once and asks the
model again only once every one has ended, so one response's calls always
share a turn. Two responses share one only when the model answered within
that second; a repeated read is then answered from the turn's cache, as
the cache answers a repeat within its TTL (3 s) anyway.
"""

from __future__ import annotations

import asyncio
import copy
import json
import weakref
from typing import Any, Callable, Dict, Optional

from ._adapters import call, check_credential, missing_framework
from ._gate import Gate, Turn, _deadline

try:
    import agents
    from agents.tool_context import ToolContext
except ImportError as error:  # pragma: no cover - exercised without the extra
    raise missing_framework("openai_agents", "the OpenAI Agents SDK (openai-agents)", "openai-agents") from error

__all__ = ["TURN_IDLE_S", "function_tool", "gate_tool"]

#: How long a run's turn outlives its last call, in seconds: far longer than
#: the SDK takes to start the next of a response's calls, and shorter than
#: the turn cache's TTL (3 s), so sharing it across responses changes nothing
#: the cache would not.
TURN_IDLE_S = 1.0


class _RunTurn:
    """A run's current turn, the calls in flight in it, and the timer that ends it."""

    __slots__ = ("turn", "usage", "pending", "expiry")

    def __init__(self, turn: Turn, usage: Any) -> None:
        self.turn = turn
        # Held so that the key, its id, cannot be reused while this lives.
        self.usage = usage
        self.pending = 0
        self.expiry: Optional[asyncio.TimerHandle] = None


class _Turns:
    """Each run's current turn on one gate, keyed by the run's ``usage`` object."""

    def __init__(self, gate: Gate) -> None:
        self._gate = gate
        self._runs: Dict[int, _RunTurn] = {}

    def enter(self, ctx: Any) -> _RunTurn:
        usage = getattr(ctx, "usage", None)
        if usage is None:
            # Not called by a run (a test invoking the tool by hand): a turn of its own.
            return _RunTurn(self._gate.turn(), None)
        key = id(usage)
        entry = self._runs.get(key)
        if entry is None:
            entry = self._runs[key] = _RunTurn(self._gate.turn(), usage)
        if entry.expiry is not None:
            entry.expiry.cancel()
            entry.expiry = None
        entry.pending += 1
        return entry

    def leave(self, entry: _RunTurn) -> None:
        if entry.usage is None:
            return
        entry.pending -= 1
        if entry.pending == 0:
            entry.expiry = asyncio.get_running_loop().call_later(TURN_IDLE_S, self._end, entry)

    def _end(self, entry: _RunTurn) -> None:
        key = id(entry.usage)
        if entry.pending == 0 and self._runs.get(key) is entry:
            del self._runs[key]


_turns_by_gate: "weakref.WeakKeyDictionary[Gate, _Turns]" = weakref.WeakKeyDictionary()


def _turns(gate: Gate) -> _Turns:
    turns = _turns_by_gate.get(gate)
    if turns is None:
        turns = _turns_by_gate[gate] = _Turns(gate)
    return turns


def _args(input: str) -> Any:
    """The call's JSON arguments, its identity for coalescing; the text itself
    when it is not JSON (the tool then reports the error)."""
    try:
        return json.loads(input) if input else {}
    except ValueError:
        return input


def _gated(
    gate: Gate,
    tool: "agents.FunctionTool",
    invoke: Callable[[ToolContext, str], Any],
    *,
    credential: str,
    read: bool,
    idempotent: bool,
    deadline_ms: Optional[float],
) -> "agents.FunctionTool":
    turns = _turns(gate)
    name = tool.name

    async def on_invoke_tool(ctx: ToolContext, input: str) -> Any:
        entry = turns.enter(ctx)
        try:
            outcome, value = await call(
                entry.turn,
                name,
                _args(input),
                lambda: invoke(ctx, input),
                credential=credential,
                read=read,
                idempotent=idempotent,
                deadline_ms=deadline_ms,
            )
        finally:
            turns.leave(entry)
        # The model reads the tool's own result, or why there is none.
        return value if outcome.status == "ok" else outcome.to_json()

    gated = copy.copy(tool)
    gated.on_invoke_tool = on_invoke_tool
    return gated


def function_tool(
    gate: Gate,
    *,
    credential: str,
    read: bool = False,
    idempotent: bool = False,
    deadline_ms: Optional[float] = None,
    name_override: Optional[str] = None,
) -> Callable[[Callable[..., Any]], "agents.FunctionTool"]:
    """A decorator like ``agents.function_tool``, on a sync or async function:
    the ``agents.FunctionTool`` it returns has the name, description and
    JSON schema ``agents.function_tool`` gives (``name_override`` too), and
    each invocation runs the function under ``gate`` on ``credential``.

    A ``read`` is coalesced within the turn (identical calls of one model
    response send one request) and retried after server errors; a write
    is retried after them only when ``idempotent``. ``deadline_ms`` bounds
    each call, waits and retries included. The function may return an
    ``httpx.Response`` or raise ``httpx.HTTPStatusError``: sluice reads the
    server's status and rate-limit headers from it, as ``@gate.tool`` does.

    The model reads the function's own result when the outcome is ``ok``
    (for an httpx response, its body), and otherwise the outcome's JSON:
    ``rate_limited`` with ``retry_after_ms``, ``timed_out``, or ``error``
    with the server's status or the exception's message."""
    check_credential(gate, credential)
    _deadline(deadline_ms)

    def decorate(fn: Callable[..., Any]) -> "agents.FunctionTool":
        # Errors raised, not turned into text by the SDK: sluice reads an
        # HTTPStatusError's response, retries a TransportError, and makes
        # any other exception an `error` outcome the model reads.
        tool = agents.function_tool(fn, name_override=name_override, failure_error_function=None)
        return _gated(
            gate,
            tool,
            tool.on_invoke_tool,
            credential=credential,
            read=read,
            idempotent=idempotent,
            deadline_ms=deadline_ms,
        )

    return decorate


def gate_tool(gate: Gate, tool: "agents.FunctionTool", *, credential: str, read: bool = False) -> "agents.FunctionTool":
    """A copy of an existing ``agents.FunctionTool`` whose invocations are
    paced by ``gate`` on ``credential`` (and coalesced within a turn when
    ``read``). Such a tool's errors are already text, so sluice cannot read
    a server's answer from them: the tool is paced only, never retried."""
    check_credential(gate, credential)
    if not isinstance(tool, agents.FunctionTool):
        raise ValueError(f"tool must be an agents.FunctionTool, not {tool!r}")
    return _gated(
        gate, tool, tool.on_invoke_tool, credential=credential, read=read, idempotent=False, deadline_ms=None
    )
