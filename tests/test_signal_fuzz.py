"""Random signals and updates against a waiting run never break it (issue 6, item 3).

Hypothesis throws sequences of approvals (signal and update, real or made-up call ids,
approve or deny), deferred results, resumes, suspends and malformed payloads at a run whose
model asks for two approval-required tools at once, then sends valid decisions for whatever
is still pending and resumes it while it is suspended. Every run must finish `completed`
without one failed workflow task, and a tool whose first accepted decision was a denial
must never run (an approved one runs exactly once).

What the workflow accepted is tracked as it happens: an update returns normally when
accepted; a signal cannot answer, so the `status` query after it tells whether the decision
was recorded. Both are also checked against a model of the validators.

Signals without a payload, with a `null` payload or with two payloads have their own test
(`test_signal_without_a_payload_is_dropped` in tests/test_bad_input.py).

One worker serves every example (a module fixture on the session loop; pytest-asyncio runs
each Hypothesis example of an async test in that loop), so the whole test takes ~30 s.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from temporalio.api.enums.v1 import WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from durable_agent import (
    AgentBuilder,
    FunctionModel,
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    TestModel,
    ToolContext,
    ToolReturnPart,
)
from durable_agent.temporal import AgentWorkflow, AgentWorkflowInput, ApprovalSignal, ResumeSignal
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.search_attributes import PENDING_APPROVALS
from durable_agent.temporal.wire import AgentStatusView, DeferredResultSignal, SuspendSignal

from .helpers import CallLog, call, text_response, tool_response
from .temporal_support import connect, event_types, new_worker

SERVER_RETRIES = {WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND}
"""Workflow task failures the server makes, not the workflow: a signal that arrived while
the run was completing makes the server refuse the completion, and the next task delivers
the signal and completes again (a run that ends while a fuzzer signals it meets that)."""


def task_failures(history: Any) -> list[str]:
    """Each WorkflowTaskFailed of the history but the server's retries, cause and message."""
    return [
        f"{WorkflowTaskFailedCause.Name(a.cause)}: {a.failure.message}"
        for e in history.events
        if e.HasField("workflow_task_failed_event_attributes")
        for a in [e.workflow_task_failed_event_attributes]
        if a.cause not in SERVER_RETRIES
    ]


AgentHandle = WorkflowHandle[Any, Any]
CLOSED_MESSAGES = {
    "workflow execution already completed",
    "workflow update was aborted by closing workflow",
}
"""What the server answers a signal or update to a run that closed (or was closing)."""

CALLS = {"c_deploy": "deploy", "c_migrate": "migrate"}
"""The two approval-required calls the model makes, by call id."""

SIGNAL_TYPES: dict[str, type[BaseModel]] = {
    "approval": ApprovalSignal,
    "deferred_result": DeferredResultSignal,
    "resume": ResumeSignal,
    "suspend": SuspendSignal,
}
UPDATE_TYPES: dict[str, type[BaseModel]] = {
    "submit_approval": ApprovalSignal,
    "submit_deferred_result": DeferredResultSignal,
    "resume_run": ResumeSignal,
}


# -- the agent and the worker ------------------------------------------------------------------


@dataclass
class Fuzz:
    client: Client
    task_queue: str
    agent: str
    log: CallLog


def respond(messages: list[ModelMessage], _info: Any) -> ModelResponse:
    """Both tools at once on the first request; text once any result (or denial) is back."""
    answered = any(
        isinstance(part, ToolReturnPart | RetryPromptPart)
        for message in messages
        if message.kind == "request"
        for part in message.parts
    )
    if answered:
        return text_response("done")
    return tool_response(
        call("deploy", "c_deploy", env="prod"), call("migrate", "c_migrate", db="main")
    )


@pytest.fixture(scope="module")
async def fuzz(dev_server: DevServer) -> AsyncIterator[Fuzz]:
    log = CallLog()

    def deploy(ctx: ToolContext, env: str) -> str:
        log.record("deploy", key=ctx.idempotency_key)
        return f"deployed to {env}"

    def migrate(ctx: ToolContext, db: str) -> str:
        log.record("migrate", key=ctx.idempotency_key)
        return f"migrated {db}"

    name = f"fuzz-{uuid.uuid4().hex[:8]}"
    agent = (
        AgentBuilder(FunctionModel(respond))
        .name(name)
        .tools([deploy, migrate])
        .approval_required_tools(["deploy", "migrate"])
        .build()
    )
    client = await connect(dev_server.address)
    async with new_worker(client, agents=[agent]) as worker:
        yield Fuzz(client, worker.task_queue, name, log)


# -- what Hypothesis draws ---------------------------------------------------------------------

