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
from typing import Any, TypeVar

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.common import RetryPolicy
from temporalio.worker import Replayer, Worker

from durable_agent.temporal import (
    ActivityConfig,
    AgentRegistry,
    AgentWorkflow,
    AgentWorkflowInput,
    AgentWorkflowResult,
    DurableAgentPlugin,
    runtime_of,
)

registry = AgentRegistry()
"""The agents of this test process: every `new_worker` hosts them (as `--agents` gives a
worker process its agents). Tests register theirs under unique names."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def connect(address: str) -> Client:
    return await Client.connect(address, plugins=[DurableAgentPlugin()])


W = TypeVar("W", Worker, Replayer)


async def client_knowing(client: Client, *names: str) -> Client:
    """A client of the same server connected with the named agents of `registry`, as a
    worker's own client is: it checks a run's model against them before starting it."""
    agents = [registry.get(name).agent for name in names]
    return await Client.connect(
        client.service_client.config.target_host, plugins=[DurableAgentPlugin(agents=agents)]
    )


def hosting_registry(worker: W) -> W:
    """`worker`, hosting the live `registry` (agents registered later included, as tests
    do) besides what its plugins listed."""
    runtime = runtime_of(worker)
    for registration in runtime.agents:
        if registration.agent.name not in registry:
            registry.register(registration.agent, registration.activities)
    runtime.hosting.agents = registry
    return worker


def new_replayer(**plugin_options: Any) -> Replayer:
    """A replayer hosting the live `registry`, its plugin made with `plugin_options`."""
    replaying = Replayer(workflows=[], plugins=[DurableAgentPlugin(**plugin_options)])
    hosting_registry(replaying)
    return replaying


@contextlib.asynccontextmanager
async def new_worker(
    client: Client, task_queue: str | None = None, **options: Any
) -> AsyncIterator[Worker]:
    """A worker on a fresh task queue (unless given one) hosting `registry`'s agents."""
    worker = Worker(client, task_queue=task_queue or f"tq-{uuid.uuid4()}", **options)
    async with hosting_registry(worker):
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


def text_agent(text: str, prefix: str = "text") -> str:
    """Registers an agent that answers `text`; returns its (unique) name."""
    from durable_agent import AgentBuilder, TestModel

    name = unique(prefix)
    registry.register(AgentBuilder(TestModel.with_text(text)).name(name).build())
    return name


def deploy_agent(log: Any, prefix: str = "deploy") -> str:
    """Registers an agent whose `deploy` tool needs approval and records its calls in `log`
    (a `helpers.CallLog`); returns its (unique) name."""
    from durable_agent import AgentBuilder, TestModel

    from .helpers import call, text_response, tool_response

    def deploy(env: str) -> str:
        log.record("deploy", env=env)
        return f"deployed to {env}"

    model = TestModel.with_responses(
        [tool_response(call("deploy", "d1", env="prod")), text_response("finished")]
    )
    name = unique(prefix)
    registry.register(
        AgentBuilder(model).name(name).tool(deploy).approval_required_tools(["deploy"]).build()
    )
    return name


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
