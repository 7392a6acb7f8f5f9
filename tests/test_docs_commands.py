"""The docs' commands run against the sample application as written (issue 26, item 14).

The `durable-agent` column of docs/temporal.md's "Every action three ways" table is read
from the page and each command run, as written, through the installed console script
against `python worker.py` (the sample application) on a real dev server; only the address
and task queue come from the environment, as a user's would. Before each command the test
puts a run of the sample application under the id the row names, in the state the row
needs (the page says which); the command must then succeed.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from durable_agent import AgentExecutionNode
from durable_agent.temporal import AgentClient
from durable_agent.temporal.devserver import DevServer

from .sample_support import ROOT, sample_worker

CONSOLE_SCRIPT = Path(sys.executable).parent / "durable-agent"
PAGE = ROOT / "docs" / "temporal.md"


DECIDING = (
    "approve a call",
    "deny a call",
    "pause at the next boundary",
    "tell a running agent more",
)
READING = ("fork from checkpoint 4", "see its status", "checkpoints so far", "follow it live")


def cli_column() -> dict[str, str]:
    """Each row's action and its `durable-agent` command, as the page writes them."""
    text = PAGE.read_text()
    table = text[text.index("## Every action three ways") :]
    rows: dict[str, str] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or cells[0] in ("action", "---"):
            continue
        found = re.match(r"`(durable-agent [^`]+)`", cells[1])
        if found:
            rows[cells[0]] = found.group(1)
        if rows and not line.startswith("|"):
            break
    return rows


@pytest.fixture
def sample_app(dev_server: DevServer, tmp_path: Path) -> Iterator[dict[str, str]]:
    with sample_worker(dev_server, tmp_path / "worker.log") as env:
        yield env


async def clear(client: Client, *ids: str) -> None:
    """No run open under `ids`, so the next step can start one there."""
    for workflow_id in ids:
        try:
            description = await client.get_workflow_handle(workflow_id).describe()
        except RPCError:
            continue
        if description.status == WorkflowExecutionStatus.RUNNING:
            await client.get_workflow_handle(workflow_id).terminate("the docs test moves on")


async def until(agents: AgentClient, workflow_id: str, *statuses: str) -> None:
    for _ in range(400):
        try:
            if (await agents.get(workflow_id).status()).status in statuses:
                return
        except Exception:  # not started yet, no worker yet
            pass
        await asyncio.sleep(0.05)
    raise AssertionError(f"{workflow_id} never became {statuses}")


async def prepare(action: str, client: Client, agents: AgentClient) -> None:
    """Puts the run the row's command acts on in place (see the page's paragraph)."""
    await clear(client, "w1b")

    async def run(agent: str, prompt: str, *statuses: str, **options: Any) -> None:
        await clear(client, "w1")
        await agents.start(agent, prompt, workflow_id="w1", **options)
        await until(agents, "w1", *statuses)

    if action == "start a run":
        await clear(client, "w1")
    elif (
        action in ("approve a call", "deny a call", "pause at the next boundary")
        or action == "tell a running agent more"
    ):
        await run("deployer", "Deploy v2.1 to prod", "waiting")
    elif action == "deliver a deferred result":
        await run("reporter", "rows in Q3", "waiting")
    elif action == "resume a suspended run":
        await run(
            "weather",
            "What is the weather in Paris?",
            "waiting",
            suspend_at=[AgentExecutionNode.BEFORE_MODEL_REQUEST],
        )
    elif action == "retry a failed run":
        await run("deployer", "Deploy v2.1 to prod", "waiting")
        await agents.get("w1").cancel()
        await until(agents, "w1", "cancelled", "failed")
    elif (
        action in ("fork from checkpoint 4", "see its status", "checkpoints so far")
        or action == "follow it live"
    ):
        await run("weather", "What is the weather in Paris?", "completed")


async def test_every_cli_command_of_the_actions_table_runs_against_the_sample_app(
    client: Client, sample_app: dict[str, str]
) -> None:
    rows = cli_column()
    assert len(rows) >= 15, rows
    agents = AgentClient(client, task_queue=sample_app["TEMPORAL_TASK_QUEUE"])
    outcomes = {}
    for action, command in rows.items():
        await prepare(action, client, agents)
        stdin = "hello\n/end\n" if command.startswith("durable-agent chat") else ""
        done = await asyncio.to_thread(
            subprocess.run,
            [str(CONSOLE_SCRIPT), *shlex.split(command)[1:]],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            env=sample_app,
            cwd=ROOT,
        )
        outcomes[action] = (command, done.returncode, done.stdout[-500:], done.stderr[-800:])
    await clear(client, "w1", "w1b")
    failed = {a: o for a, o in outcomes.items() if o[1] != 0}
    assert failed == {}, failed
    assert "You said: hello" in outcomes["chat on a session"][2]
    assert "It is" in outcomes["start a run"][2] or "forecast" in outcomes["start a run"][2]