real_ids = st.sampled_from(sorted(CALLS))
call_ids = st.one_of(real_ids, real_ids, st.text("abc_12", max_size=6))
values = st.one_of(
    st.booleans(),
    st.integers(-2, 2),
    st.sampled_from(["c_deploy", "c_migrate", "yes", "no", "maybe", "", "error"]),
    st.lists(st.integers(0, 3), max_size=2),
)
payloads = st.one_of(
    st.dictionaries(
        st.sampled_from(["tool_call_id", "approved", "reason", "decided_by", "status", "response"]),
        values,
        max_size=4,
    ),
    st.text(max_size=4),
    st.integers(),
    st.lists(st.integers(0, 3), max_size=2),
)
approvals = st.one_of(
    st.tuples(st.just("approval"), call_ids, st.booleans()),
    st.tuples(st.just("submit_approval"), call_ids, st.booleans()),
)
operations = st.one_of(
    approvals,
    approvals,
    st.tuples(st.just("deferred_result"), call_ids),
    st.tuples(st.just("submit_deferred_result"), call_ids),
    st.tuples(st.just("resume")),
    st.tuples(st.just("resume_run")),
    st.tuples(st.just("suspend"), st.text("xyz ", max_size=4)),
    st.tuples(st.just("raw_signal"), st.sampled_from(sorted(SIGNAL_TYPES)), payloads),
    st.tuples(st.just("raw_update"), st.sampled_from(sorted(UPDATE_TYPES)), payloads),
)


# -- one example -------------------------------------------------------------------------------


def waits_for_humans(view: AgentStatusView) -> bool:
    """Waiting for decisions (not suspended at a boundary): only then does `decided` in
    `pending_approvals` tell what was recorded. Once the run goes on, an approved call stays
    listed with `decided=False` until its tool returns (see
    `test_status_after_the_last_decision_lists_no_undecided_approval`)."""
    return view.status == "waiting" and view.suspend_reason is None


def rejected(cause: BaseException, kind: str) -> None:
    """A rejected update: by its validator (`kind`), or before it when temporalio could not
    decode the payload into the update's type ("undecodable")."""
    assert isinstance(cause, ApplicationError), cause
    if kind == "undecodable":
        assert (cause.type, cause.message) == ("RuntimeError", "Failed decoding arguments")
    else:
        assert cause.type == kind, cause


