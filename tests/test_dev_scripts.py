"""What `./scripts/dev` and `./scripts/test` say is true (issue 38, item 18), and what they
install is what the docs use: the worker's `toolsets ready` line counts an agent's tools, the
README says how long the suite takes, and `./scripts/dev` installs the extras the README's
commands need. The editable-install banner is checked in `test_packaging.py`."""

from __future__ import annotations

import re
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import structlog

from durable_agent import AgentBuilder, TestModel
from durable_agent.contract.tools import ToolContext
from durable_agent.contract.toolsets import (
    ToolsetListing,
    ToolsetResult,
    ToolsetTool,
    listing_digest,
)
from durable_agent.temporal.toolsets import ToolsetPool

ROOT = Path(__file__).resolve().parent.parent


class OneToolToolset:
    """An in-memory toolset offering one tool, `lookup`."""

    name = "notes"
    max_retries = 1

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    async def list_tools(self) -> ToolsetListing:
        tools = [ToolsetTool(name="lookup", toolset=self.name, remote_name="lookup")]
        return ToolsetListing(toolset=self.name, tools=tools, digest=listing_digest(tools))

    def argument_problem(self, tool: ToolsetTool, arguments: dict[str, Any]) -> str | None:
        return None

    async def call_tool(
        self, ctx: ToolContext, tool: ToolsetTool, arguments: dict[str, Any]
    ) -> ToolsetResult:
        return ToolsetResult(content="noted")

    async def tools_changed(self, digest: str) -> bool:
        return False


def deploy(env: str) -> str:
    """Deploys."""
    return env


def rollback(env: str) -> str:
    """Rolls back."""
    return env


async def test_the_worker_says_how_many_tools_each_agent_has() -> None:
    """`toolsets ready tools=0` was logged for agents whose tools are functions: the line is
    for agents with toolsets, and counts every tool the model is offered."""
    plain = AgentBuilder(TestModel.with_text("ok")).name("plain").tools([deploy, rollback]).build()
    mixed = (
        AgentBuilder(TestModel.with_text("ok"))
        .name("mixed")
        .tools([deploy, rollback])
        .toolset(OneToolToolset())
        .build()
    )
    pool = ToolsetPool()
    with structlog.testing.capture_logs() as logs:
        await pool.check([plain, mixed])
    await pool.close()
    ready = [entry for entry in logs if entry["event"] == "toolsets ready"]
    assert [entry["agent"] for entry in ready] == ["mixed"]
    assert ready[0]["tools"] == 3
    assert ready[0]["toolset_tools"] == 1
    assert ready[0]["toolsets"] == ["notes"]


def test_the_readme_says_how_long_the_suite_takes_and_keeps_its_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    two = readme[readme.index("## Two commands") :]
    two = two[: two.index("\n## ", 1)]
    assert "./scripts/dev    #" in two
    assert "./scripts/test   #" in two
    assert "about 25 minutes on 2 cores" in two
    assert 'pytest -m "not server"' in two
    assert "about a minute" in two


def test_scripts_dev_installs_the_extras_the_readme_uses() -> None:
    """The dev stack's worker serves the example agents on any provider the docs name
    (DURABLE_AGENT_MODEL), the inbox, MCP tools, encryption and OTLP traces."""
    script = (ROOT / "scripts" / "dev").read_text()
    installed = re.search(r"pip install -q -e '\.\[([a-z0-9,]+)\]'", script)
    assert installed is not None, script
    extras = set(installed.group(1).split(","))
    assert {"openai", "anthropic", "crypto", "inbox", "mcp", "otel"} <= extras
