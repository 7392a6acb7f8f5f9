"""A worker process SIGKILLed at each kind of point in a run; a new worker finishes it.

Each test first runs the same agent undisturbed (the reference), then runs it again, kills
the worker at one point, starts a fresh worker process, and checks that the run ends with
the same output and the same conversation, and that no completed model request was sent
again.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from durable_agent import AgentExecutionNode
from durable_agent.temporal import AgentWorkflow, ApprovalSignal, ResumeSignal
from durable_agent.temporal.devserver import DevServer

from .agents import STEPS_OUTPUT
from .support import Faults, Handle

pytestmark = pytest.mark.server

PROMPT = "fetch alpha and beta"


async def approve(faults: Faults, handle: Handle) -> None:
    await faults.status(handle, status="waiting", run_step=2)
    await handle.execute_update(
        AgentWorkflow.submit_approval,
        ApprovalSignal(tool_call_id="call_deploy_1", approved=True, decided_by="tester"),
    )


async def test_killed_during_model_request(dev_server: DevServer, tmp_path: Path) -> None:
    async with Faults(dev_server.address, tmp_path, "kill-model") as faults:
        first = await faults.start_worker()
        reference, reference_messages = await faults.undisturbed("fault-steps", PROMPT)

        handle = await faults.start_run("fault-steps", PROMPT)
        # Block (and kill) the second model request: the first one has completed by then.
        faults.block_model(handle.id, 2)
        await faults.wait_for_line("model_blocked", handle.id)
        first.kill()
        assert faults.steps("model_responses", handle.id) == [1]

        faults.release(handle.id)
        killed_at = time.monotonic()
        await faults.start_worker()
        result = await faults.result(handle)
        recovery = time.monotonic() - killed_at
        messages = await faults.transcript(handle)

        assert result.output == reference.output == STEPS_OUTPUT
        assert messages == reference_messages
        # Step 1 was answered before the kill and never asked again; step 2 was asked twice
        # (the killed attempt and its retry) and answered once.
        assert faults.steps("model_requests", handle.id) == [1, 2, 2, 3]
        assert faults.steps("model_responses", handle.id) == [1, 2, 3]
        attempts = [row[2] for row in faults.lines("model_requests", handle.id)]
        assert attempts == ["1", "1", "2", "1"]
        assert faults.calls("tool_finished", handle.id) == ["call_fetch_1", "call_fetch_2"]
        print(f"recovered {recovery:.1f}s after the kill")


async def test_killed_during_tool_call(dev_server: DevServer, tmp_path: Path) -> None:
    async with Faults(dev_server.address, tmp_path, "kill-tool") as faults:
        first = await faults.start_worker()
        reference, reference_messages = await faults.undisturbed("fault-steps", PROMPT)

        handle = await faults.start_run("fault-steps", PROMPT)
        faults.block_tool(handle.id, "call_fetch_2")
        await faults.wait_for_line("tool_blocked", handle.id)
        first.kill()
        assert faults.steps("model_responses", handle.id) == [1, 2]

        faults.release(handle.id)
        await faults.start_worker()
        result = await faults.result(handle)
        messages = await faults.transcript(handle)

        assert result.output == reference.output == STEPS_OUTPUT
        assert messages == reference_messages
        assert faults.steps("model_requests", handle.id) == [1, 2, 3]
        assert faults.steps("model_responses", handle.id) == [1, 2, 3]
        started = faults.lines("tool_started", handle.id)
        assert [(row[1], row[2]) for row in started] == [
            ("call_fetch_1", "1"),
            ("call_fetch_2", "1"),
            ("call_fetch_2", "2"),
        ]
        assert {row[3] for row in started if row[1] == "call_fetch_2"} == {
            f"{handle.id}:call_fetch_2"
        }
        assert faults.calls("tool_finished", handle.id) == ["call_fetch_1", "call_fetch_2"]


async def test_killed_while_waiting_for_approval(dev_server: DevServer, tmp_path: Path) -> None:
    async with Faults(dev_server.address, tmp_path, "kill-approval") as faults:
        first = await faults.start_worker()
        reference, reference_messages = await faults.undisturbed(
            "fault-approval", PROMPT, decide=lambda h: approve(faults, h)
        )

        handle = await faults.start_run("fault-approval", PROMPT)
        view = await faults.status(handle, status="waiting", run_step=2)
        assert [p.tool_call_id for p in view.pending_approvals] == ["call_deploy_1"]
        first.kill()

        await faults.start_worker()
        await approve(faults, handle)
        result = await faults.result(handle)
        messages = await faults.transcript(handle)

        assert result.output == reference.output == "result: deployed to prod"
        assert messages == reference_messages
        assert faults.steps("model_requests", handle.id) == [1, 2, 3]
        assert faults.calls("tool_started", handle.id) == ["call_fetch_1", "call_deploy_1"]
        assert faults.calls("tool_finished", handle.id) == ["call_fetch_1", "call_deploy_1"]
        assert faults.lines("tool_finished", handle.id)[1][4] == "approved=True"


async def test_killed_between_activities(dev_server: DevServer, tmp_path: Path) -> None:
    async with Faults(dev_server.address, tmp_path, "kill-between") as faults:
        first = await faults.start_worker()
        reference, reference_messages = await faults.undisturbed("fault-steps", PROMPT)

        handle = await faults.start_run(
            "fault-steps",
            PROMPT,
            suspend_at=[AgentExecutionNode.TOOL_CALL],
        )
        # Parked at the tool_call boundary of step 1: model_request done, tool_call not begun.
        view = await faults.status(handle, node="tool_call", run_step=1)
        assert view.suspend_reason == "suspend_at tool_call"
        assert faults.steps("model_responses", handle.id) == [1]
        assert faults.lines("tool_started", handle.id) == []
        first.kill()

        await faults.start_worker()
        await handle.signal(AgentWorkflow.resume, ResumeSignal(reason="after the crash"))
        # The run parks again before step 2's tool call.
        view = await faults.status(handle, node="tool_call", run_step=2, status="waiting")
        await handle.signal(AgentWorkflow.resume, ResumeSignal())
        result = await faults.result(handle)
        messages = await faults.transcript(handle)

        assert result.output == reference.output == STEPS_OUTPUT
        assert messages == reference_messages
        assert faults.steps("model_requests", handle.id) == [1, 2, 3]
        assert faults.calls("tool_started", handle.id) == ["call_fetch_1", "call_fetch_2"]
        assert faults.calls("tool_finished", handle.id) == ["call_fetch_1", "call_fetch_2"]