@dataclass
class Run:
    """One workflow under fuzz and what it accepted so far."""

    fuzz: Fuzz
    handle: AgentHandle
    first_decision: dict[str, bool] = field(default_factory=dict)
    """call id -> approved?, for the first decision the workflow accepted."""
    closed: bool = False

    def decode(self, payload: Any, as_type: type[BaseModel]) -> BaseModel | None:
        """What the worker decodes `payload` into (same converter both ways), or None."""
        converter = self.fuzz.client.data_converter.payload_converter
        try:
            value = converter.from_payload(converter.to_payload(payload), as_type)
        except Exception:
            return None
        assert isinstance(value, as_type)
        return value

    def expects_approval(self, request: ApprovalSignal) -> bool:
        """The validator's rule: a real call id that has no decision yet."""
        return request.tool_call_id in CALLS and request.tool_call_id not in self.first_decision

    # -- sending -------------------------------------------------------------------------------

    def closed_by_server(self, error: RPCError) -> None:
        """Signals and updates to a closed run fail at the server, never in the workflow:
        sent after it closed, or (an update) admitted while it was closing."""
        assert error.status == RPCStatusCode.NOT_FOUND, error
        assert error.message in CLOSED_MESSAGES, error
        self.closed = True

    async def signal(self, name: str, payload: Any) -> bool:
        """False if the run had already closed (the server refuses signals then)."""
        try:
            await self.handle.signal(name, payload)
        except RPCError as error:
            self.closed_by_server(error)
            return False
        return True

    async def update(self, name: str, payload: Any) -> dict[str, Any] | BaseException | None:
        """The accepted update's answer, the rejection's cause, or None if the run had closed."""
        try:
            answer: dict[str, Any] = await self.handle.execute_update(name, payload)
        except WorkflowUpdateFailedError as failed:
            return failed.cause
        except RPCError as error:
            self.closed_by_server(error)
            return None
        assert answer["accepted"] is True
        return answer

    async def status(self) -> AgentStatusView:
        view: AgentStatusView = await self.handle.query(AgentWorkflow.status)
        return view

    # -- operations ----------------------------------------------------------------------------

    async def approval_signal(self, payload: Any, request: ApprovalSignal | None) -> None:
        expected = request is not None and self.expects_approval(request)
        if not await self.signal("approval", payload) or request is None:
            return
        call_id = request.tool_call_id
        if call_id not in CALLS:
            return
        undecided_before = call_id not in self.first_decision
        view = await self.status()
        if waits_for_humans(view):
            decided_now = {p.tool_call_id: p.decided for p in view.pending_approvals}[call_id]
        else:  # the run went on, which it does only once every call has a decision
            decided_now = True
        recorded = undecided_before and decided_now
        assert recorded == expected, (request, self.first_decision, view)
        if recorded:
            self.first_decision[call_id] = request.approved

    async def approval_update(self, payload: Any, request: ApprovalSignal | None) -> None:
        outcome = await self.update("submit_approval", payload)
        if outcome is None:
            return
        if request is None:
            rejected(outcome, "undecodable")
            return
        accepted = isinstance(outcome, dict)
        assert accepted == self.expects_approval(request), (request, outcome, self.first_decision)
        if isinstance(outcome, dict):
            verdict = "approved" if request.approved else "denied"
            assert outcome["message"] == f"tool call {request.tool_call_id!r} {verdict}"
            self.first_decision[request.tool_call_id] = request.approved
        else:
            rejected(outcome, "invalid_approval")

    async def deferred_update(self, payload: Any, request: BaseModel | None) -> None:
        """This agent defers nothing: every deferred result is refused."""
        outcome = await self.update("submit_deferred_result", payload)
        if outcome is not None:
            rejected(outcome, "invalid_deferred_result" if request else "undecodable")

    async def resume_update(self, payload: Any, request: BaseModel | None) -> None:
        """Accepted only while suspended, which depends on timing: not predicted."""
        outcome = await self.update("resume_run", payload)
        if isinstance(outcome, dict):
            assert request is not None
            assert outcome["message"] == "run resumed"
        elif outcome is not None:
            rejected(outcome, "not_suspended" if request else "undecodable")

    async def apply(self, operation: tuple[Any, ...]) -> None:
        kind, *rest = operation
        if kind == "approval":
            request = ApprovalSignal(tool_call_id=rest[0], approved=rest[1], reason="fuzz")
            await self.approval_signal(request, request)
        elif kind == "submit_approval":
            request = ApprovalSignal(tool_call_id=rest[0], approved=rest[1], reason="fuzz")
            await self.approval_update(request, request)
        elif kind == "deferred_result":
            await self.signal("deferred_result", DeferredResultSignal(tool_call_id=rest[0]))
        elif kind == "submit_deferred_result":
            request = DeferredResultSignal(tool_call_id=rest[0])
            await self.deferred_update(request, request)
        elif kind == "resume":
            await self.signal("resume", ResumeSignal())
        elif kind == "resume_run":
            await self.resume_update(ResumeSignal(), ResumeSignal())
        elif kind == "suspend":
            await self.signal("suspend", SuspendSignal(reason=rest[0] or "fuzz"))
        elif kind == "raw_signal":
            name, payload = rest
            decoded = self.decode(payload, SIGNAL_TYPES[name])
            if name == "approval":
                assert decoded is None or isinstance(decoded, ApprovalSignal)
                await self.approval_signal(payload, decoded)
            else:
                await self.signal(name, payload)
        elif kind == "raw_update":
            name, payload = rest
            decoded = self.decode(payload, UPDATE_TYPES[name])
            if name == "submit_approval":
                assert decoded is None or isinstance(decoded, ApprovalSignal)
                await self.approval_update(payload, decoded)
            elif name == "submit_deferred_result":
                await self.deferred_update(payload, decoded)
            else:
                await self.resume_update(payload, decoded)
        else:  # pragma: no cover
            raise AssertionError(operation)

    async def finish(self, timeout: float = 30) -> Any:
        """Valid decisions for whatever is pending (approve), resume while suspended."""
        deadline = asyncio.get_running_loop().time() + timeout
        while not self.closed:
            view = await self.status()
            if view.status in ("completed", "failed"):
                break
            if view.suspend_reason is not None:
                event("finish: resumed a suspended run")
                request = ResumeSignal(reason="fuzz finish")
                await self.resume_update(request, request)
            for pending in view.pending_approvals if waits_for_humans(view) else []:
                if not pending.decided:
                    request = ApprovalSignal(tool_call_id=pending.tool_call_id, approved=True)
                    await self.approval_update(request, request)
            assert asyncio.get_running_loop().time() < deadline, view
            await asyncio.sleep(0.05)
        return await asyncio.wait_for(self.handle.result(), timeout)


