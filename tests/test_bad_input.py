"""Bad input gets a clear error and changes nothing (issue 6, item 3).

One test per row of the README's bad-input table, against the real dev server. Each test asserts the
exact error the sender sees and that nothing changed: a rejected update adds no history
event, the run's status and pending approvals stay as they were, and no tool ran.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import structlog
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from durable_agent import AgentBuilder, CallDeferred, RetryPromptPart, TestModel, ToolReturnPart
from durable_agent.cli.app import amain
from durable_agent.engine.spec import AgentSpec
from durable_agent.temporal import (
    AgentWorkflow,
    AgentWorkflowInput,
    ApprovalSignal,
    DeferredResultSignal,
    ResumeSignal,
)
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.wire import MAX_PROMPT_CHARS, AgentStatusView

from .helpers import CallLog, call, text_response, tool_response
from .temporal_support import event_types, new_worker

AgentHandle = WorkflowHandle[Any, Any]


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


# -- agents ------------------------------------------------------------------------------------


def two_deploys_agent(log: CallLog) -> AgentSpec:
    """Asks to deploy twice (calls d1 and d2), both needing approval: deciding d1 leaves the
    run waiting for d2, so a second decision for d1 never races the run's end."""

    def deploy(env: str) -> str:
        log.record("deploy", env=env)
        return f"deployed to {env}"

    name = unique("bad-deploy")
    model = TestModel.with_responses(
        [
            tool_response(call("deploy", "d1", env="prod"), call("deploy", "d2", env="eu")),
            text_response("finished"),
        ]
    )
    return AgentBuilder(model).name(name).tool(deploy).approval_required_tools(["deploy"]).build()


def one_deploy_agent(log: CallLog) -> AgentSpec:
    def deploy(env: str) -> str:
        log.record("deploy", env=env)
        return f"deployed to {env}"

    name = unique("bad-deploy1")
    model = TestModel.with_responses(
        [tool_response(call("deploy", "d1", env="prod")), text_response("finished")]
    )
    return AgentBuilder(model).name(name).tool(deploy).approval_required_tools(["deploy"]).build()


def deferred_agent(log: CallLog) -> AgentSpec:
    """Two deferred calls, b1 and b2: the run waits until both have a result."""

    def background(job: str) -> str:
        log.record("background", job=job)
        raise CallDeferred("runs elsewhere")

    name = unique("bad-deferred")
    model = TestModel.with_responses(
        [
            tool_response(call("background", "b1", job="x"), call("background", "b2", job="y")),
            text_response("all done"),
        ]
    )
    return AgentBuilder(model).name(name).tool(background).build()


# -- helpers -----------------------------------------------------------------------------------


async def start(client: Client, task_queue: str, agent: str, prompt: str = "ship") -> AgentHandle:
    return await client.start_workflow(
        AgentWorkflow.run,
        AgentWorkflowInput(agent=agent, prompt=prompt),
        id=unique("bad"),
        task_queue=task_queue,
    )


async def wait_for_status(handle: AgentHandle, status: str, timeout: float = 20) -> AgentStatusView:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        view: AgentStatusView = await handle.query(AgentWorkflow.status)
        if view.status == status:
            return view
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"status stayed {view.status!r}, wanted {status!r}: {view}")
        await asyncio.sleep(0.05)


async def history_types(handle: AgentHandle) -> list[str]:
    return event_types(await handle.fetch_history())


async def event_count(handle: AgentHandle) -> int:
    return len((await handle.fetch_history()).events)


