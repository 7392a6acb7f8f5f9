"""An approver's note: the remark a person attaches to a decision reaches the model with the
tool's result (or its denial), the stream, the Web UI's details, the CLI's view and the
inbox, and the approval's signature covers it (issue 37's proof of one shape per idea)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.client import Client

from durable_agent import (
    AgentBuilder,
    FunctionModel,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolApprovalDecision,
    ToolCallPart,
    ToolReturnPart,
)
from durable_agent.contract.records import ApprovalDecidedData, ToolReturnData
from durable_agent.models import AgentInfo
from durable_agent.temporal import AgentWorkflow
from durable_agent.temporal.client import AgentClient
from durable_agent.temporal.signing import ApprovalKeys, sign_signal, signed_message
from durable_agent.temporal.wire import ApprovalSignal
from tests.cli_support import cli_runner

from .temporal_support import new_worker, start_agent, unique, wait_for_status

KEYS = ApprovalKeys.parse("k1:" + "A" * 43 + "=")


def _echo_the_return(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Calls `deploy` once, then answers with what the call's return said."""
    last = messages[-1]
    if isinstance(last, ModelRequest):
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(text=f"saw: {returns[0].content}")])
    return ModelResponse(parts=[ToolCallPart(id="d1", name="deploy", arguments={"env": "prod"})])


def _agent(name: str = "noted") -> Any:
    def deploy(env: str) -> str:
        return f"deployed to {env}"

    return (
        AgentBuilder(FunctionModel(_echo_the_return))
        .name(name)
        .tool(deploy)
        .approval_required_tools(["deploy"])
        .build()
    )


async def test_the_model_reads_an_approvers_note_beside_the_tools_result() -> None:
    agent = _agent()
    records: list[Any] = []
    waiting = await agent.run("ship it")
    decision = ToolApprovalDecision.approved(decided_by="alice", note="watch the error rate")
    done = await agent.resume_after_hitl(
        waiting.state, approvals={"d1": decision}, sink=records.append
    )
    assert done.output == (
        "saw: deployed to prod\n\nNote from the approver (alice): watch the error rate"
    )
    (decided,) = [r.data for r in records if isinstance(r.data, ApprovalDecidedData)]
    assert decided.note == "watch the error rate"
    assert decided.describe() == "approved by alice; note: watch the error rate"
    assert decided.as_json()["note"] == "watch the error rate"
    (returned,) = [r.data for r in records if isinstance(r.data, ToolReturnData)]
    assert "watch the error rate" in returned.content


async def test_a_denials_note_follows_its_reason() -> None:
    agent = _agent()
    waiting = await agent.run("ship it")
    decision = ToolApprovalDecision.denied(
        "change freeze", decided_by="bob", note="ask again on Monday"
    )
    done = await agent.resume_after_hitl(waiting.state, approvals={"d1": decision})
    assert done.output == (
        "saw: The call was not approved: change freeze\n\n"
        "Note from the approver (bob): ask again on Monday"
    )


def test_a_decision_without_a_note_is_the_json_it_always_was() -> None:
    decision = ToolApprovalDecision.approved(decided_by="alice")
    assert "note" not in decision.model_dump(mode="json")
    record = ApprovalDecidedData.of("d1", "deploy", decision)
    assert "note" not in record.as_json()


def test_the_signature_covers_the_note() -> None:
    decision = ToolApprovalDecision.approved(decided_by="alice", note="roll back if slow")
    now = datetime(2026, 12, 4, 12, tzinfo=UTC)
    signed = sign_signal(KEYS, "wf-1", ApprovalSignal.envelope("d1", decision), now=now)
    assert KEYS.problem("wf-1", signed, now) is None
    assert b'"note":"roll back if slow"' in signed_message("wf-1", signed)
    tampered = signed.model_copy(update={"note": "deploy everything"})
    problem = KEYS.problem("wf-1", tampered, now)
    assert problem is not None
    assert "does not match" in problem
    dropped = signed.model_copy(update={"note": None})
    assert KEYS.problem("wf-1", dropped, now) is not None


@pytest.mark.server
async def test_a_note_from_the_cli_reaches_the_model_the_stream_and_the_web_ui(
    client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = _agent(unique("noted"))
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, agent.name, "ship it")
        await wait_for_status(handle, "waiting")
        cli = cli_runner(client.service_client.config.target_host, capsys)
        approved = await cli(
            "approve", handle.id, "d1", "--by", "alice", "--note", "watch the error rate"
        )
        assert approved.code == 0, approved.err
        result = await handle.result()
        assert result.output == (
            "saw: deployed to prod\n\nNote from the approver (alice): watch the error rate"
        )
        records = [r async for r in AgentClient(client).get(handle.id).stream()]
        (decided,) = [r.data for r in records if isinstance(r.data, ApprovalDecidedData)]
        assert decided.note == "watch the error rate"
        metadata = await handle.query("__temporal_workflow_metadata")
        # Markdown, with what people wrote made literal (`:` escaped)
        assert "approved by alice; note\\: watch the error rate" in metadata.current_details
        watched = await cli("watch", handle.id)
        assert "d1 approved by alice; note: watch the error rate" in watched.out
        status = await handle.query(AgentWorkflow.status)
        assert status.status == "completed"
