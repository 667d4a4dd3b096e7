"""One attempt of Python work, as the engine reads it.

Every attempt answers a tuple the native side turns into what the engine
expects of an executor:

- ``("response", status, [(name, value), ...], body)``: an HTTP response;
- ``("failed", not_sent, message)``: no response (a transport error);
- ``("raised", message)``: a function tool raised: an ``error`` outcome with
  that message, not retried.

httpx and httpx2 are recognised by duck type, from whichever is imported.
"""

from __future__ import annotations

import json
import sys
from asyncio import Task, get_running_loop
from typing import Any, Awaitable, Callable, Coroutine, Dict, Optional, Tuple

Answer = Tuple[Any, ...]

_HTTP_MODULES = ("httpx", "httpx2")


# One encoder for every tool's value: `json.dumps(value, allow_nan=False)`
# would build a new one per call.
_JSON = json.JSONEncoder(allow_nan=False)


def _types(name: str) -> Tuple[type, ...]:
    """The class ``name`` of httpx and of httpx2, whichever are imported.
    One plain loop: it runs on every attempt's value."""
    found = []
    for module_name in _HTTP_MODULES:
        module = sys.modules.get(module_name)
        if module is not None and hasattr(module, name):
            found.append(getattr(module, name))
    return tuple(found)


def describe(error: BaseException) -> str:
    """``TypeName: message``."""
    text = str(error)
    name = type(error).__name__
    return f"{name}: {text}" if text else name


def transport_failure(error: BaseException) -> Answer:
    """A request that got no response: never sent when the connection failed."""
    not_sent = isinstance(error, _types("ConnectError") + _types("ConnectTimeout"))
    return ("failed", not_sent, describe(error))


async def read_response(response: Any) -> Answer:
    """An httpx (or httpx2) response returned by a function tool, its body read."""
    try:
        body = response.content
    except Exception:
        body = await response.aread()
    return ("response", response.status_code, list(response.headers.raw), bytes(body))


async def run_tool(fn: Callable[..., Awaitable[Any]], args: Optional[Dict[str, Any]]) -> Answer:
    """One attempt of a function tool: ``await fn(**args)``."""
    try:
        value = await fn(**(args or {}))
    except Exception as error:
        if isinstance(error, _types("HTTPStatusError")):
            return await read_response(error.response)  # type: ignore[attr-defined]
        if isinstance(error, _types("TransportError")):
            return transport_failure(error)
        return ("raised", describe(error))
    if isinstance(value, _types("Response")):
        return await read_response(value)
    try:
        body = _JSON.encode(value).encode()
    except (TypeError, ValueError) as error:
        return ("raised", f"the tool returned a value that is not JSON: {describe(error)}")
    return ("response", 200, [(b"content-type", b"application/json")], body)


def loaded(response: Any) -> bool:
    """Whether a response's body was read when the transport built it."""
    try:
        response.content
    except Exception:
        return False
    return True


class Attempts:
    """What the transport remembers of its last attempt: the exception
    (re-raised when the call ends without a response), or the response and
    its raw body (handed back when the call ends on it), and whether the
    inner transport had read that body itself (see :func:`loaded`)."""

    __slots__ = ("error", "response", "body", "loaded")

    def __init__(self) -> None:
        self.error: Optional[BaseException] = None
        self.response: Any = None
        self.body = b""
        self.loaded = False

    def failed(self, error: BaseException) -> Answer:
        self.error = error
        self.response = None
        return transport_failure(error)

    def answered(self, response: Any, body: bytes, loaded: bool) -> Answer:
        self.error = None
        self.response = response
        self.body = body
        self.loaded = loaded
        return ("response", response.status_code, list(response.headers.raw), body)


async def send_async(inner: Any, request: Any, attempts: Attempts) -> Answer:
    """One attempt of a request through the inner async transport, its raw body read."""
    try:
        response = await inner.handle_async_request(request)
        # Asked once: a response not read raises to say so, and an
        # exception per request is a cost worth not paying twice.
        ready = loaded(response)
        try:
            # The raw stream, as the server sent it (still encoded): the
            # response handed back decodes it once. Read from the stream
            # itself, which a transport's ready-made response also has.
            body = b"".join([chunk async for chunk in response.stream])
        finally:
            # One whose body the transport had read (built in memory) holds
            # nothing open: left as it came, so that if it is handed back
            # (see `_transport.finish`) the client closes it as usual.
            if not ready:
                await response.aclose()
    except Exception as error:
        return attempts.failed(error)
    return attempts.answered(response, body, ready)


def send_sync(inner: Any, request: Any, attempts: Attempts) -> Answer:
    """One attempt of a request through the inner sync transport, its raw body read."""
    try:
        response = inner.handle_request(request)
        ready = loaded(response)
        try:
            body = b"".join(response.stream)
        finally:
            response.close()
    except Exception as error:
        return attempts.failed(error)
    return attempts.answered(response, body, ready)


if sys.version_info >= (3, 12):

    def _task(coroutine: Coroutine[Any, Any, Answer]) -> "Task[Answer]":
        # Started eagerly: its first step runs now, in its own task, so an
        # attempt that needs no wait (an answer in memory, a pooled
        # connection ready) is done before the engine looks, with no trip
        # through the event loop.
        return Task(coroutine, loop=get_running_loop(), eager_start=True)

else:

    def _task(coroutine: Coroutine[Any, Any, Answer]) -> "Task[Answer]":
        return get_running_loop().create_task(coroutine)


def start_tool(fn: Callable[..., Awaitable[Any]], args: Optional[Dict[str, Any]]) -> "Task[Answer]":
    """One attempt of a function tool, begun as a task on the running loop."""
    return _task(run_tool(fn, args))


def start_send(inner: Any, request: Any, attempts: Attempts) -> "Task[Answer]":
    """One attempt of a request through the inner async transport, begun as a task."""
    return _task(send_async(inner, request, attempts))
