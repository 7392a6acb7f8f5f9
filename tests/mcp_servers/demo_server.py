"""A real MCP server for the tests, built on the SDK's own `MCPServer` class.

    python -m tests.mcp_servers.demo_server stdio
    python -m tests.mcp_servers.demo_server http PORT

Environment (all optional):
- DEMO_DIR: a directory where the server writes what the tests check: `calls.jsonl` (one
  line per tool call that reached the server), `starts` (one line per server process) and
  `<key>.pid` markers of `slow_once`.
- DEMO_SECRET: read by `secret_status`, which reports its length, never its value.
- DEMO_TOKEN (http): every request must carry `Authorization: Bearer <DEMO_TOKEN>`, else
  the server answers 401.
- DEMO_BAD_SCHEMA: lists `add` with an input schema that is not a JSON schema.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import EmbeddedResource, TextResourceContents

server = MCPServer("demo")
DIR = Path(os.environ["DEMO_DIR"]) if os.environ.get("DEMO_DIR") else None
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000100e221bc330000000049454e44ae426082"
)


def _note(tool: str, ctx: Context | None = None, **arguments: Any) -> None:
    if DIR is not None:
        meta = ctx.request_context.meta if ctx is not None else None
        key = (meta or {}).get("durable-agent/idempotency-key")
        line = json.dumps({"tool": tool, "arguments": arguments, "pid": os.getpid(), "key": key})
        with (DIR / "calls.jsonl").open("a") as file:
            file.write(line + "\n")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    _note("add", a=a, b=b)
    return a + b


@server.tool()
def record(text: str, ctx: Context) -> str:
    """Record a line of text (a side effect the tests count)."""
    _note("record", ctx, text=text)
    return f"recorded {text}"


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the given reason."""
    _note("fail", reason=reason)
    raise ToolError(f"cannot do that: {reason}")


@server.tool(structured_output=False)
def picture() -> list[Any]:
    """A one-pixel PNG and a caption."""
    _note("picture")
    return ["a red pixel", Image(data=PNG, format="png")]


@server.tool()
def readme() -> EmbeddedResource:
    """An embedded text resource."""
    _note("readme")
    return EmbeddedResource(
        resource=TextResourceContents(
            uri="file:///README.md", mime_type="text/markdown", text="# Hi"
        )
    )


@server.tool()
def secret_status() -> str:
    """Says whether DEMO_SECRET reached the server (its length, never its value)."""
    _note("secret_status")
    return f"DEMO_SECRET has {len(os.environ.get('DEMO_SECRET', ''))} characters"


@server.tool()
async def slow_once(key: str) -> str:
    """The first call for a key writes this process's pid to `<key>.pid` and hangs (a test
    kills the server then); later calls finish at once."""
    _note("slow_once", key=key)
    assert DIR is not None
    marker = DIR / f"{key}.pid"
    if not marker.exists():
        marker.write_text(str(os.getpid()))
        await asyncio.sleep(600)
    return f"finished {key}"


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool `late` and tells the client that the tool list changed."""
    _note("grow")

    def late(word: str) -> str:
        """Added at run time."""
        _note("late", word=word)
        return f"late {word}"

    server.add_tool(late, name="late")
    await ctx.notify_tools_changed()  # 2026 protocol: to subscriptions/listen streams
    with contextlib.suppress(Exception):
        await ctx.session.send_tool_list_changed()  # earlier protocols: a notification
    return "added late"


def _break_schema() -> None:
    tool = server._tool_manager.get_tool("add")
    assert tool is not None
    tool.parameters["properties"]["a"]["type"] = 12  # not a JSON-schema type


def _bearer_only(app: Any, token: str) -> Any:
    expected = f"Bearer {token}".encode()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await app(scope, receive, send)

    return guarded


def main(argv: list[str]) -> None:
    if DIR is not None:
        with (DIR / "starts").open("a") as file:
            file.write(f"{os.getpid()}\n")
    if os.environ.get("DEMO_BAD_SCHEMA"):
        _break_schema()
    if argv[0] == "stdio":
        server.run()
        return
    import uvicorn

    app = server.streamable_http_app()
    token = os.environ.get("DEMO_TOKEN")
    asgi = _bearer_only(app, token) if token else app
    uvicorn.run(asgi, host="127.0.0.1", port=int(argv[1]), log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:] or ["stdio"])