async def signal_processed(handle: AgentHandle, timeout: float = 10) -> list[str]:
    """History once the workflow task that delivered the last signal has ended (completed
    or failed), so a test can look at what the signal did without sleeping."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        types = await history_types(handle)
        last_signal = max(i for i, t in enumerate(types) if t == "WORKFLOW_EXECUTION_SIGNALED")
        if any(
            t in ("WORKFLOW_TASK_COMPLETED", "WORKFLOW_TASK_FAILED") for t in types[last_signal:]
        ):
            return types
        assert asyncio.get_running_loop().time() < deadline, types
        await asyncio.sleep(0.05)


def pending(view: AgentStatusView) -> list[tuple[str, bool]]:
    return [(p.tool_call_id, p.decided) for p in view.pending_approvals]


def comparable(view: AgentStatusView, *, refusals: bool = True) -> dict[str, Any]:
    """The whole status view (status, node, step, pending approvals, usage, checkpoint
    count, ...), to compare before and after a request that must change nothing.

    A refused signal changes one thing by design: the run tells its refusals in
    `refused_decisions` (a signal has no caller to answer), so `refusals=False` leaves that
    field out for the caller to check on its own."""
    dumped = view.model_dump(mode="json")
    if not refusals:
        dumped.pop("refused_decisions", None)
    return dumped


def refusals(view: AgentStatusView) -> list[tuple[str, str, str | None]]:
    return [(r.tool_call_id, r.reason, r.decided_by) for r in view.refused_decisions]


async def rejected_update(
    handle: AgentHandle, update: Any, request: Any, **kwargs: Any
) -> ApplicationError:
    """Sends an update that must be rejected; returns the error the client saw and checks the
    rejection left no trace: same history length, same status view."""
    events = await event_count(handle)
    before = await handle.query(AgentWorkflow.status)
    with pytest.raises(WorkflowUpdateFailedError) as info:
        await handle.execute_update(update, request, **kwargs)
    assert await event_count(handle) == events
    assert comparable(await handle.query(AgentWorkflow.status)) == comparable(before)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    return cause


async def approve_all(handle: AgentHandle, *call_ids: str) -> None:
    for call_id in call_ids:
        await handle.execute_update(
            AgentWorkflow.submit_approval, ApprovalSignal(tool_call_id=call_id, approved=True)
        )


def no_task_failed(types: list[str]) -> None:
    assert "WORKFLOW_TASK_FAILED" not in types, types


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING)
    return caplog


def logged(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    return any(text in record.getMessage() for record in caplog.records)


# -- starting a run ----------------------------------------------------------------------------


async def test_unknown_agent_fails_the_run_with_unknown_agent(client: Client) -> None:
    agent = unique("no-such-agent")
    async with new_worker(client) as worker:
        handle = await start(client, worker.task_queue, agent)
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), 20)
        view = await handle.query(AgentWorkflow.status)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "unknown_agent"
    assert cause.non_retryable
    assert cause.message.startswith(
        f"no agent named {agent!r} is registered on this worker (registered: "
    )
    assert cause.message.endswith("); start the worker with --agents your.module to register it")
    assert view.status == "failed"
    assert view.error == f"unknown_agent: {cause.message}"
    types = await history_types(handle)
    no_task_failed(types)
    assert "ACTIVITY_TASK_SCHEDULED" not in types  # no model request, no tool


@pytest.mark.parametrize("prompt", ["", " \n\t "], ids=["empty", "whitespace"])
async def test_empty_prompt_fails_with_invalid_input(client: Client, prompt: str) -> None:
    log = CallLog()
    spec = one_deploy_agent(log)
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        handle = await start(client, worker.task_queue, agent, prompt=prompt)
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), 20)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.message) == (
        "invalid_input",
        "the prompt is empty; send the task for the agent",
    )
    assert cause.non_retryable
    types = await history_types(handle)
    no_task_failed(types)
    assert "ACTIVITY_TASK_SCHEDULED" not in types
    assert log.calls == []


async def test_status_query_says_failed_after_an_invalid_prompt(client: Client) -> None:
    spec = one_deploy_agent(CallLog())
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        handle = await start(client, worker.task_queue, agent, prompt="")
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 20)
        view = await handle.query(AgentWorkflow.status)
    assert (view.status, view.error) == (
        "failed",
        "invalid_input: the prompt is empty; send the task for the agent",
    )


async def test_oversized_prompt_fails_with_invalid_input(client: Client) -> None:
    spec = one_deploy_agent(CallLog())
    agent = spec.name
    size = MAX_PROMPT_CHARS + 1
    async with new_worker(client, agents=[spec]) as worker:
        handle = await start(client, worker.task_queue, agent, prompt="x" * size)
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), 20)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "invalid_input"
    assert cause.message == (
        f"the prompt has {size} characters, more than the {MAX_PROMPT_CHARS} allowed; "
        "send large documents through a tool instead"
    )
    types = await history_types(handle)
    no_task_failed(types)
    assert "ACTIVITY_TASK_SCHEDULED" not in types


async def test_prompt_over_the_server_payload_limit_is_refused_at_start(client: Client) -> None:
    """Past the server's blob limit (2 MB by default) the start itself is refused: no run."""
    agent = one_deploy_agent(CallLog()).name  # no worker: the start is refused
    workflow_id = unique("bad")
    with pytest.raises(RPCError) as info:
        await client.start_workflow(
            AgentWorkflow.run,
            AgentWorkflowInput(agent=agent, prompt="x" * 2_500_000),
            id=workflow_id,
            task_queue=unique("tq"),
        )
    assert info.value.status == RPCStatusCode.INVALID_ARGUMENT
    assert info.value.message == "Blob data size exceeds limit."
    with pytest.raises(RPCError) as missing:
        await client.get_workflow_handle(workflow_id).describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND


