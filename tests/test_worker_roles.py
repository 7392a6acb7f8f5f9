"""Workers by role (#30.4): workflow tasks, model calls and tool calls on separate pools.

Three worker processes on one task queue, one per role: a research run's model requests
are scheduled on `QUEUE-models` and run by the models worker, its tool calls on
`QUEUE-tools` by the tools worker, and its workflow tasks by the workflows worker.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_agent.temporal.client import AgentClient
from durable_agent.temporal.devserver import DevServer

from .temporal_support import start_worker_process, unique


def _ran(log: Path) -> set[str]:
    """The activity nodes a worker process logged as completed."""
    nodes = set()
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("event") == "activity completed":
            nodes.add(str(record.get("node")).split(":")[0])
    return nodes


@contextmanager
def role_workers(
    dev_server: DevServer, task_queue: str, tmp_path: Path
) -> Iterator[dict[str, Path]]:
    """A worker process per role on `task_queue`; their logs by role."""
    logs = {role: tmp_path / f"{role}.log" for role in ("workflows", "models", "tools")}
    processes = [
        start_worker_process(
            dev_server.address,
            task_queue,
            tmp_path,
            log,
            agents="tests.subagent_agents",
            extra=["--role", role],
        )
        for role, log in logs.items()
    ]
    try:
        yield logs
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
            process.wait(30)


async def test_each_role_runs_only_its_part_of_a_run(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    task_queue = unique("roles")
    with role_workers(dev_server, task_queue, tmp_path) as logs:
        run = await AgentClient(client, task_queue=task_queue).start("checker", "check tides")
        result = await asyncio.wait_for(run.result(), 90)
        history = await run.handle.fetch_history()
    assert result.status == "completed"
    queues = {
        e.activity_task_scheduled_event_attributes.activity_type.name: (
            e.activity_task_scheduled_event_attributes.task_queue.name
        )
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    assert queues["model_request"] == f"{task_queue}-models"
    # This agent's quick nodes run in the workflow itself, so on the workflows worker.
    assert "prepare_model_request" not in queues
    assert _ran(logs["models"]) == {"model_request"}
    assert "model_request" not in _ran(logs["workflows"])


async def test_a_tool_runs_on_the_tools_worker(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    task_queue = unique("roles")
    with role_workers(dev_server, task_queue, tmp_path) as logs:
        run = await AgentClient(client, task_queue=task_queue).start("researcher", "tides")
        result = await asyncio.wait_for(run.result(), 90)
    assert result.status == "completed"
    assert _ran(logs["tools"]) == {"tool_call"}
    assert "tool_call" not in _ran(logs["workflows"]) | _ran(logs["models"])
    assert (tmp_path / "tool_runs").read_text().splitlines() == ["search"]
