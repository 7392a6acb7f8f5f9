"""Records the histories that test_replay.py replays.

    python -m tests.record_histories [NAME ...]

Run it after a deliberate, versioned change to the workflow; commit the JSON files. With
names, only those histories are written (the others keep the release that recorded them).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import uuid
from pathlib import Path

from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from durable_agent import AgentExecutionNode
from durable_agent.temporal import (
    AgentWorkflow,
    AgentWorkflowInput,
    ApprovalSignal,
    DurableAgentPlugin,
    ResumeSignal,
)
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.quota import keeper_id

from .replay_agents import QUOTA_KEY, REPLAY_QUOTAS, quoted, replay_agents
from .support.limited_server import limited_server
from .temporal_support import connect, free_port, new_worker

HISTORIES = Path(__file__).resolve().parent / "histories"


async def wait_status(handle: object, status: str) -> None:
    for _ in range(200):
        view = await handle.query(AgentWorkflow.status)  # type: ignore[attr-defined]
        if view.status == status:
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(status)


async def record(names: list[str]) -> None:
    HISTORIES.mkdir(exist_ok=True)
    directory = Path(tempfile.mkdtemp())
    async with DevServer(directory / "dev.db", port=free_port(), ui_port=None) as server:
        client = await connect(server.address)
        async with new_worker(client, agents=replay_agents()) as worker:
            runs = {}
            weather = await client.start_workflow(
                AgentWorkflow.run,
                AgentWorkflowInput(agent="replay-weather", prompt="weather?"),
                id=f"replay-tool-run-{uuid.uuid4().hex[:6]}",
                task_queue=worker.task_queue,
            )
            await weather.result()
            runs["tool_run"] = weather

            suspended = await client.start_workflow(
                AgentWorkflow.run,
                AgentWorkflowInput(
                    agent="replay-weather",
                    prompt="weather?",
                    suspend_at=[AgentExecutionNode.BEFORE_MODEL_REQUEST],
                ),
                id=f"replay-suspend-{uuid.uuid4().hex[:6]}",
                task_queue=worker.task_queue,
            )
            for _ in range(2):
                await wait_status(suspended, "waiting")
                await suspended.signal(AgentWorkflow.resume, ResumeSignal())
                await asyncio.sleep(0.3)
            await suspended.result()
            runs["suspend_resume"] = suspended

            decided = (
                ("approved", "replay-deployer", True),
                ("denied", "replay-deployer", False),
                ("local_activities", "replay-deployer-local", True),  # quick nodes local
            )
            for label, agent, verdict in decided:
                approval = await client.start_workflow(
                    AgentWorkflow.run,
                    AgentWorkflowInput(agent=agent, prompt="ship"),
                    id=f"replay-{label}-{uuid.uuid4().hex[:6]}",
                    task_queue=worker.task_queue,
                )
                await wait_status(approval, "waiting")
                await approval.execute_update(
                    AgentWorkflow.submit_approval,
                    ApprovalSignal(
                        tool_call_id="d1", approved=verdict, reason="no", decided_by="t"
                    ),
                )
                await approval.result()
                runs[label] = approval

            runs.update(await quota_runs(client))

            for label, handle in runs.items():
                if names and label not in names:
                    continue
                history = await handle.fetch_history()
                (HISTORIES / f"{label}.json").write_text(history.to_json())
                print(f"recorded {label}: {len(history.events)} events")


async def quota_runs(client: Client) -> dict[str, WorkflowHandle[object, object]]:
    """Two runs of `replay-quoted` at once under a quota of one request in 10 s: the second
    one's grant comes ahead of its slot (`quota_second`), and the key's keeper, still
    running (`quota_keeper`)."""
    queue = f"replay-quota-{uuid.uuid4().hex[:6]}"
    with limited_server(limit=1, window=10.0, retry_after=None) as limited:
        plugin = DurableAgentPlugin([quoted(limited.server.base_url)], quotas=REPLAY_QUOTAS)
        async with Worker(client, task_queue=queue, plugins=[plugin]):
            handles = [
                await client.start_workflow(
                    AgentWorkflow.run,
                    AgentWorkflowInput(agent="replay-quoted", prompt=f"question {i}"),
                    id=f"replay-quota-{i}-{uuid.uuid4().hex[:6]}",
                    task_queue=queue,
                )
                for i in range(2)
            ]
            for handle in handles:
                await handle.result()
        assert limited.refused == 0, f"{limited.refused} requests refused"
    keeper = client.get_workflow_handle(keeper_id(queue, QUOTA_KEY))
    return {"quota_first": handles[0], "quota_second": handles[1], "quota_keeper": keeper}


if __name__ == "__main__":
    asyncio.run(record(sys.argv[1:]))
