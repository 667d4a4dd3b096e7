#!/usr/bin/env python3
"""An everything-style MCP server (official Python SDK) for the conformance suite.

It implements the tools, resources and prompts the server scenarios of
@modelcontextprotocol/conformance name (see that package's `list` and each
scenario's description), so that tests/mcp-conformance/run.py can run the
suite against it directly and through `sluice mcp --listen`.

Over stdio by default (`sluice mcp --listen ADDR -- python3 server.py`);
over Streamable HTTP on 127.0.0.1:PORT with `--port PORT`.
"""

import asyncio
import base64
import json
import sys

import weakref

from mcp import types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    AudioContent,
    EmbeddedResource,
    ImageContent,
    TextContent,
    TextResourceContents,
)

# A 1x1 red PNG and a tiny silent WAV, made here rather than copied.
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
        "0000000c4944415408d763f8cfc000000301010018dd8db00000000049454e44ae426082"
    )
).decode()
WAV = base64.b64encode(
    b"RIFF" + (36 + 2).to_bytes(4, "little") + b"WAVEfmt " + (16).to_bytes(4, "little")
    + (1).to_bytes(2, "little") + (1).to_bytes(2, "little") + (8000).to_bytes(4, "little")
    + (16000).to_bytes(4, "little") + (2).to_bytes(2, "little") + (16).to_bytes(2, "little")
    + b"data" + (2).to_bytes(4, "little") + b"\x00\x00"
).decode()

server = MCPServer("sluice-conformance")


@server.tool()
def test_simple_text() -> str:
    """Returns a simple text."""
    return "This is a simple text response for testing."


@server.tool()
def test_image_content() -> list:
    """Returns an image."""
    return [ImageContent(type="image", data=PNG, mimeType="image/png")]


@server.tool()
def test_audio_content() -> list:
    """Returns audio."""
    return [AudioContent(type="audio", data=WAV, mimeType="audio/wav")]


@server.tool()
def test_embedded_resource() -> list:
    """Returns an embedded resource."""
    return [
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(
                uri="test://embedded-resource",
                mimeType="text/plain",
                text="This is an embedded resource content.",
            ),
        )
    ]


@server.tool()
def test_multiple_content_types() -> list:
    """Returns text, an image and a resource."""
    return [
        TextContent(type="text", text="Multiple content types test:"),
        ImageContent(type="image", data=PNG, mimeType="image/png"),
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(
                uri="test://mixed-content-resource",
                mimeType="application/json",
                text=json.dumps({"test": "data", "value": 123}),
            ),
        ),
    ]


# `logging/setLevel`: each session's level, below which its log messages are not sent.
LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
session_levels = weakref.WeakKeyDictionary()


async def set_logging_level(ctx, params: types.SetLevelRequestParams) -> types.EmptyResult:
    session_levels[ctx.session] = params.level
    return types.EmptyResult()


async def log(ctx: Context, level: str, message: str) -> None:
    wanted = session_levels.get(ctx.session, "debug")
    if LEVELS.index(level) >= LEVELS.index(wanted):
        await ctx.log(level, message)


@server.tool()
async def test_tool_with_logging(ctx: Context) -> str:
    """Logs three messages while it runs."""
    await log(ctx, "info", "Tool execution started")
    await asyncio.sleep(0.05)
    await log(ctx, "info", "Tool processing data")
    await asyncio.sleep(0.05)
    await log(ctx, "info", "Tool execution completed")
    return "Tool with logging executed successfully"


@server.tool()
async def test_tool_with_progress(ctx: Context) -> str:
    """Reports progress 0, 50, 100 of 100."""
    for step in (0, 50, 100):
        await ctx.report_progress(step, 100)
        if step < 100:
            await asyncio.sleep(0.05)
    return "Tool with progress executed successfully"


@server.tool()
def test_error_handling() -> str:
    """Always fails."""
    raise ToolError("This tool intentionally returns an error for testing")


@server.tool()
async def test_sampling(prompt: str, ctx: Context) -> str:
    """Asks the client's model."""
    from mcp.types import SamplingMessage

    answer = await ctx.session.create_message(
        messages=[SamplingMessage(role="user", content=TextContent(type="text", text=prompt))],
        max_tokens=100,
    )
    text = getattr(answer.content, "text", str(answer.content))
    return f"LLM response: {text}"


@server.tool()
async def test_elicitation(message: str, ctx: Context) -> str:
    """Asks the user for a name and an email."""
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    answer = await ctx.session.elicit_form(message=message, requested_schema=schema)
    return f"User response: action={answer.action}, content={json.dumps(answer.content)}"


@server.tool()
async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
    """Asks the user with a default for each primitive type (SEP-1034)."""
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "User name", "default": "John Doe"},
            "age": {"type": "integer", "description": "User age", "default": 30},
            "score": {"type": "number", "description": "User score", "default": 95.5},
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": {"type": "boolean", "description": "Verification status", "default": True},
        },
    }
    answer = await ctx.session.elicit_form(message="Please review your details", requested_schema=schema)
    return f"Elicitation completed: action={answer.action}, content={json.dumps(answer.content)}"


