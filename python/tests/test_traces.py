"""OpenTelemetry traces from Python: a gate whose ``[telemetry]`` names an
endpoint exports each call's span over OTLP/HTTP, a child of the caller's
current OpenTelemetry span, with a CLIENT span per upstream request; the
spans left at exit are flushed. The collector is an OTLP/HTTP receiver
started here, which decodes what it is sent."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, Iterator, List, Optional, Tuple

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanContext

import sluice
from conftest import support_config


class Receiver:
    """An OTLP/HTTP collector on loopback that keeps every span posted to
    ``/v1/traces``; it also answers ``GET /api/...`` as an upstream that
    records the ``traceparent`` each request carried."""

    def __init__(self) -> None:
        self.bodies: List[bytes] = []
        self.traceparents: List[Optional[str]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path == "/v1/traces":
                    receiver.bodies.append(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                receiver.traceparents.append(self.headers.get("traceparent"))
                body = json.dumps({"path": self.path}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def spans(self) -> List[Span]:
        spans = []
        for body in self.bodies:
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    spans.extend(scope.spans)
        return spans

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    # The caller's OTEL_* variables would override the config's endpoint.
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    collector = Receiver()
    yield collector
    collector.close()


def attributes(span: Span) -> Dict[str, object]:
    values: Dict[str, object] = {}
    for pair in span.attributes:
        kind = pair.value.WhichOneof("value")
        values[pair.key] = getattr(pair.value, kind) if kind else None
    return values


def traced_gate(upstream: str, endpoint: str) -> sluice.Gate:
    config = support_config(upstream)
    config["telemetry"] = {"endpoint": endpoint, "service_name": "py-test"}
    return sluice.Gate(config, seed=7)


def test_a_call_joins_the_current_opentelemetry_span(receiver: Receiver, fake_api: sluice.testing.FakeApi) -> None:
    gate = traced_gate(fake_api.url, receiver.url)
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("agent step") as step:
        out = asyncio.run(gate.call("search_tickets", {"query": "refund"}))
    assert out.status == "ok"
    assert gate.flush_traces(5.0)

    spans = receiver.spans()
    calls = [span for span in spans if span.name == "execute_tool search_tickets"]
    assert len(calls) == 1, [span.name for span in spans]
    call = calls[0]
    parent = step.get_span_context()
    assert call.trace_id == parent.trace_id.to_bytes(16, "big")
    assert call.parent_span_id == parent.span_id.to_bytes(8, "big")
    assert call.kind == Span.SpanKind.SPAN_KIND_INTERNAL
    said = attributes(call)
    assert said["gen_ai.operation.name"] == "execute_tool"
    assert said["gen_ai.tool.name"] == "search_tickets"
    assert said["sluice.outcome"] == "ok"
    assert said["sluice.credential"] == "support"
    assert said["sluice.attempts"] == 1

    clients = [span for span in spans if span.kind == Span.SpanKind.SPAN_KIND_CLIENT]
    assert len(clients) == 1, [span.name for span in spans]
    client = clients[0]
    assert client.trace_id == call.trace_id
    assert client.parent_span_id == call.span_id
    sent = attributes(client)
    assert sent["http.request.method"] == "GET"
    assert sent["http.response.status_code"] == 200
    assert sent["server.address"] == "127.0.0.1"
    assert len(fake_api.requests()) == 1


def test_the_upstream_is_sent_the_client_spans_traceparent(receiver: Receiver) -> None:
    # The receiver is the upstream too: it records the header.
    gate = traced_gate(receiver.url, receiver.url)
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("agent step"):
        outs = gate.turn().execute_sync([sluice.call("get_ticket", {"id": 7})])
    assert [out.status for out in outs] == ["ok"]
    assert gate.flush_traces(5.0)

    [client] = [span for span in receiver.spans() if span.kind == Span.SpanKind.SPAN_KIND_CLIENT]
    assert receiver.traceparents == [f"00-{client.trace_id.hex()}-{client.span_id.hex()}-01"]


def test_a_request_through_the_transport_joins_the_current_span(receiver: Receiver) -> None:
    # httpx sends the request itself: one call span, no CLIENT span.
    gate = traced_gate(receiver.url, receiver.url)
    tracer = TracerProvider().get_tracer("test")

    async def send() -> Tuple[int, SpanContext]:
        async with httpx.AsyncClient(transport=sluice.HTTPTransport(gate, "support")) as client:
            with tracer.start_as_current_span("agent step") as step:
                response = await client.get(f"{receiver.url}/api/tickets/1")
                return response.status_code, step.get_span_context()

    status, parent = asyncio.run(send())
    assert status == 200
    assert gate.flush_traces(5.0)
    [call] = receiver.spans()
    assert call.name == "execute_tool http:support"
    assert call.trace_id == parent.trace_id.to_bytes(16, "big")
    assert call.parent_span_id == parent.span_id.to_bytes(8, "big")
    assert attributes(call)["sluice.outcome"] == "ok"


def test_a_call_outside_any_span_starts_a_trace(receiver: Receiver, fake_api: sluice.testing.FakeApi) -> None:
    gate = traced_gate(fake_api.url, receiver.url)
    assert asyncio.run(gate.call("search_tickets", {"query": "a"})).status == "ok"
    assert gate.flush_traces(5.0)
    [call] = [span for span in receiver.spans() if span.name == "execute_tool search_tickets"]
    assert call.parent_span_id == b""
    assert len(call.trace_id) == 16 and call.trace_id != bytes(16)


def test_a_call_under_an_unsampled_span_is_not_traced(receiver: Receiver, fake_api: sluice.testing.FakeApi) -> None:
    # The default sampler is parent-based: the caller's flag decides.
    gate = traced_gate(fake_api.url, receiver.url)
    tracer = TracerProvider(sampler=ALWAYS_OFF).get_tracer("test")
    with tracer.start_as_current_span("agent step") as step:
        assert step.get_span_context().is_valid
        assert asyncio.run(gate.call("search_tickets", {"query": "a"})).status == "ok"
    assert gate.flush_traces(5.0)
    assert receiver.spans() == []
    assert len(fake_api.requests()) == 1


def test_a_gate_without_telemetry_exports_nothing(receiver: Receiver, fake_api: sluice.testing.FakeApi) -> None:
    gate = sluice.Gate(support_config(fake_api.url), seed=7)
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("agent step"):
        assert asyncio.run(gate.call("search_tickets", {"query": "a"})).status == "ok"
    assert gate.flush_traces(5.0)
    assert receiver.bodies == []


# Exits without flushing, with an export interval longer than the test and
# the gate held by a thread that never ends (so it is never dropped, which
# would send its spans too): only the flush at exit can send them. It never
# imports opentelemetry.
EXITING = textwrap.dedent(
    """
    import asyncio, sys, threading
    import sluice
    config = {
        "credentials": {"support": {"base_url": sys.argv[1]}},
        "tools": {"get_ticket": {"credential": "support", "path": "/api/tickets/{id}"}},
        "telemetry": {"endpoint": sys.argv[1]},
    }
    gate = sluice.Gate(config)
    assert asyncio.run(gate.call("get_ticket", {"id": 1})).status == "ok"
    assert not [name for name in sys.modules if name.startswith("opentelemetry")]
    holder = threading.Thread(target=lambda kept=gate: threading.Event().wait(), daemon=True)
    holder.start()
    """
)


def test_spans_left_at_exit_are_flushed(receiver: Receiver) -> None:
    env = dict(os.environ, OTEL_BSP_SCHEDULE_DELAY="600000")
    done = subprocess.run(
        [sys.executable, "-c", EXITING, receiver.url], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    names = [span.name for span in receiver.spans()]
    assert sorted(names) == ["GET", "execute_tool get_ticket"]


def test_a_bad_telemetry_variable_is_refused_by_name(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    # As `sluice serve` refuses it: the gate is not built half-traced.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(sluice.ConfigError) as refused:
        traced_gate(receiver.url, receiver.url)
    assert refused.value.field == "OTEL_EXPORTER_OTLP_PROTOCOL"
    assert "http/protobuf" in str(refused.value)


def test_an_unusable_otel_variable_warns_when_the_gate_did_not_ask_for_traces(
    receiver: Receiver, fake_api: sluice.testing.FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The application's own OpenTelemetry setup (gRPC) must not stop a gate
    # that has no [telemetry] section: it warns, naming the variable, and
    # runs untraced.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.warns(RuntimeWarning, match="OTEL_EXPORTER_OTLP_PROTOCOL"):
        gate = sluice.Gate(support_config(fake_api.url), seed=7)
    assert asyncio.run(gate.call("search_tickets", {"query": "a"})).status == "ok"
    assert gate.flush_traces(5.0)
    assert receiver.bodies == []
