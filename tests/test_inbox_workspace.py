"""The inbox shows a waiting run's changed files beside its approval card (issue 39, part 2),
in headless Chromium as tests/test_inbox.py drives it: a unified diff of each text file since
the run started (escaped: the agent's text is never markup), binary files named as binary,
a file too large to diff named with its sizes, a long diff cut with a note; then the call is
approved from the same card and the run finishes.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from durable_agent import AgentBuilder, TestModel, ToolContext
from durable_agent.inbox import InboxSettings, create_app
from durable_agent.inbox.auth import UserDirectory
from durable_agent.inbox.server import InboxServer
from durable_agent.inbox.workspace import MAX_FILE_BYTES, MAX_LINES
from durable_agent.temporal import (
    AgentActivityConfig,
    AgentClient,
    AgentRegistration,
    DurableAgentPlugin,
)
from durable_agent.temporal.devserver import DevServer

from .helpers import call, text_response, tool_response
from .temporal_support import fast_activity, new_worker
from .test_inbox import browser, login, users  # noqa: F401 (fixtures)

pytestmark = pytest.mark.server

LOGO = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
BIG = "x" * 80 + "\n"
LONG = 400
"""Lines of the new file whose diff is cut."""


def change(ctx: ToolContext) -> str:
    workspace = ctx.workspace
    assert workspace is not None
    workspace.write_text("README.md", "line one\nline two <script>alert(1)</script>\n")
    workspace.write_text("src/app.py", "".join(f"print({i})\n" for i in range(LONG)))
    workspace.write_bytes("logo.png", LOGO + b"\x00changed")
    workspace.write_text("big.txt", BIG * (MAX_FILE_BYTES // len(BIG) + 10) + "more\n")
    workspace.delete("gone.txt")
    return "changed"


def deploy(ctx: ToolContext) -> str:
    assert ctx.workspace is not None
    return f"deployed {len(ctx.workspace.list())} files"


async def test_a_waiting_runs_changed_files_are_shown_beside_its_approval(
    client: Client,
    dev_server: DevServer,
    browser: Any,  # noqa: F811
    users: UserDirectory,  # noqa: F811
    tmp_path: Path,
) -> None:
    store = (tmp_path / "store").as_uri()
    name = f"inbox-coder-{uuid.uuid4().hex[:6]}"
    script = [
        tool_response(call("change", "c1")),
        tool_response(call("deploy", "d1")),
        text_response("deployed"),
    ]
    agent = (
        AgentBuilder(TestModel.with_responses(script))
        .name(name)
        .tool(change)
        .tool(deploy, requires_approval=True)
        .workspace(
            {
                "README.md": "line one\nline two\n",
                "logo.png": LOGO,
                "big.txt": BIG * (MAX_FILE_BYTES // len(BIG) + 10),
                "gone.txt": "bye\n",
            }
        )
        .build()
    )
    registration = AgentRegistration(agent, AgentActivityConfig(tool_call=fast_activity()))
    plugin = DurableAgentPlugin(workspace_store=store)
    settings = InboxSettings(
        secret="s" * 40, users=users, poll_seconds=0.5, agents=(name,), workspace_store=store
    )
    async with new_worker(client, agents=[registration], plugins=[plugin]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        async with InboxServer(create_app(agents, settings), "127.0.0.1", 0) as server:
            handle = await agents.start(name, "change then deploy")
            page = await login(browser, server.url, "alice")
            run = page.locator(f'article[data-workflow-id="{handle.id}"]')
            await run.wait_for(timeout=15_000)
            changes = run.locator("[data-testid=workspace]")
            await changes.wait_for(timeout=15_000)
            summary = await changes.locator("summary").inner_text()
            assert "5 files changed since the run started" in summary

            def file(path: str) -> Any:
                return changes.locator(f'.file-change[data-path="{path}"]')

            readme = await file("README.md").inner_text()
            assert "modified" in readme
            assert "-line two" in readme
            assert "+line two <script>alert(1)</script>" in readme  # shown, not run
            assert await run.locator("script").count() == 0
            added = file("README.md").locator(".d-add")
            assert await added.inner_text() == "+line two <script>alert(1)</script>"
            assert "@@ -1,2 +1,2 @@" in readme

            app = await file("src/app.py").inner_text()
            assert "added" in app
            assert "+print(0)" in app
            assert f"+print({LONG - 1})" not in app
            cut = 2 + 1 + LONG - MAX_LINES  # file header, hunk, lines
            assert f"… {cut} more diff lines not shown" in app
            assert (
                "long diff cut"
                in await changes.locator("[data-testid=workspace-note]").inner_text()
            )

            logo = await file("logo.png").inner_text()
            assert "binary file" in logo
            assert await file("logo.png").locator("pre.diff").count() == 0
            big = await file("big.txt").inner_text()
            assert "too large to show" in big
            gone = await file("gone.txt").inner_text()
            assert "deleted" in gone
            assert "-bye" in gone

            # beside the call it waits for, decided from the same card
            assert "deploy needs approval" in await run.inner_text()
            await run.locator("[data-testid=approve]").click()
            result = await asyncio.wait_for(handle.result(), 30)
            await page.context.close()
    assert result.output == "deployed"