# -- malformed payloads ------------------------------------------------------------------------

MALFORMED_APPROVALS = [
    pytest.param(
        {"tool_call_id": 5, "approved": True},
        "tool_call_id\n  Input should be a valid string [type=string_type",
        id="id-not-a-string",
    ),
    pytest.param(
        {"tool_call_id": "d1"},
        "approved\n  Field required [type=missing",
        id="approved-missing",
    ),
    pytest.param(
        {"tool_call_id": "d1", "approved": "maybe"},
        "approved\n  Input should be a valid boolean, unable to interpret input [type=bool_parsing",
        id="approved-maybe",
    ),
    pytest.param(
        "approve d1",
        "Input should be an object [type=model_type",
        id="not-an-object",
    ),
]


@pytest.mark.parametrize(("payload", "detail"), MALFORMED_APPROVALS)
async def test_malformed_update_payload_is_rejected_before_validation(
    client: Client, payload: Any, detail: str
) -> None:
    """temporalio 1.35 cannot decode the payload into `ApprovalSignal`: the update is
    rejected (it never reaches the validator or history) with a `RuntimeError` failure
    "Failed decoding arguments" whose cause is pydantic's `ValidationError` text."""
    log = CallLog()
    spec = one_deploy_agent(log)
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        handle = await start(client, worker.task_queue, agent)
        await wait_for_status(handle, "waiting")
        cause = await rejected_update(handle, "submit_approval", payload)
        assert (cause.type, cause.message) == ("RuntimeError", "Failed decoding arguments")
        inner = cause.cause
        assert isinstance(inner, ApplicationError)
        assert inner.type == "ValidationError"
        assert inner.message.startswith("1 validation error for ApprovalSignal\n")
        assert detail in inner.message
        view = await handle.query(AgentWorkflow.status)
        assert (view.status, pending(view)) == ("waiting", [("d1", False)])
        assert log.calls == []
        await approve_all(handle, "d1")
        result = await asyncio.wait_for(handle.result(), 20)
    assert result.output == "finished"
    assert log.calls == [("deploy", {"env": "prod"})]
    no_task_failed(await history_types(handle))


async def test_null_update_payload_is_rejected(client: Client) -> None:
    """`null` decodes to None, so the validator itself fails: still a rejection."""
    log = CallLog()
    spec = one_deploy_agent(log)
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        handle = await start(client, worker.task_queue, agent)
        await wait_for_status(handle, "waiting")
        cause = await rejected_update(handle, "submit_approval", None)
        assert (cause.type, cause.message) == (
            "AttributeError",
            "'NoneType' object has no attribute 'tool_call_id'",
        )
        await approve_all(handle, "d1")
        await asyncio.wait_for(handle.result(), 20)
    assert log.calls == [("deploy", {"env": "prod"})]
    no_task_failed(await history_types(handle))


async def test_misspelt_update_name_is_rejected(client: Client) -> None:
    spec = one_deploy_agent(CallLog())
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        handle = await start(client, worker.task_queue, agent)
        await wait_for_status(handle, "waiting")
        cause = await rejected_update(
            handle, "submit_aproval", {"tool_call_id": "d1", "approved": True}
        )
        await approve_all(handle, "d1")
        await asyncio.wait_for(handle.result(), 20)
    assert cause.type == "RuntimeError"
    assert cause.message == (
        "Update handler for 'submit_aproval' expected but not found, and there is no dynamic "
        "handler. known updates: [__temporal_workflow_stream_poll resume_run send_prompt "
        "steer_run submit_approval submit_deferred_result]"
    )


