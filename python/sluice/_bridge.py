"""The Python half of the bridge between asyncio and the engine's futures."""

from __future__ import annotations

import atexit
from typing import Any

from . import _sluice


def resolve(future: Any) -> None:
    """Wakes the task waiting on ``future`` (scheduled from another thread)."""
    if not future.done():
        future.set_result(None)


# Before the interpreter shuts down, sluice's wake thread stops attaching to
# it: a thread that waits for the GIL during shutdown is ended by CPython,
# which would abort the process.
atexit.register(_sluice._stop_waking)
