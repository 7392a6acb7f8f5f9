"""Real Temporal servers for tests, and a `new_worker` helper with a fresh task queue."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.common import RetryPolicy
from temporalio.worker import Replayer, Worker

from durable_agent.engine.spec import AgentSpec
from durable_agent.temporal import (
    ActivityConfig,
    AgentRegistration,
    AgentWorkflow,
    AgentWorkflowInput,
    AgentWorkflowResult,
    DurableAgentPlugin,
)
from durable_agent.temporal.storage import external_storage_from_env

Hosted = AgentSpec | AgentRegistration
"""What a worker is given to host: an agent, or one with its activity options."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def connect(address: str) -> Client:
    return await Client.connect(address, plugins=[DurableAgentPlugin()])


async def file_storage_client(address: str, directory: Path) -> Client:
    """A client (and so its workers) storing payloads over 64 KiB as files in `directory`:
    a run carrying thousands of steps' conversation across continue-as-new needs it."""
    storage = external_storage_from_env({"DURABLE_AGENT_STORAGE": f"file://{directory}"})
    return await Client.connect(address, plugins=[DurableAgentPlugin(external_storage=storage)])


async def client_knowing(client: Client, *agents: AgentSpec) -> Client:
    """A client of the same server connected with `agents`, as a worker's own client is: it
    checks a run's model against them before starting it."""
    return await Client.connect(
        client.service_client.config.target_host, plugins=[DurableAgentPlugin(agents=agents)]
    )


def new_replayer(agents: Sequence[Hosted] = (), **plugin_options: Any) -> Replayer:
    """A replayer hosting `agents`, through its plugin (made with `plugin_options`) as a
    user's replayer gets them."""
    return Replayer(workflows=[], plugins=[DurableAgentPlugin(agents, **plugin_options)])


@contextlib.asynccontextmanager
async def new_worker(
    client: Client,
    task_queue: str | None = None,
    *,
    agents: Sequence[Hosted] = (),
    **options: Any,
) -> AsyncIterator[Worker]:
    """A worker on a fresh task queue (unless given one) hosting `agents`, through a
    `DurableAgentPlugin` of its own as a user's worker gets them (besides what the client's
    plugin lists: a second plugin adds to the worker's runtime)."""
    plugins = [*options.pop("plugins", ()), DurableAgentPlugin(agents)]
    queue = task_queue or f"tq-{uuid.uuid4()}"
    async with Worker(client, task_queue=queue, plugins=plugins, **options) as worker:
        yield worker


async def activity_summaries(handle: WorkflowHandle[object, object]) -> list[tuple[str, str]]:
    """(activity type, summary) for every scheduled activity, in history order."""
    history = await handle.fetch_history()
    converter = handle._client.data_converter.payload_converter
    out = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            summary = converter.from_payload(event.user_metadata.summary, str)
            out.append((attrs.activity_type.name, summary))
    return out


def event_types(history: object) -> list[str]:
    return [EventType.Name(e.event_type).removeprefix("EVENT_TYPE_") for e in history.events]  # type: ignore[attr-defined]


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


async def start_agent(
    client: Client, worker: Worker, agent: str, prompt: str, **fields: Any
) -> WorkflowHandle[Any, AgentWorkflowResult]:
    """Starts `AgentWorkflow` on the worker's task queue with a fresh workflow id."""
    return await client.start_workflow(
        AgentWorkflow.run,
        AgentWorkflowInput(agent=agent, prompt=prompt, **fields),
        id=unique("wf"),
        task_queue=worker.task_queue,
    )


async def wait_for_status(handle: Any, status: str, timeout: float = 20) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        view = await handle.query(AgentWorkflow.status)
        if view.status == status:
            return view
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"status stayed {view.status!r}, wanted {status!r}: {view}")
        await asyncio.sleep(0.1)


async def until_pending_approval(run: Any, timeout: float = 20) -> str:
    """Polls `run`'s (an `AgentRunHandle`) status until it waits for an approval; the first
    pending call's id."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        view = await run.status()
        if view.pending_approvals:
            return str(view.pending_approvals[0].tool_call_id)
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{run} never waited for its approval: {view}")
        await asyncio.sleep(0.05)


def fast_activity(
    *,
    start_to_close: float = 30,
    heartbeat: float | None = 2,
    initial_interval: float = 0.2,
    maximum_interval: float = 1.0,
    maximum_attempts: int = 5,
) -> ActivityConfig:
    """Activity options for tests: short heartbeats and retry intervals, so a killed worker
    or a failed attempt is noticed within seconds."""
    return ActivityConfig(
        start_to_close_timeout=timedelta(seconds=start_to_close),
        heartbeat_timeout=timedelta(seconds=heartbeat) if heartbeat else None,
        retry_policy=RetryPolicy(
            initial_interval=timedelta(seconds=initial_interval),
            maximum_interval=timedelta(seconds=maximum_interval),
            maximum_attempts=maximum_attempts,
        ),
    )


def text_agent(text: str, prefix: str = "text") -> AgentSpec:
    """An agent (of a unique name) that answers `text`."""
    from durable_agent import AgentBuilder, TestModel

    return AgentBuilder(TestModel.with_text(text)).name(unique(prefix)).build()


def deploy_agent(log: Any, prefix: str = "deploy") -> AgentSpec:
    """An agent (of a unique name) whose `deploy` tool needs approval and records its calls
    in `log` (a `helpers.CallLog`)."""
    from durable_agent import AgentBuilder, TestModel

    from .helpers import call, text_response, tool_response

    def deploy(env: str) -> str:
        log.record("deploy", env=env)
        return f"deployed to {env}"

    model = TestModel.with_responses(
        [tool_response(call("deploy", "d1", env="prod")), text_response("finished")]
    )
    return (
        AgentBuilder(model)
        .name(unique(prefix))
        .tool(deploy)
        .approval_required_tools(["deploy"])
        .build()
    )


def start_worker_process(
    address: str,
    task_queue: str,
    test_dir: Path,
    log: Path,
    *,
    agents: str = "tests.worker_agents",
    extra: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """`python worker.py --agents AGENTS` in a process of its own (one a test can SIGKILL);
    tools of the test agents write what they did under `test_dir` (`DA_TEST_DIR`)."""
    root = Path(__file__).resolve().parents[1]  # not at import: workflows import this module
    env = {
        **os.environ,
        **(environ or {}),
        "TEMPORAL_ADDRESS": address,
        "TEMPORAL_TASK_QUEUE": task_queue,
        "DA_TEST_DIR": str(test_dir),
        "PYTHONPATH": str(root),
    }
    return subprocess.Popen(
        [
            sys.executable,
            "worker.py",
            "--no-examples",
            "--agents",
            agents,
            "--log-format",
            "json",
            *extra,
        ],
        cwd=root,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
