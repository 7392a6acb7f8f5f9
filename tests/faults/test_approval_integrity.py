"""A tool that needs approval never runs without one, whatever crashes in between.

The side-effect files record every start of the `deploy` tool with the `approved` flag its
`ToolContext` carried, so "never ran" and "ran only as approved" are read from disk, not
from the workflow's own account.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from durable_agent import AgentExecutionNode
from durable_agent.temporal import AgentWorkflow, ApprovalSignal, ResumeSignal
from durable_agent.temporal.devserver import DevServer

from .support import Faults, Handle

pytestmark = pytest.mark.server

PROMPT = "fetch alpha, then deploy"
DEPLOY = "call_deploy_1"


async def decide(handle: Handle, *, approved: bool) -> None:
    await handle.execute_update(
        AgentWorkflow.submit_approval,
        ApprovalSignal(
            tool_call_id=DEPLOY,
            approved=approved,
            reason=None if approved else "change freeze",
            decided_by="tester",
        ),
    )


async def test_approved_tool_killed_on_first_attempt(dev_server: DevServer, tmp_path: Path) -> None:
    async with Faults(dev_server.address, tmp_path, "approve-kill") as faults:
        first = await faults.start_worker()
        handle = await faults.start_run("fault-approval", PROMPT)
        faults.block_tool(handle.id, DEPLOY)
        await faults.status(handle, status="waiting", run_step=2)
        assert faults.calls("tool_started", handle.id) == ["call_fetch_1"]

        await decide(handle, approved=True)
        # The approved call starts, blocks on its first attempt, and the worker dies.
        blocked = await faults.wait_for_line("tool_blocked", handle.id)
        first.kill()
        assert blocked[0][1] == DEPLOY
        faults.release(handle.id)
        await faults.start_worker()
        result = await faults.result(handle)

        assert result.output == "result: deployed to prod"
        deploys = [row for row in faults.lines("tool_started", handle.id) if row[1] == DEPLOY]
        assert [row[2] for row in deploys] == ["1", "2"]
        assert {row[4] for row in deploys} == {"approved=True"}
        assert {row[3] for row in deploys} == {f"{handle.id}:{DEPLOY}"}
        finished = [row for row in faults.lines("tool_finished", handle.id) if row[1] == DEPLOY]
        assert [(row[2], row[4]) for row in finished] == [("2", "approved=True")]
        assert faults.steps("model_requests", handle.id) == [1, 2, 3]


async def test_crash_between_approval_and_tool_call(dev_server: DevServer, tmp_path: Path) -> None:
    """Parked (suspend_at tool_call) right after the decision is recorded; then killed."""
    async with Faults(dev_server.address, tmp_path, "approve-park") as faults:
        first = await faults.start_worker()
        handle = await faults.start_run(
            "fault-approval",
            PROMPT,
            suspend_at=[AgentExecutionNode.TOOL_CALL],
        )
        await faults.status(handle, node="tool_call", run_step=1, status="waiting")
        await handle.execute_update(AgentWorkflow.resume_run, ResumeSignal())
        await faults.status(handle, node="tool_call", run_step=2, status="waiting")
        await handle.execute_update(AgentWorkflow.resume_run, ResumeSignal())
        view = await faults.status(handle, node="tool_return", run_step=2, status="waiting")
        assert [p.tool_call_id for p in view.pending_approvals] == [DEPLOY]

        await decide(handle, approved=True)
        # The decision is in history; the run parks at the tool_call boundary before running it.
        view = await faults.status(handle, node="tool_call", run_step=2, status="waiting")
        assert view.suspend_reason == "suspend_at tool_call"
        assert DEPLOY not in faults.calls("tool_started", handle.id)
        first.kill()

        await faults.start_worker()
        await handle.signal(AgentWorkflow.resume, ResumeSignal(reason="after the crash"))
        result = await faults.result(handle)

        assert result.output == "result: deployed to prod"
        deploys = [row for row in faults.lines("tool_started", handle.id) if row[1] == DEPLOY]
        assert [(row[2], row[4]) for row in deploys] == [("1", "approved=True")]
        assert faults.calls("tool_finished", handle.id) == ["call_fetch_1", DEPLOY]


async def test_denied_call_never_runs_across_crash_and_continue_as_new(
    dev_server: DevServer, tmp_path: Path
) -> None:
    async with Faults(dev_server.address, tmp_path, "deny-can") as faults:
        first = await faults.start_worker()

        async def deny(handle: Handle) -> None:
            await faults.status(handle, status="waiting", run_step=2)
            await decide(handle, approved=False)

        reference, reference_messages = await faults.undisturbed(
            "fault-approval", PROMPT, decide=deny
        )

        handle = await faults.start_run("fault-approval-can", PROMPT)
        faults.block_model(handle.id, 3)
        # Step 1 (fetch) ran, the workflow continued as new, step 2 asks for approval.
        view = await faults.status(handle, status="waiting", run_step=2)
        assert view.continued_as_new == 1
        first.kill()

        second = await faults.start_worker()
        await decide(handle, approved=False)
        # The denial is applied, the run continues as new again and requests step 3,
        # where the model blocks: kill this worker too.
        await faults.wait_for_line("model_blocked", handle.id)
        view = await handle.query(AgentWorkflow.status)
        assert view.continued_as_new == 2
        # The denial travelled across continue-as-new: a late approval is refused.
        with pytest.raises(WorkflowUpdateFailedError) as late:
            await decide(handle, approved=True)
        assert isinstance(late.value.cause, ApplicationError)
        assert "already denied" in late.value.cause.message
        second.kill()

        faults.release(handle.id)
        await faults.start_worker()
        result = await faults.result(handle)
        messages = await faults.transcript(handle)

        assert (
            result.output == reference.output == "result: The call was not approved: change freeze"
        )
        assert messages == reference_messages
        assert DEPLOY not in faults.calls("tool_started", handle.id)
        assert DEPLOY not in faults.calls("tool_finished", handle.id)
        assert faults.calls("tool_finished", handle.id) == ["call_fetch_1"]
        assert faults.steps("model_responses", handle.id) == [1, 2, 3]
