"""``sluice.Gate`` and ``sluice.Turn``: the engine's gate and turns, with
function tools and the turn a ``with turn:`` block makes current."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextvars
import inspect
import math
from functools import partial
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    FrozenSet,
    Iterable,
    List,
    Mapping,
    Optional,
    TypeVar,
    Union,
)

from . import _attempt, _sluice
from ._sluice import GateCore, Outcome, Prepared

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

# Past this a deadline is certainly longer than the engine allows (a week):
# the call is answered with an `error` outcome saying so.
_MAX_MS = 2**63

# How long the interpreter's exit waits for the last spans (as the sidecar
# waits on SIGTERM): a collector that does not answer never holds it longer.
_EXIT_FLUSH_S = 5.0

atexit.register(_sluice._flush_traces, _EXIT_FLUSH_S)

_current_turn: "contextvars.ContextVar[Optional[Turn]]" = contextvars.ContextVar(
    "sluice_current_turn", default=None
)


def current_turn() -> "Optional[Turn]":
    """The turn of the innermost ``with turn:`` block, if any."""
    return _current_turn.get()


def _deadline(deadline_ms: Optional[float]) -> Optional[int]:
    if deadline_ms is None:
        return None
    if isinstance(deadline_ms, bool) or not isinstance(deadline_ms, (int, float)):
        raise ValueError(f"deadline_ms must be a number of milliseconds, not {deadline_ms!r}")
    if not deadline_ms > 0:
        raise ValueError(f"deadline_ms must be positive, not {deadline_ms!r}")
    if math.isinf(deadline_ms) or deadline_ms >= _MAX_MS:
        return _MAX_MS
    return int(math.ceil(deadline_ms))


class Call:
    """One tool call for :meth:`Turn.execute`: see :func:`call`."""

    __slots__ = ("tool", "args", "deadline_ms")

    def __init__(
        self, tool: str, args: Optional[Mapping[str, Any]] = None, deadline_ms: Optional[float] = None
    ) -> None:
        if not isinstance(tool, str):
            raise ValueError(f"tool must be a str, not {tool!r}")
        self.tool = tool
        self.args = args
        self.deadline_ms = deadline_ms

    def __repr__(self) -> str:
        return f"sluice.call({self.tool!r}, {self.args!r}, deadline_ms={self.deadline_ms!r})"


def call(tool: str, args: Optional[Mapping[str, Any]] = None, *, deadline_ms: Optional[float] = None) -> Call:
    """A call of ``tool`` with JSON ``args``, for :meth:`Turn.execute`."""
    return Call(tool, args, deadline_ms)


class FunctionTool:
    """A tool that is an ``async def`` of yours, registered with :meth:`Gate.tool`."""

    __slots__ = ("name", "fn", "credential", "read", "idempotent", "deadline_ms")

    def __init__(
        self,
        name: str,
        fn: Callable[..., Awaitable[Any]],
        credential: str,
        read: bool,
        idempotent: bool,
        deadline_ms: Optional[int],
    ) -> None:
        self.name = name
        self.fn = fn
        self.credential = credential
        self.read = read
        self.idempotent = idempotent
        self.deadline_ms = deadline_ms

    def starter(self, args: Any) -> Callable[[], "asyncio.Task[Any]"]:
        """What begins one attempt: a task on the running loop."""
        return partial(_attempt.start_tool, self.fn, args)


class Gate:
    """The limits every call goes through: built once from a configuration,
    shared by every turn. ``config`` is a ``dict`` with sluice.toml's schema
    (``{"credentials": {"support": {"rate": "10/1s", ...}}, "tools": {...}}``)
    or TOML text. A bad configuration raises :class:`sluice.ConfigError`
    naming the field. ``seed`` makes the retry jitter repeatable.

    Tools in the configuration (HTTP templates on a credential's
    ``base_url``) are sent by the engine itself, with the credential's
    secret from the environment; :meth:`tool` adds tools that are your own
    functions."""

    def __init__(self, config: Union[Mapping[str, Any], str], *, seed: Optional[int] = None) -> None:
        if isinstance(config, Mapping) and not isinstance(config, dict):
            config = dict(config)
        self._core = GateCore(config, seed)
        self._credentials: FrozenSet[str] = frozenset(self._core.credentials())
        self._configured: FrozenSet[str] = frozenset(self._core.tools())
        self._functions: Dict[str, FunctionTool] = {}

    @property
    def credentials(self) -> FrozenSet[str]:
        """The configured credentials' names."""
        return self._credentials

    @property
    def tools(self) -> FrozenSet[str]:
        """Every tool's name: configured ones and function tools."""
        return self._configured | frozenset(self._functions)

    def turn(self) -> "Turn":
        """A new turn: the calls of one model step, sharing single-flight and a read cache."""
        return Turn(self)

    def call(
        self, tool: str, args: Optional[Mapping[str, Any]] = None, *, deadline_ms: Optional[float] = None
    ) -> Awaitable[Outcome]:
        """One call in a turn of its own."""
        return self.turn().call(tool, args, deadline_ms=deadline_ms)

    def in_flight(self, credential: str) -> int:
        """Requests in flight on a credential's own scope right now."""
        return self._core.in_flight(credential)

    def flush_traces(self, timeout_s: float = 5.0) -> bool:
        """Sends the spans this gate's calls left (when its configuration
        turns traces on), waiting at most ``timeout_s`` seconds. False when
        they did not all leave in time. The interpreter's exit does this
        for every gate by itself."""
        return self._core.flush_traces(float(timeout_s))

    def tool(
        self,
        name: str,
        *,
        credential: str,
        read: bool = False,
        idempotent: bool = False,
        deadline_ms: Optional[float] = None,
    ) -> Callable[[F], F]:
        """Registers an ``async def`` as the tool ``name``, spending
        ``credential``. A ``read`` is coalesced and cached within a turn and
        retried after server errors; a write is retried after them only when
        ``idempotent``. A call of it runs the function with the call's
        arguments as keyword arguments, under the whole pipeline.

        The function may return an ``httpx.Response`` (read as sluice reads
        its own requests' responses), raise ``httpx.HTTPStatusError`` (its
        response is read), or return any JSON-serializable value (an ``ok``
        outcome with that body). Another exception is an ``error`` outcome
        with its message, not retried; an ``httpx.TransportError`` is a
        failed request, retried like a connection error."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a tool's name must be a non-empty str, not {name!r}")
        if credential not in self._credentials:
            known = ", ".join(sorted(self._credentials)) or "none"
            raise ValueError(f"tool {name!r}: unknown credential {credential!r} (configured: {known})")
        if name in self._configured:
            raise ValueError(f"tool {name!r} is already configured as an HTTP tool")
        deadline = _deadline(deadline_ms)

        def register(fn: F) -> F:
            if not inspect.iscoroutinefunction(fn):
                raise TypeError(f"tool {name!r} must be an async def")
            self._functions[name] = FunctionTool(name, fn, credential, bool(read), bool(idempotent), deadline)
            return fn

        return register


class Turn:
    """One model step's calls: they share single-flight (identical reads in
    flight send one request) and a read cache. ``with turn:`` (or
    ``async with turn:``) makes it the turn that requests through
    :class:`sluice.HTTPTransport` join."""

    def __init__(self, gate: Gate) -> None:
        self._gate = gate
        self._core = gate._core.turn()
        self._tokens: List["contextvars.Token[Optional[Turn]]"] = []

    @property
    def gate(self) -> Gate:
        """The gate this turn belongs to."""
        return self._gate

    @property
    def upstream_requests(self) -> int:
        """Upstream requests (attempts) this turn has caused so far."""
        return self._core.upstream_requests()

    def _prepare(self, tool: str, args: Any, deadline_ms: Optional[float]) -> Prepared:
        deadline = _deadline(deadline_ms)
        function = self._gate._functions.get(tool)
        if function is None:
            return self._core.tool(tool, args, deadline)
        return self._core.function(
            tool,
            function.credential,
            function.read,
            function.idempotent,
            function.deadline_ms,
            args,
            deadline,
            function.starter(args),
        )

    def call(
        self, tool: str, args: Optional[Mapping[str, Any]] = None, *, deadline_ms: Optional[float] = None
    ) -> Awaitable[Outcome]:
        """Runs one call in this turn; await it for its :class:`Outcome`.
        ``deadline_ms`` overrides the tool's deadline."""
        return self._core.run(self._prepare(tool, args, deadline_ms))

    def execute(self, calls: Iterable[Call]) -> Awaitable[List[Outcome]]:
        """Runs calls concurrently; await it for one :class:`Outcome` per call, in order."""
        prepared = [self._prepare(c.tool, c.args, c.deadline_ms) for c in _calls(calls)]
        return self._core.run_all(prepared)

    def execute_sync(self, calls: Iterable[Call]) -> List[Outcome]:
        """:meth:`execute` from synchronous code: on an event loop of its
        own (on another thread if one is running on this one)."""
        prepared = [self._prepare(c.tool, c.args, c.deadline_ms) for c in _calls(calls)]

        async def run() -> List[Outcome]:
            return await self._core.run_all(prepared)

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(run())
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sluice") as pool:
            context = contextvars.copy_context()
            return pool.submit(context.run, asyncio.run, run()).result()

    def __enter__(self) -> "Turn":
        self._tokens.append(_current_turn.set(self))
        return self

    def __exit__(self, *exc_info: Any) -> None:
        _current_turn.reset(self._tokens.pop())

    async def __aenter__(self) -> "Turn":
        return self.__enter__()

    async def __aexit__(self, *exc_info: Any) -> None:
        self.__exit__(*exc_info)


def _calls(calls: Iterable[Call]) -> List[Call]:
    listed = list(calls)
    for index, one in enumerate(listed):
        if not isinstance(one, Call):
            raise ValueError(f"calls[{index}] must be a sluice.call(...), not {one!r}")
    return listed