@settings(
    max_examples=15,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(sequence=st.lists(operations, min_size=2, max_size=12))
@example(  # deny by signal, try to overturn it both ways, then decide the other: the run ends
    sequence=[
        ("approval", "c_deploy", False),
        ("submit_approval", "c_deploy", True),
        ("raw_signal", "approval", {"tool_call_id": "c_deploy", "approved": "yes"}),
        ("approval", "c_migrate", True),
        ("submit_approval", "c_migrate", False),
        ("resume_run",),
        ("suspend", "late"),
    ]
)
@example(  # pause first, bad payloads and wrong ids while waiting, deny both by update
    sequence=[
        ("suspend", "look first"),
        ("resume_run",),
        ("raw_update", "submit_approval", {"tool_call_id": 5, "approved": True}),
        ("raw_signal", "approval", {"approved": "maybe"}),
        ("submit_deferred_result", "c_deploy"),
        ("approval", "nope", True),
        ("submit_approval", "c_migrate", False),
        ("raw_update", "submit_approval", {"tool_call_id": "c_deploy", "approved": "no"}),
        ("approval", "c_deploy", True),
    ]
)
async def test_random_signals_and_updates_never_break_a_waiting_run(
    fuzz: Fuzz, sequence: list[tuple[Any, ...]]
) -> None:
    workflow_id = f"fuzz-{uuid.uuid4().hex[:12]}"
    handle = await fuzz.client.start_workflow(
        AgentWorkflow.run,
        AgentWorkflowInput(agent=fuzz.agent, prompt="deploy and migrate"),
        id=workflow_id,
        task_queue=fuzz.task_queue,
    )
    run = Run(fuzz, handle)
    deadline = asyncio.get_running_loop().time() + 20
    while sorted(p.tool_call_id for p in (await run.status()).pending_approvals) != sorted(CALLS):
        assert asyncio.get_running_loop().time() < deadline, "the run never asked for approvals"
        await asyncio.sleep(0.05)

    for operation in sequence:
        await run.apply(operation)
    decided_by_sequence = dict(run.first_decision)
    result = await run.finish()
    for call_id in CALLS:
        verdict = {True: "approved", False: "denied", None: "undecided"}
        event(f"{call_id} after the sequence: {verdict[decided_by_sequence.get(call_id)]}")
    if run.closed:
        event("the run closed during the sequence")

    assert result.status == "completed"
    assert result.output == "done"
    history = await handle.fetch_history()
    assert event_types(history)[-1] == "WORKFLOW_EXECUTION_COMPLETED"
    assert task_failures(history) == [], "the workflow's own code failed a workflow task"
    assert set(run.first_decision) == set(CALLS)
    ran = [name for name, args in fuzz.log.calls if args["key"].startswith(f"{workflow_id}:")]
    latest = await handle.query(AgentWorkflow.latest_checkpoint)
    returns = {
        p.tool_call_id: p
        for m in latest.state.message_history
        for p in getattr(m, "parts", [])
        if isinstance(p, ToolReturnPart)
    }
    for call_id, approved in run.first_decision.items():
        tool = CALLS[call_id]
        if approved:
            assert ran.count(tool) == 1, (call_id, ran, sequence)
            assert returns[call_id].error_kind is None
        else:
            assert tool not in ran, (call_id, ran, sequence)
            assert returns[call_id].error_kind == "approval_denied"


# -- found by the fuzz -------------------------------------------------------------------------


async def test_status_after_the_last_decision_lists_no_undecided_approval(
    dev_server: DevServer,
) -> None:
    release = asyncio.Event()
    log = CallLog()

    async def deploy(env: str) -> str:
        log.record("deploy", env=env)
        await release.wait()
        return f"deployed to {env}"

    name = f"slow-deploy-{uuid.uuid4().hex[:8]}"
    model = TestModel.with_responses(
        [tool_response(call("deploy", "d1", env="prod")), text_response("finished")]
    )
    agent = AgentBuilder(model).name(name).tool(deploy).approval_required_tools(["deploy"]).build()
    client = await connect(dev_server.address)
    async with new_worker(client, agents=[agent]) as worker:
        handle = await client.start_workflow(
            AgentWorkflow.run,
            AgentWorkflowInput(agent=name, prompt="ship"),
            id=f"slow-{uuid.uuid4().hex[:8]}",
            task_queue=worker.task_queue,
        )
        try:
            deadline = asyncio.get_running_loop().time() + 20
            while (await handle.query(AgentWorkflow.status)).status != "waiting":
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.05)
            accepted = await handle.execute_update(
                AgentWorkflow.submit_approval, ApprovalSignal(tool_call_id="d1", approved=True)
            )
            assert accepted.status == "running"
            while not log.calls:  # the tool is running now, and waits for `release`
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.05)
            view = await handle.query(AgentWorkflow.status)
            attributes = (await handle.describe()).typed_search_attributes
            assert view.status == "running"
            assert [p.tool_call_id for p in view.pending_approvals if not p.decided] == []
            assert attributes.get(PENDING_APPROVALS) == 0
        finally:
            release.set()
            await asyncio.wait_for(handle.result(), 20)