MALFORMED_SIGNALS = [
    pytest.param("approval", {"approved": "maybe"}, id="approval-no-id-maybe"),
    pytest.param("approval", {"tool_call_id": "d1", "approved": "maybe"}, id="approval-maybe"),
    pytest.param("approval", {"tool_call_id": 5, "approved": True}, id="approval-id-int"),
    pytest.param("approval", "approve d1", id="approval-not-an-object"),
    pytest.param("deferred_result", {"tool_call_id": "d1", "status": "done"}, id="deferred-status"),
    pytest.param("resume", {"reason": ["x"]}, id="resume-reason-list"),
    pytest.param("suspend", {"reason": 5}, id="suspend-reason-int"),
]


@pytest.mark.parametrize(("name", "payload"), MALFORMED_SIGNALS)
async def test_malformed_signal_payload_is_dropped(
    client: Client, logs: pytest.LogCaptureFixture, name: str, payload: Any
) -> None:
    """A signal cannot be refused: the client call succeeds, the workflow logs "<name> signal
    ignored: malformed input", the workflow task completes, and the run still waits and can
    be approved properly afterwards."""
    log = CallLog()
    spec = one_deploy_agent(log)
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        handle = await start(client, worker.task_queue, agent)
        before = await wait_for_status(handle, "waiting")
        await handle.signal(name, payload)  # no error at the client
        types = await signal_processed(handle)
        no_task_failed(types)
        after = await handle.query(AgentWorkflow.status)
        assert comparable(after) == comparable(before)
        assert (after.status, pending(after)) == ("waiting", [("d1", False)])
        assert log.calls == []
        await approve_all(handle, "d1")
        result = await asyncio.wait_for(handle.result(), 20)
    assert result.output == "finished"
    assert log.calls == [("deploy", {"env": "prod"})]
    no_task_failed(await history_types(handle))
    assert logged(logs, f"{name} signal ignored: malformed input")


async def test_misspelt_signal_name_is_logged_and_ignored(
    client: Client, logs: pytest.LogCaptureFixture
) -> None:
    """`approve` (the CLI command's name) instead of the `approval` signal: a catch-all
    handler logs which signals the workflow accepts, and nothing changes."""
    log = CallLog()
    spec = one_deploy_agent(log)
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        handle = await start(client, worker.task_queue, agent)
        before = await wait_for_status(handle, "waiting")
        await handle.signal("approve", {"tool_call_id": "d1", "approved": True})
        no_task_failed(await signal_processed(handle))
        assert comparable(await handle.query(AgentWorkflow.status)) == comparable(before)
        assert log.calls == []
        await approve_all(handle, "d1")
        await asyncio.wait_for(handle.result(), 20)
    assert log.calls == [("deploy", {"env": "prod"})]
    assert logged(logs, "unknown signal 'approve' ignored; this workflow accepts: approval")


ARGLESS_SIGNALS = [
    pytest.param("approval", [], id="approval-no-input"),
    pytest.param("resume", [], id="resume-no-input"),
    pytest.param("suspend", [], id="suspend-no-input"),
    pytest.param("deferred_result", [], id="deferred-no-input"),
    pytest.param("approval", [None], id="approval-null"),
    pytest.param("suspend", [None], id="suspend-null"),
    pytest.param(
        "approval", [{"tool_call_id": "d1", "approved": True}, "extra"], id="approval-two-args"
    ),
]


@pytest.mark.parametrize(("name", "args"), ARGLESS_SIGNALS)
async def test_signal_without_a_payload_is_dropped(
    client: Client, name: str, args: list[Any]
) -> None:
    """No input, `null` or two inputs: logged and dropped (`resume`, whose fields are all
    optional, reads no input as `{}`), never a failed workflow task."""
    log = CallLog()
    spec = one_deploy_agent(log)
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        handle = await start(client, worker.task_queue, agent)
        try:
            await wait_for_status(handle, "waiting")
            await handle.signal(name, args=args)
            no_task_failed(await signal_processed(handle))
            await approve_all(handle, "d1")
            await asyncio.wait_for(handle.result(), 20)
        finally:
            if (await handle.describe()).close_time is None:
                await handle.terminate("test cleanup")
    assert log.calls == [("deploy", {"env": "prod"})]


