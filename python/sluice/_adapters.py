"""What the framework adapters share: one tool call of a framework run under
the gate as a function tool, and what its result is for the model."""

from __future__ import annotations

import json
import weakref
from functools import partial
from typing import Any, Awaitable, Callable, Dict, Iterable, Optional, Tuple, Type

from . import _attempt
from ._gate import Gate, Turn, _deadline
from ._sluice import Outcome

_NOTHING = object()

# The value each read's own attempt returned, by (tool, canonical arguments),
# so that a call that joined an identical read in flight, or was answered
# from the turn's cache, hands the model the very same value.
_values: "weakref.WeakKeyDictionary[Turn, Dict[Tuple[str, str], Any]]" = weakref.WeakKeyDictionary()


def missing_framework(adapter: str, framework: str, extra: str) -> ImportError:
    """The error raised when an adapter is imported without its framework."""
    return ImportError(
        f"sluice.{adapter} needs {framework}, which is not installed: "
        f"install sluice with the extra `pip install './python[{extra}]'` "
        f"(the versions sluice is tested with)"
    )


def check_credential(gate: Gate, credential: str) -> None:
    """Raises ``ValueError`` naming the credential when the gate has no such one."""
    if not isinstance(gate, Gate):
        raise ValueError(f"gate must be a sluice.Gate, not {gate!r}")
    if credential not in gate.credentials:
        known = ", ".join(sorted(gate.credentials)) or "none"
        raise ValueError(f"unknown credential {credential!r} (configured: {known})")


def names(reads: Iterable[str], what: str) -> frozenset:
    """``reads`` as a set of tool names; a lone string is a mistake worth naming."""
    if isinstance(reads, str):
        raise ValueError(f"{what} must be a collection of tool names, not the string {reads!r}")
    return frozenset(reads)


def is_response(value: Any) -> bool:
    """Whether ``value`` is an httpx (or httpx2) response, which sluice reads."""
    return isinstance(value, _attempt._types("Response"))


class _Box:
    """What one call's attempts left: the last value, or an exception the
    framework must see itself (its own control flow, not a tool failure)."""

    __slots__ = ("value", "raised")

    def __init__(self) -> None:
        self.value: Any = _NOTHING
        self.raised: Optional[BaseException] = None


async def call(
    turn: Turn,
    tool: str,
    args: Any,
    invoke: Callable[[], Awaitable[Any]],
    *,
    credential: str,
    read: bool,
    idempotent: bool = False,
    deadline_ms: Optional[float] = None,
    passthrough: Tuple[Type[BaseException], ...] = (),
) -> Tuple[Outcome, Any]:
    """Runs ``invoke()`` under the gate as one call of ``tool`` in ``turn``,
    with ``args`` (JSON) as its identity for coalescing. Returns the outcome
    and, when it is ``ok``, the value the tool returned (for a call that
    joined an identical read, the value of the read it joined; for an
    httpx response, its body as the outcome has it).

    Each attempt's value is kept on the Python side: the engine is handed
    an httpx response to read, or ``null`` for any other value, so a tool
    may return what its framework accepts (a model, a message), JSON or
    not. An exception of a ``passthrough`` type is raised again after the
    call: it is the framework's own signal (an interrupt, a retry request)."""
    box = _Box()
    key = (tool, canonical(args))

    async def attempt() -> Any:
        box.value = _NOTHING
        try:
            value = await invoke()
        except passthrough as error:
            box.raised = error
            return None
        box.value = value
        if read:
            # Kept before the engine wakes anyone: a call that joined this
            # one may resume before this one does.
            _values.setdefault(turn, {})[key] = value
        return value if is_response(value) else None

    core = turn._core
    prepared = core.function(
        tool,
        credential,
        read,
        idempotent,
        None,
        args,
        _deadline(deadline_ms),
        partial(_attempt.start_tool, attempt, None),
    )
    outcome: Outcome = await core.run(prepared)
    if box.raised is not None:
        raise box.raised
    if outcome.status != "ok":
        return outcome, None
    value = box.value
    if value is _NOTHING:
        value = _values.get(turn, {}).get(key, _NOTHING)
    if value is _NOTHING or is_response(value):
        value = outcome.body
    return outcome, value


def canonical(args: Any) -> str:
    """A call's arguments as the text that identifies them (keys sorted)."""
    try:
        return json.dumps(args, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(args)


def text(value: Any) -> str:
    """A tool's value as the text a model reads: a string as it is, anything
    else as JSON (``str()`` for what JSON cannot carry)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
