"""A long run never depends on its earlier runs: the conversation crosses continue-as-new.

A run continues as new a few times, waits for a human, its worker stops, every earlier run
of the chain is deleted (as namespace retention does to closed runs), a cold worker starts
and the approval completes the run, the model seeing the whole conversation. Without
external storage, with the local file driver, and with the S3 driver against a real S3 API
(moto's server).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.converter import ExternalStorage
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from durable_agent import (
    AgentBuilder,
    FunctionModel,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UsageLimits,
    UserPromptPart,
)
from durable_agent.engine.history_processors import keep_last_messages
from durable_agent.models import AgentInfo
from durable_agent.temporal import (
    AgentActivityConfig,
    AgentRegistration,
    AgentWorkflow,
    ApprovalSignal,
    DurableAgentPlugin,
)
from durable_agent.temporal.devserver import DevServer, temporal_cli
from durable_agent.temporal.storage import external_storage_from_env

from .temporal_support import fast_activity, free_port, new_worker, start_agent, unique
from .temporal_support import wait_for_status as wait_status

FAST = fast_activity(start_to_close=60, heartbeat=None)
PROMPT = "MARKER-the-first-prompt: work through the steps"


def conversation_model(steps: int, seen: list[int]) -> FunctionModel:
    """`steps` tool steps, a deploy that needs approval, then an answer. It insists on the
    whole conversation: every request and response since the first prompt."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(1 for m in messages if isinstance(m, ModelResponse))
        seen.append(len(messages))
        assert len(messages) == 2 * done + 1, f"model saw {len(messages)} messages at step {done}"
        first = messages[0]
        assert isinstance(first, ModelRequest)
        prompts = [p.text for p in first.parts if isinstance(p, UserPromptPart)]
        assert prompts == [PROMPT], "the first prompt is missing from what the model sees"
        if done < steps:
            return ModelResponse(
                parts=[ToolCallPart(id=f"s{done}", name="step", arguments={"n": done})]
            )
        if done == steps:
            return ModelResponse(
                parts=[ToolCallPart(id="deploy_1", name="deploy", arguments={"env": "prod"})]
            )
        return ModelResponse(parts=[TextPart(text=f"done after {done} steps")])

    return FunctionModel(respond)


def conversation_agent(name: str, steps: int, seen: list[int], **builder: Any) -> AgentRegistration:
    async def step(n: int) -> str:
        return f"step {n} ok " + "x" * 300

    async def deploy(env: str) -> str:
        return f"deployed to {env}"

    agent = (
        AgentBuilder(conversation_model(steps, seen))
        .name(name)
        .tools([step, deploy])
        .approval_required_tools(["deploy"])
        .usage_limits(UsageLimits(request_limit=None))
    )
    for processor in builder.get("processors", []):
        agent = agent.history_processor(processor)
    return AgentRegistration(
        agent.build(),
        AgentActivityConfig(model_request=FAST, tool_call=FAST, continue_as_new_after_steps=3),
    )


async def chain_runs(client: Client, workflow_id: str) -> list[tuple[str, WorkflowExecutionStatus]]:
    runs = []
    async for execution in client.list_workflows(f'WorkflowId="{workflow_id}"'):
        runs.append((execution.run_id, execution.status))
    return runs