async def test_lax_approval_payload_is_accepted_as_pydantic_reads_it(client: Client) -> None:
    """Not an error today: pydantic's lax JSON mode reads `"approved": "no"` as False and
    ignores unknown fields, so a misspelt `reasn` is dropped and the reason is "denied"."""
    log = CallLog()
    spec = one_deploy_agent(log)
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        handle = await start(client, worker.task_queue, agent)
        await wait_for_status(handle, "waiting")
        accepted = await handle.execute_update(
            "submit_approval",
            {"tool_call_id": "d1", "approved": "no", "reasn": "change freeze"},
        )
        await asyncio.wait_for(handle.result(), 20)
        latest = await handle.query(AgentWorkflow.latest_checkpoint)
    assert accepted["message"] == "tool call 'd1' denied"
    assert log.calls == []
    assert latest is not None
    denial = latest.state.message_history[2].parts[0]
    assert isinstance(denial, ToolReturnPart)
    assert denial.error_kind == "approval_denied"
    assert denial.content == "The call was not approved: denied"


# -- human decisions ---------------------------------------------------------------------------


async def test_approval_for_a_call_that_is_not_pending_is_rejected(
    client: Client, logs: pytest.LogCaptureFixture
) -> None:
    log = CallLog()
    spec = two_deploys_agent(log)
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        handle = await start(client, worker.task_queue, agent)
        before = await wait_for_status(handle, "waiting")
        cause = await rejected_update(
            handle,
            AgentWorkflow.submit_approval,
            ApprovalSignal(tool_call_id="nope", approved=True),
        )
        await handle.signal(
            AgentWorkflow.approval, ApprovalSignal(tool_call_id="nope", approved=True)
        )
        no_task_failed(await signal_processed(handle))
        after = await handle.query(AgentWorkflow.status)
        assert comparable(after, refusals=False) == comparable(before)
        assert refusals(after) == [
            ("nope", "no pending approval for tool call id 'nope'; pending: ['d1', 'd2']", None)
        ]
        await approve_all(handle, "d1", "d2")
        await asyncio.wait_for(handle.result(), 20)
    assert (cause.type, cause.message) == (
        "invalid_approval",
        "no pending approval for tool call id 'nope'; pending: ['d1', 'd2']",
    )
    assert cause.non_retryable
    assert logged(
        logs,
        "approval signal ignored: no pending approval for tool call id 'nope'; "
        "pending: ['d1', 'd2']",
    )
    assert log.counts["deploy"] == 2


async def test_second_decision_for_the_same_call_is_rejected(
    client: Client, logs: pytest.LogCaptureFixture
) -> None:
    log = CallLog()
    spec = two_deploys_agent(log)
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        handle = await start(client, worker.task_queue, agent)
        await wait_for_status(handle, "waiting")
        first = await handle.execute_update(
            AgentWorkflow.submit_approval,
            ApprovalSignal(tool_call_id="d1", approved=False, reason="freeze", decided_by="bob"),
        )
        assert (first.message, first.status) == ("tool call 'd1' denied", "waiting")
        decided = await handle.query(AgentWorkflow.status)
        assert pending(decided) == [("d1", True), ("d2", False)]
        cause = await rejected_update(
            handle,
            AgentWorkflow.submit_approval,
            ApprovalSignal(tool_call_id="d1", approved=True, decided_by="alice"),
        )
        await handle.signal(
            AgentWorkflow.approval, ApprovalSignal(tool_call_id="d1", approved=True)
        )
        no_task_failed(await signal_processed(handle))
        after = await handle.query(AgentWorkflow.status)
        assert comparable(after, refusals=False) == comparable(decided)
        assert refusals(after) == [("d1", "tool call 'd1' was already denied by bob", None)]
        await approve_all(handle, "d2")
        await asyncio.wait_for(handle.result(), 20)
    assert (cause.type, cause.message) == (
        "invalid_approval",
        "tool call 'd1' was already denied by bob",
    )
    assert logged(logs, "approval signal ignored: tool call 'd1' was already denied by bob")
    assert log.calls == [("deploy", {"env": "eu"})]  # d1 stayed denied