@server.tool()
async def test_elicitation_sep1330_enums(ctx: Context) -> str:
    """Asks the user with each of the five enum forms (SEP-1330)."""
    options = ["option1", "option2", "option3"]
    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": options},
            "titledSingle": {
                "type": "string",
                "oneOf": [
                    {"const": "value1", "title": "First Option"},
                    {"const": "value2", "title": "Second Option"},
                    {"const": "value3", "title": "Third Option"},
                ],
            },
            "legacyEnum": {
                "type": "string",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {"type": "array", "items": {"type": "string", "enum": options}},
            "titledMulti": {
                "type": "array",
                "items": {
                    "anyOf": [
                        {"const": "value1", "title": "First Choice"},
                        {"const": "value2", "title": "Second Choice"},
                        {"const": "value3", "title": "Third Choice"},
                    ]
                },
            },
        },
    }
    answer = await ctx.session.elicit_form(message="Please pick your options", requested_schema=schema)
    return f"Elicitation completed: action={answer.action}, content={json.dumps(answer.content)}"


@server.tool(description="Tool with JSON Schema 2020-12 features")
def json_schema_2020_12_tool(name: str = "", address: dict | None = None) -> str:
    return f"name={name}, address={json.dumps(address)}"


# Listed with a schema of its own (SEP-1613): `$schema`, `$defs`, `additionalProperties`.
server._tool_manager.get_tool("json_schema_2020_12_tool").parameters = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}


@server.tool()
async def test_reconnection(ctx: Context) -> str:
    """Closes its response stream mid-call, where the transport can (SEP-1699)."""
    await ctx.close_sse_stream()
    await asyncio.sleep(0.1)
    return "Reconnection test completed successfully"


@server.resource("test://static-text", mime_type="text/plain", description="A static text resource")
def static_text() -> str:
    return "This is the content of the static text resource."


@server.resource("test://static-binary", mime_type="image/png", description="A static binary resource")
def static_binary() -> bytes:
    return base64.b64decode(PNG)


@server.resource("test://watched-resource", mime_type="text/plain", description="A resource to subscribe to")
def watched() -> str:
    return "Watched resource content."


@server.resource("test://template/{id}/data", mime_type="application/json", description="A resource template")
def template(id: str) -> str:
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


# `resources/subscribe` and `resources/unsubscribe`: the URIs each session watches.
subscriptions = weakref.WeakKeyDictionary()


async def subscribe(ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
    subscriptions.setdefault(ctx.session, set()).add(str(params.uri))
    return types.EmptyResult()


async def unsubscribe(ctx, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
    subscriptions.get(ctx.session, set()).discard(str(params.uri))
    return types.EmptyResult()


# The SDK's MCPServer serves neither; its low-level server takes them.
for method, params_type, handler in (
    ("logging/setLevel", types.SetLevelRequestParams, set_logging_level),
    ("resources/subscribe", types.SubscribeRequestParams, subscribe),
    ("resources/unsubscribe", types.UnsubscribeRequestParams, unsubscribe),
):
    server._lowlevel_server.add_request_handler(method, params_type, handler)


@server.prompt(description="A simple prompt")
def test_simple_prompt() -> str:
    return "This is a simple prompt for testing."


@server.prompt(description="A prompt with two arguments")
def test_prompt_with_arguments(arg1: str, arg2: str) -> str:
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"


@server.prompt(description="A prompt embedding a resource")
def test_prompt_with_embedded_resource(resourceUri: str) -> list:
    from mcp.server.mcpserver.prompts.base import UserMessage

    return [
        UserMessage(
            content=EmbeddedResource(
                type="resource",
                resource=TextResourceContents(
                    uri=resourceUri, mimeType="text/plain", text="Embedded resource content for testing."
                ),
            )
        ),
        UserMessage(content=TextContent(type="text", text="Please process the embedded resource above.")),
    ]


@server.prompt(description="A prompt with an image")
def test_prompt_with_image() -> list:
    from mcp.server.mcpserver.prompts.base import UserMessage

    return [
        UserMessage(content=ImageContent(type="image", data=PNG, mimeType="image/png")),
        UserMessage(content=TextContent(type="text", text="Please analyze the image above.")),
    ]


@server.completion()
async def complete(ref, argument, context):
    from mcp.types import Completion

    values = [v for v in ("paris", "park", "party") if v.startswith(argument.value or "")]
    return Completion(values=values, total=len(values), hasMore=False)


if __name__ == "__main__":
    if "--port" in sys.argv:
        server.settings.log_level = "WARNING"
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[sys.argv.index("--port") + 1]))
    else:
        server.run("stdio")