async def delete_earlier_runs(address: str, client: Client, workflow_id: str) -> int:
    """`temporal workflow delete --run-id` for every run that continued as new."""
    earlier = [
        run_id
        for run_id, status in await chain_runs(client, workflow_id)
        if status == WorkflowExecutionStatus.CONTINUED_AS_NEW
    ]
    for run_id in earlier:
        deleted = subprocess.run(
            [
                temporal_cli(),
                "workflow",
                "delete",
                "--address",
                address,
                "--workflow-id",
                workflow_id,
                "--run-id",
                run_id,
            ],
            input="y\n",
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert deleted.returncode == 0, deleted.stdout + deleted.stderr

    # Deletion is asynchronous (the dev server takes about half a minute): wait until the
    # server no longer has any of them.
    async def gone(run_id: str) -> bool:
        try:
            await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
        except RPCError as error:
            return error.status == RPCStatusCode.NOT_FOUND
        return False

    for _ in range(180):
        if all([await gone(run_id) for run_id in earlier]):
            break
        await asyncio.sleep(0.5)
    else:
        raise AssertionError(f"the earlier runs of {workflow_id} were not deleted in 90 s")
    return len(earlier)


@contextlib.contextmanager
def moto_s3() -> Iterator[dict[str, str]]:
    """A real S3 API on loopback (moto's server) with one bucket."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        import boto3

        boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"]).create_bucket(Bucket="payloads")
        yield {"DURABLE_AGENT_STORAGE": "s3://payloads", **env}
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.asynccontextmanager
async def storage_client(
    dev_server: DevServer, kind: str, tmp_path: Path, threshold: int
) -> AsyncIterator[tuple[Client, ExternalStorage | None]]:
    with contextlib.ExitStack() as stack:
        env: dict[str, str] = {"DURABLE_AGENT_STORAGE_THRESHOLD": str(threshold)}
        if kind == "file":
            env["DURABLE_AGENT_STORAGE"] = f"file://{tmp_path / 'payloads'}"
        elif kind == "s3":
            env.update(stack.enter_context(moto_s3()))
        storage = external_storage_from_env(env) if kind != "none" else None
        client = await Client.connect(
            dev_server.address, plugins=[DurableAgentPlugin(external_storage=storage)]
        )
        yield client, storage


def _payload_texts(history: Any) -> list[str]:
    out = []
    for event in history.events:
        out.append(event.SerializeToString().decode("utf-8", errors="replace"))
    return out


@pytest.mark.parametrize("kind", ["none", "file", "s3"])
async def test_a_run_finishes_after_its_earlier_runs_are_deleted(
    dev_server: DevServer, tmp_path: Path, kind: str
) -> None:
    name = unique(f"retention-{kind}")
    seen: list[int] = []
    steps = 7
    agent = conversation_agent(name, steps, seen)
    async with storage_client(dev_server, kind, tmp_path, threshold=2_000) as (client, _storage):
        task_queue = unique("tq")
        async with new_worker(client, task_queue, agents=[agent]) as worker:
            handle = await start_agent(client, worker, name, PROMPT)
            view = await wait_status(handle, "waiting", timeout=60)
            assert view.continued_as_new >= 2
        deleted = await delete_earlier_runs(dev_server.address, client, handle.id)
        assert deleted >= 2
        # The handle from the start follows the chain from its first run, which is gone.
        # A new worker: its history cache is empty, so the run's history is read back.
        handle = client.get_workflow_handle_for(AgentWorkflow.run, handle.id)
        async with new_worker(client, task_queue, agents=[agent]):
            await handle.execute_update(
                AgentWorkflow.submit_approval,
                ApprovalSignal(tool_call_id="deploy_1", approved=True, decided_by="alice"),
            )
            result = await asyncio.wait_for(handle.result(), 60)
        history = await handle.fetch_history()
        raw = await Client.connect(dev_server.address)
        inline = _payload_texts(await raw.get_workflow_handle(handle.id).fetch_history())
    assert result.output == f"done after {steps + 1} steps"
    assert seen[-1] == 2 * (steps + 1) + 1, "the last request saw the whole conversation"
    types = [EventType.Name(e.event_type) for e in history.events]
    assert "EVENT_TYPE_WORKFLOW_TASK_FAILED" not in types
    holds_transcript = any("MARKER-the-first-prompt" in text for text in inline)
    if kind == "none":
        assert holds_transcript, "without external storage the continuation is inline"
    else:
        assert not holds_transcript, "with external storage no event holds the transcript"


async def test_a_continuation_over_the_payload_limit_fails_clearly(client: Client) -> None:
    name = unique("huge")

    async def dump(n: int) -> str:
        return f"{n}:" + "y" * 250_000

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(1 for m in messages if isinstance(m, ModelResponse))
        return ModelResponse(
            parts=[ToolCallPart(id=f"d{done}", name="dump", arguments={"n": done})]
        )

    agent = AgentRegistration(
        AgentBuilder(FunctionModel(respond))
        .name(name)
        .tool(dump)
        .max_tool_result_bytes(300_000)
        .usage_limits(UsageLimits(request_limit=None))
        .build(),
        AgentActivityConfig(model_request=FAST, tool_call=FAST, continue_as_new_after_steps=9),
    )
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, "dump")
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), 120)
        history = await handle.fetch_history()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "conversation_too_large"
    assert cause.non_retryable
    assert "configure external storage" in cause.message
    assert "keep_last_messages" in cause.message
    types = [EventType.Name(e.event_type) for e in history.events]
    assert "EVENT_TYPE_WORKFLOW_TASK_FAILED" not in types


async def test_a_history_processor_bounds_what_the_model_sees_and_what_crosses(
    client: Client,
) -> None:
    name = unique("bounded")
    sizes: list[int] = []

    async def step(n: int) -> str:
        return f"step {n} ok"

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sizes.append(len(messages))
        done = len(sizes)
        if done < 12:
            return ModelResponse(
                parts=[ToolCallPart(id=f"s{done}", name="step", arguments={"n": done})]
            )
        return ModelResponse(parts=[TextPart(text="done")])

    agent = AgentRegistration(
        AgentBuilder(FunctionModel(respond))
        .name(name)
        .tool(step)
        .history_processor(keep_last_messages(4))
        .usage_limits(UsageLimits(request_limit=None))
        .build(),
        AgentActivityConfig(model_request=FAST, tool_call=FAST, continue_as_new_after_steps=3),
    )
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, "go")
        result = await asyncio.wait_for(handle.result(), 60)
        latest = await handle.query(AgentWorkflow.latest_checkpoint)
        view = await handle.query(AgentWorkflow.status)
    assert result.output == "done"
    assert view.continued_as_new >= 3
    assert max(sizes) <= 5, f"the model saw {max(sizes)} messages"
    assert latest is not None
    assert len(latest.state.message_history) <= 4 + 3 * 2 + 2, "the continuation carried more"