async def test_approval_after_the_run_completed_is_refused_by_the_server(client: Client) -> None:
    log = CallLog()
    spec = one_deploy_agent(log)
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        handle = await start(client, worker.task_queue, agent)
        await wait_for_status(handle, "waiting")
        await approve_all(handle, "d1")
        await asyncio.wait_for(handle.result(), 20)
        events = await event_count(handle)
        with pytest.raises(RPCError) as update:
            await handle.execute_update(
                AgentWorkflow.submit_approval, ApprovalSignal(tool_call_id="d1", approved=False)
            )
        with pytest.raises(RPCError) as signal:
            await handle.signal(
                AgentWorkflow.approval, ApprovalSignal(tool_call_id="d1", approved=False)
            )
        assert await event_count(handle) == events
    for error in (update.value, signal.value):
        assert not isinstance(error, WorkflowUpdateFailedError)
        assert error.status == RPCStatusCode.NOT_FOUND
        assert error.message == "workflow execution already completed"
    assert log.calls == [("deploy", {"env": "prod"})]


async def test_resume_of_a_run_that_is_not_suspended_is_rejected(
    client: Client, logs: pytest.LogCaptureFixture
) -> None:
    log = CallLog()
    spec = one_deploy_agent(log)
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        handle = await start(client, worker.task_queue, agent)
        before = await wait_for_status(handle, "waiting")
        cause = await rejected_update(handle, AgentWorkflow.resume_run, ResumeSignal())
        await handle.signal(AgentWorkflow.resume, ResumeSignal())
        no_task_failed(await signal_processed(handle))
        assert comparable(await handle.query(AgentWorkflow.status)) == comparable(before)
        await approve_all(handle, "d1")
        await asyncio.wait_for(handle.result(), 20)
    assert (cause.type, cause.message) == (
        "not_suspended",
        "run is not suspended (status: waiting) (it waits for approvals: send them instead)",
    )
    assert logged(logs, "resume signal ignored: run is waiting, not suspended")
    assert log.calls == [("deploy", {"env": "prod"})]


async def test_duplicate_deferred_result_is_rejected(
    client: Client, logs: pytest.LogCaptureFixture
) -> None:
    log = CallLog()
    spec = deferred_agent(log)
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        handle = await start(client, worker.task_queue, agent)
        await wait_for_status(handle, "waiting")
        first = await handle.execute_update(
            AgentWorkflow.submit_deferred_result,
            DeferredResultSignal(tool_call_id="b1", response={"rows": 3}),
        )
        assert first.message == "result for deferred call 'b1' recorded"
        cause = await rejected_update(
            handle,
            AgentWorkflow.submit_deferred_result,
            DeferredResultSignal(tool_call_id="b1", response={"rows": 999}),
        )
        await handle.signal(
            AgentWorkflow.deferred_result, DeferredResultSignal(tool_call_id="b1", response=0)
        )
        no_task_failed(await signal_processed(handle))
        await handle.execute_update(
            AgentWorkflow.submit_deferred_result,
            DeferredResultSignal(tool_call_id="b2", response="ok"),
        )
        result = await asyncio.wait_for(handle.result(), 20)
        latest = await handle.query(AgentWorkflow.latest_checkpoint)
    assert (cause.type, cause.message) == (
        "invalid_deferred_result",
        "deferred call 'b1' already has a result",
    )
    assert logged(logs, "deferred_result signal ignored: deferred call 'b1' already has a result")
    assert result.output == "all done"
    assert latest is not None
    returns = {
        p.tool_call_id: p.content
        for m in latest.state.message_history
        for p in getattr(m, "parts", [])
        if isinstance(p, ToolReturnPart)
    }
    assert returns == {"b1": {"rows": 3}, "b2": "ok"}  # the first result stands
    assert log.counts["background"] == 2  # each deferred tool ran once, to defer


async def test_deferred_result_for_an_unknown_id_is_rejected(
    client: Client, logs: pytest.LogCaptureFixture
) -> None:
    spec = deferred_agent(CallLog())
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        handle = await start(client, worker.task_queue, agent)
        before = await wait_for_status(handle, "waiting")
        cause = await rejected_update(
            handle,
            AgentWorkflow.submit_deferred_result,
            DeferredResultSignal(tool_call_id="zzz", response="x"),
        )
        await handle.signal(
            AgentWorkflow.deferred_result, DeferredResultSignal(tool_call_id="zzz", response="x")
        )
        no_task_failed(await signal_processed(handle))
        assert comparable(await handle.query(AgentWorkflow.status)) == comparable(before)
        for call_id in ("b1", "b2"):
            await handle.execute_update(
                AgentWorkflow.submit_deferred_result,
                DeferredResultSignal(tool_call_id=call_id, response="ok"),
            )
        await asyncio.wait_for(handle.result(), 20)
    assert (cause.type, cause.message) == (
        "invalid_deferred_result",
        "no deferred call with id 'zzz'; deferred calls: ['b1', 'b2']",
    )
    assert logged(
        logs, "deferred_result signal ignored: no deferred call with id 'zzz'; deferred calls:"
    )


