"""Real MCP servers for tests (`tests/mcp_servers/demo_server.py`, on the SDK's `MCPServer`),
over stdio and streamable HTTP, and what they record.

Each `DemoServer` has a directory of its own where the server process writes one line per
tool call that reached it and one line per process start, so a test can prove a call ran
exactly once, a denied call never arrived, or a server was started once per worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from durable_agent.mcp import MCPServerStdio, MCPServerStreamableHTTP

ROOT = Path(__file__).resolve().parent.parent
SERVER_MODULE = "tests.mcp_servers.demo_server"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class DemoServer:
    """Where one demo server records what reached it."""

    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mcp-demo-")))

    @property
    def env(self) -> dict[str, str]:
        return {"DEMO_DIR": str(self.directory)}

    def calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        path = self.directory / "calls.jsonl"
        if not path.exists():
            return []
        lines = [json.loads(line) for line in path.read_text().splitlines() if line]
        return [line for line in lines if tool is None or line["tool"] == tool]

    def starts(self) -> list[int]:
        path = self.directory / "starts"
        return [int(line) for line in path.read_text().split()] if path.exists() else []

    def stdio(self, *, env: dict[str, str] | None = None, **options: Any) -> MCPServerStdio:
        options.setdefault("name", "demo")
        return MCPServerStdio(
            sys.executable,
            ["-m", SERVER_MODULE, "stdio"],
            {**self.env, **(env or {})},
            cwd=ROOT,
            **options,
        )

    def wait_for_marker(self, key: str, timeout: float = 20) -> int:
        """The pid `slow_once(key)` wrote once its call reached the server."""
        marker = self.directory / f"{key}.pid"
        deadline = time.monotonic() + timeout
        while not marker.exists() or not marker.read_text():
            if time.monotonic() > deadline:
                raise AssertionError(f"slow_once({key!r}) never reached the server")
            time.sleep(0.05)
        return int(marker.read_text())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    with contextlib.suppress(OSError):
        status = Path(f"/proc/{pid}/stat").read_text().split()[2]
        return status != "Z"
    return True


def wait_until_gone(pid: int, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            raise AssertionError(f"MCP server process {pid} is still running")
        time.sleep(0.05)


@contextlib.contextmanager
def http_server(
    demo: DemoServer, *, token: str | None = None, env: dict[str, str] | None = None
) -> Iterator[str]:
    """Runs the demo server over streamable HTTP in a subprocess; yields its MCP URL."""
    port = free_port()
    process_env = {**os.environ, **demo.env, **(env or {})}
    if token is not None:
        process_env["DEMO_TOKEN"] = token
    process = subprocess.Popen(
        [sys.executable, "-m", SERVER_MODULE, "http", str(port)], cwd=ROOT, env=process_env
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("the HTTP demo server did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)


def http(url: str, **options: Any) -> MCPServerStreamableHTTP:
    options.setdefault("name", "demo")
    return MCPServerStreamableHTTP(url, **options)
