"""The caller's current OpenTelemetry span, as a W3C ``traceparent`` for
the engine: a traced call's span becomes its child. The native module
asks for it when a call of a gate that traces starts; an untraced gate
never does.

opentelemetry is never imported here: if the program has not imported
``opentelemetry.trace``, no span of its can be current, so a program
without it pays one dictionary look-up per traced call and nothing else."""

from __future__ import annotations

import sys
from typing import Optional


def traceparent() -> Optional[str]:
    """``00-{trace id}-{span id}-{flags}`` of the current span, or ``None``
    when there is none with a valid context."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    try:
        context = trace.get_current_span().get_span_context()
        if not context.is_valid:
            return None
        flags = int(context.trace_flags) & 0xFF
        return f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"
    except Exception:
        # A broken or unexpected opentelemetry never fails the call: it
        # only goes untraced by the caller's trace.
        return None