# -- the model's own bad input -----------------------------------------------------------------


async def test_invalid_tool_arguments_go_back_to_the_model_as_a_retry_prompt(
    client: Client,
) -> None:
    log = CallLog()

    def scale(replicas: int) -> str:
        log.record("scale", replicas=replicas)
        return f"scaled to {replicas}"

    agent = unique("bad-args")
    model = TestModel.with_responses(
        [
            tool_response(call("scale", "s1", replicas="many")),
            tool_response(call("scale", "s2", replicas=3)),
            text_response("scaled"),
        ]
    )
    spec = AgentBuilder(model).name(agent).tool(scale).build()
    async with new_worker(client, agents=[spec]) as worker:
        handle = await start(client, worker.task_queue, agent, prompt="scale up")
        result = await asyncio.wait_for(handle.result(), 20)
        latest = await handle.query(AgentWorkflow.latest_checkpoint)
    assert result.status == "completed"
    assert result.output == "scaled"
    assert log.calls == [("scale", {"replicas": 3})]  # the bad call never ran
    assert latest is not None
    retries = [
        p
        for m in latest.state.message_history
        for p in getattr(m, "parts", [])
        if isinstance(p, RetryPromptPart)
    ]
    assert len(retries) == 1
    assert (retries[0].tool_name, retries[0].tool_call_id) == ("scale", "s1")
    assert retries[0].content == (
        'Validation failed: [{"loc": ["replicas"], "msg": "Input should be a valid integer, '
        'unable to parse string as an integer", "type": "int_parsing"}]\n'
        "Fix the errors and try again."
    )
    no_task_failed(await history_types(handle))


# -- the same rows through the CLI -------------------------------------------------------------


@dataclass
class Outcome:
    code: int
    out: str
    err: str


Cli = Callable[..., Awaitable[Outcome]]


@pytest.fixture
def cli(dev_server: DevServer, capsys: pytest.CaptureFixture[str]) -> Iterator[Cli]:
    """`durable-agent ARGS --address <dev server>` in-process; worker logs kept off stdout."""

    async def run(*argv: str) -> Outcome:
        capsys.readouterr()
        code = await amain([*argv, "--address", dev_server.address])
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    with structlog.testing.capture_logs():
        yield run


async def test_cli_run_with_an_empty_prompt_exits_1(client: Client, cli: Cli) -> None:
    log = CallLog()
    spec = one_deploy_agent(log)
    agent = spec.name
    workflow_id = unique("bad-cli")
    async with new_worker(client, agents=[spec]) as worker:
        outcome = await cli(
            "run", agent, "   ", "--wait", "--id", workflow_id, "--task-queue", worker.task_queue
        )
    assert outcome.code == 1
    assert outcome.out.strip() == workflow_id
    assert outcome.err.strip().splitlines()[-1] == (
        f"durable-agent: run {workflow_id} failed: invalid_input: "
        "the prompt is empty; send the task for the agent"
    )
    assert log.calls == []


async def test_cli_second_decision_exits_1(client: Client, cli: Cli) -> None:
    log = CallLog()
    spec = two_deploys_agent(log)
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        handle = await start(client, worker.task_queue, agent)
        await wait_for_status(handle, "waiting")
        approved = await cli("approve", handle.id, "d1", "--by", "alice")
        events = await event_count(handle)
        again = await cli("deny", handle.id, "d1", "--reason", "changed my mind")
        assert await event_count(handle) == events
        await cli("approve", handle.id, "d2")
        await asyncio.wait_for(handle.result(), 20)
    assert approved.code == 0, approved.err
    assert again.code == 1
    assert again.out == ""
    assert (
        again.err.strip() == "durable-agent: rejected: tool call 'd1' was already approved by alice"
    )
    assert log.counts["deploy"] == 2
