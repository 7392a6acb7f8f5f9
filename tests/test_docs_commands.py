"""The docs' commands run against the sample application as written (issue 26, item 14).

First, the `durable-agent` column of docs/temporal.md's "Every action three ways" table is read
from the page and each command run, as written, through the installed console script
against `python worker.py` (the sample application) on a real dev server; only the address
and task queue come from the environment, as a user's would. Before each command the test
puts a run of the sample application under the id the row names, in the state the row
needs (the page says which); the command must then succeed. Then every `durable-agent` and
`temporal workflow` line of the guides' shell blocks runs the same way, in page order.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
import shutil
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
from .temporal_support import connect, free_port

pytestmark = pytest.mark.server

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
            with contextlib.suppress(RPCError):  # it may have ended since
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


# -- the other pages' shell blocks ------------------------------------------------------------

PAGES = (
    "README.md",
    "docs/time-travel.md",
    "docs/streams.md",
    "docs/temporal.md",
    "docs/subagents.md",
)
ILLUSTRATIVE = ("--at ckpt_0192…",)
"""Commands shown with a placeholder the reader fills in from an earlier command's output;
the test runs every other `durable-agent` and `temporal workflow` line of those pages."""


def shell_commands(page: str) -> list[str]:
    """The `durable-agent` and `temporal workflow` lines of `page`'s bash blocks, with
    continuation lines joined and trailing comments dropped."""
    text = (ROOT / page).read_text()
    lines: list[str] = []
    for block in re.findall(r"^```bash\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["durable-agent"] or words[:2] == ["temporal", "workflow"]:
                lines.append(line.split(" #")[0].strip())
    return lines


async def setup_for(command: str, client: Client, agents: AgentClient) -> None:
    """The run a page's command acts on, as the page's prose describes it."""

    async def run(workflow_id: str, agent: str, prompt: str, *statuses: str, **options: Any):
        await clear(client, workflow_id)
        await agents.start(agent, prompt, workflow_id=workflow_id, **options)
        await until(agents, workflow_id, *statuses)

    words = shlex.split(command)
    await clear(client, "w1b")
    if words[:2] == ["durable-agent", "steer"]:
        await run("w1", "deployer", "Deploy v2.1 to prod", "waiting")
    elif words[:2] == ["durable-agent", "retry"]:
        await run("w2", "deployer", "Deploy v2.1 to prod", "waiting")
        await agents.get("w2").cancel()
        await until(agents, "w2", "cancelled", "failed")
    elif "w1" in words and words[1] in ("checkpoints", "fork", "watch"):
        await run("w1", "weather", "What is the weather in Paris?", "completed")
    elif "send_prompt" in words or (
        words[:2] == ["durable-agent", "list"] and "awaiting_prompt" in words
    ):
        await run("s1", "assistant", "", "awaiting_prompt", session=True)
    elif "ReleaseWorkflow" in words:
        await clear(client, "release-1", "release-1-deployer")
    elif words[:3] == ["durable-agent", "run", "research_lead"]:
        await clear(client, "r1")
    elif "r1" in words and words[1] in ("status", "approve") and "call_publish_0" not in words:
        await until(agents, "r1", "waiting", "completed")
    elif words[:3] == ["durable-agent", "approve", "r1"]:
        await until(agents, "r1", "waiting")
    elif words[:2] == ["durable-agent", "approve"] and "release-1-deployer" in words:
        await until(agents, "release-1-deployer", "waiting")
    elif words[:2] == ["durable-agent", "approve"]:
        await run("w3", "deployer", "Deploy v2.1 to prod", "waiting")


async def test_every_shell_command_of_the_guides_runs_against_the_sample_app(
    tmp_path: Path,
) -> None:
    """The guides' `durable-agent` and `temporal workflow` lines, in page order, on a
    worker serving the default task queue `durable-agent` as the pages assume. A dev server
    of its own: on the shared one, other tests leave runs and workers on that queue."""
    async with DevServer(tmp_path / "guides.db", port=free_port(), ui_port=None) as server:
        client = await connect(server.address)
        await _run_the_guides(client, server, tmp_path)


async def _run_the_guides(client: Client, dev_server: DevServer, tmp_path: Path) -> None:
    commands = [c for page in PAGES for c in shell_commands(page)]
    skipped = [c for c in commands if any(mark in c for mark in ILLUSTRATIVE)]
    assert len(skipped) == 1, skipped
    commands = [c for c in commands if c not in skipped]
    assert len(commands) >= 15, commands
    temporal = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
    outcomes = {}
    with sample_worker(dev_server, tmp_path / "worker.log", "durable-agent") as env:
        agents = AgentClient(client, task_queue="durable-agent")
        for command in commands:
            await setup_for(command, client, agents)
            # The README's approve names "<workflow id>": the id `list` printed.
            argv = shlex.split(command.replace("<workflow id>", "w3"))
            program = str(CONSOLE_SCRIPT) if argv[0] == "durable-agent" else temporal
            done = await asyncio.to_thread(
                subprocess.run,
                [program, *argv[1:]],
                input="",
                capture_output=True,
                text=True,
                timeout=120,
                env=env,
                cwd=ROOT,
            )
            outcomes[command] = (done.returncode, done.stdout[-400:], done.stderr[-600:])
        await clear(client, "w1", "w1b", "w2", "w3", "s1", "release-1", "release-1-deployer", "r1")
    failed = {c: o for c, o in outcomes.items() if o[0] != 0}
    assert failed == {}, failed
    result = outcomes["temporal workflow result --workflow-id release-1"][1]
    assert "#releases: Done. deployed v2.2 to staging" in result
