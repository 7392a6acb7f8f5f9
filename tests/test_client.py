"""`AgentClient` / `AgentRunHandle` against the real dev server."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError

from durable_agent import AgentBuilder, CallDeferred, TestModel
from durable_agent.engine.spec import AgentSpec
from durable_agent.temporal import (
    DEFAULT_TASK_QUEUE,
    AgentClient,
    AgentWorkflow,
    ApprovalSignal,
)
from durable_agent.temporal.client import (
    DEFAULT_TASK_QUEUE as CLIENT_DEFAULT_TASK_QUEUE,
)
from durable_agent.temporal.client import (
    AgentRunError,
    AlreadyStarted,
    CannotConnect,
    NotAnAgentRun,
    NoWorker,
    Rejected,
    RunClosed,
    RunFailed,
    RunNotFound,
)
from durable_agent.temporal.devserver import DevServer

from .helpers import CallLog, call, text_response, tool_response
from .temporal_support import deploy_agent as shared_deploy_agent
from .temporal_support import new_worker, start_agent, unique, wait_for_status
from .temporal_support import text_agent as shared_text_agent

TEXT_RUN_NODES = [
    "run_start",
    "prepare_model_request",
    "before_model_request",
    "model_response",
    "validate_output",
    "run_complete",
]


@workflow.defn(name="NotAnAgent")
class NotAnAgent:
    """Any other workflow type: it waits, and would accept whatever it is sent."""

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: False)
        return "never"


def text_agent(text: str) -> AgentSpec:
    return shared_text_agent(text, "client-text")


def deploy_agent(log: CallLog) -> AgentSpec:
    return shared_deploy_agent(log, "client-deploy")


async def wait_for(handle: object, status: str, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while (view := await handle.status()).status != status:  # type: ignore[attr-defined]
        assert asyncio.get_running_loop().time() < deadline, view
        await asyncio.sleep(0.1)


def test_default_task_queue_is_the_packages() -> None:
    assert CLIENT_DEFAULT_TASK_QUEUE == DEFAULT_TASK_QUEUE


async def test_start_status_approve_result(client: Client) -> None:
    log = CallLog()
    spec = deploy_agent(log)
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        handle = await agents.start(agent, "ship it")
        await wait_for(handle, "waiting")
        view = await handle.status()
        with pytest.raises(Rejected) as wrong:
            await handle.approve("nope")
        accepted = await handle.approve("d1", by="alice", override_arguments={"env": "staging"})
        result = await handle.result()
        again = agents.get(handle.id)
        with pytest.raises(RunClosed) as late:
            await again.approve("d1")
    assert handle.id.startswith(f"agent-{agent}-")
    assert [(p.tool_call_id, p.tool_name, p.arguments) for p in view.pending_approvals] == [
        ("d1", "deploy", {"env": "prod"})
    ]
    assert wrong.value.type == "invalid_approval"
    assert wrong.value.message == "no pending approval for tool call id 'nope'; pending: ['d1']"
    assert wrong.value.workflow_id == handle.id
    assert (accepted.message, accepted.status) == ("tool call 'd1' approved", "running")
    assert result.output == "finished"
    assert log.calls == [("deploy", {"env": "staging"})]
    assert late.value.execution_status == "completed"
    assert str(late.value) == f"workflow {handle.id!r} is completed; it no longer accepts approval"


async def test_deny_and_a_second_decision(client: Client) -> None:
    log = CallLog()
    spec = deploy_agent(log)
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        handle = await agents.start(agent, "ship it", workflow_id=unique("wf"))
        await wait_for(handle, "waiting")
        denied = await handle.deny("d1", "change freeze", by="bob")
        with pytest.raises(Rejected) as twice:
            await handle.approve("d1")
        result = await handle.result()
    assert denied.message == "tool call 'd1' denied"
    assert twice.value.message == "tool call 'd1' was already denied by bob"
    assert result.output == "finished"
    assert log.calls == []


async def test_deferred_result(client: Client) -> None:
    def background(job: str) -> str:
        raise CallDeferred("runs elsewhere")

    agent = unique("client-deferred")
    model = TestModel.with_responses(
        [tool_response(call("background", "b1", job="x")), text_response("all done")]
    )
    spec = AgentBuilder(model).name(agent).tool(background).build()
    async with new_worker(client, agents=[spec]) as worker:
        handle = await AgentClient(client, task_queue=worker.task_queue).start(agent, "go")
        await wait_for(handle, "waiting")
        view = await handle.status()
        with pytest.raises(Rejected) as wrong:
            await handle.deferred("zzz", "x")
        recorded = await handle.deferred("b1", {"rows": 3})
        result = await handle.result()
    assert [d.tool_call_id for d in view.deferred_calls] == ["b1"]
    assert wrong.value.type == "invalid_deferred_result"
    assert recorded.message == "result for deferred call 'b1' recorded"
    assert result.output == "all done"


async def test_suspend_at_resume_and_checkpoints(client: Client) -> None:
    spec = text_agent("resumed fine")
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        handle = await agents.start(agent, "hi", suspend_at=["before_model_request"])
        await wait_for(handle, "waiting")
        view = await handle.status()
        resumed = await handle.resume("looks good")
        result = await handle.result()
        evidence = await handle.checkpoints()
        with pytest.raises(RunClosed):
            await handle.resume()
    assert (view.node, view.suspend_reason) == (
        "before_model_request",
        "suspend_at before_model_request",
    )
    assert resumed.message == "run resumed"
    assert result.output == "resumed fine"
    assert [item.node.value for item in evidence] == TEXT_RUN_NODES


async def test_resume_of_a_run_that_is_not_suspended_is_rejected(client: Client) -> None:
    spec = deploy_agent(CallLog())
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        handle = await AgentClient(client, task_queue=worker.task_queue).start(agent, "ship")
        await wait_for(handle, "waiting")
        with pytest.raises(Rejected) as rejected:
            await handle.resume()
        await handle.suspend("hold on")
        await handle.approve("d1")
        deadline = asyncio.get_running_loop().time() + 20
        while (view := await handle.status()).suspend_reason is None:
            assert asyncio.get_running_loop().time() < deadline, view
            await asyncio.sleep(0.1)
        await handle.resume()
        result = await handle.result()
    assert rejected.value.type == "not_suspended"
    assert "run is not suspended (status: waiting)" in rejected.value.message
    assert view.suspend_reason == "hold on"
    assert result.output == "finished"


async def test_cancel_then_result_raises_run_failed(client: Client) -> None:
    spec = deploy_agent(CallLog())
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        handle = await AgentClient(client, task_queue=worker.task_queue).start(agent, "ship")
        await wait_for(handle, "waiting")
        await handle.cancel()
        with pytest.raises(RunFailed) as failed:
            await handle.result()
    assert failed.value.failure.startswith("cancelled")
    assert str(failed.value).startswith(f"run {handle.id} failed: cancelled")


async def test_a_failed_run_raises_run_failed(client: Client) -> None:
    async with new_worker(client) as worker:
        handle = await AgentClient(client, task_queue=worker.task_queue).start("no-such", "hi")
        with pytest.raises(RunFailed) as failed:
            await handle.result()
    assert failed.value.failure.startswith("unknown_agent: no agent named 'no-such'")


async def test_start_refuses_an_unknown_field_and_a_running_id(client: Client) -> None:
    agents = AgentClient(client, task_queue=unique("no-worker"))
    with pytest.raises(TypeError, match=r"unknown AgentWorkflowInput field.*'suspend_a'"):
        await agents.start("a", "b", suspend_a=["run_start"])
    handle = await agents.start("a", "b", workflow_id=unique("wf"))
    with pytest.raises(AlreadyStarted, match=f"{handle.id!r} is already running"):
        await agents.start("a", "b", workflow_id=handle.id)
    await client.get_workflow_handle(handle.id).terminate("test cleanup")


async def test_list_finds_a_waiting_run(client: Client) -> None:
    spec = deploy_agent(CallLog())
    agent = spec.name
    async with new_worker(client, agents=[spec]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        handle = await agents.start(agent, "ship")
        await wait_for(handle, "waiting")
        deadline = asyncio.get_running_loop().time() + 10  # visibility lags behind
        while True:
            runs = [r async for r in agents.list(status="waiting", agent=agent)]
            if runs and runs[0].pending_approvals == 1:
                break
            assert asyncio.get_running_loop().time() < deadline, runs
            await asyncio.sleep(0.3)
        completed = [r async for r in agents.list(status="completed", agent=agent)]
        everything = [r async for r in agents.list(agent=agent, limit=5)]
        await handle.deny("d1", "cleanup")
        await handle.result()
    assert [(r.workflow_id, r.agent, r.status, r.execution_status) for r in runs] == [
        (handle.id, agent, "waiting", "running")
    ]
    assert completed == []
    assert [r.workflow_id for r in everything] == [handle.id]
    with pytest.raises(ValueError, match="unknown run status 'bogus'"):
        [r async for r in agents.list(status="bogus")]


async def test_unknown_workflow_raises_run_not_found(client: Client) -> None:
    handle = AgentClient(client).get(unique("no-such"))
    for action in (handle.status, handle.result, lambda: handle.approve("d1")):
        with pytest.raises(RunNotFound, match="in namespace 'default'"):
            await action()


async def test_not_an_agent_run_is_refused_before_anything_is_sent(client: Client) -> None:
    async with new_worker(client, workflows=[NotAnAgent]) as worker:
        other = await client.start_workflow(
            NotAnAgent.run, id=unique("other"), task_queue=worker.task_queue
        )
        handle = AgentClient(client, timeout=30).get(other.id)
        actions = {
            "approve": lambda: handle.approve("d1"),
            "deny": lambda: handle.deny("d1", "no"),
            "deferred": lambda: handle.deferred("d1", 1),
            "resume": handle.resume,
            "suspend": lambda: handle.suspend("wait"),
            "status": handle.status,
            "checkpoints": handle.checkpoints,
            "result": handle.result,
            "cancel": handle.cancel,
        }
        errors = {}
        started = asyncio.get_running_loop().time()
        for name, action in actions.items():
            with pytest.raises(NotAnAgentRun) as refused:
                await action()
            errors[name] = refused.value
        elapsed = asyncio.get_running_loop().time() - started
        history = await other.fetch_history()
        await other.terminate("test cleanup")
    assert elapsed < 10  # refused at once, not after a timeout
    message = f"workflow {other.id!r} is not an agent run: its type is 'NotAnAgent'"
    assert all(str(error).startswith(message) for error in errors.values()), errors
    assert all(error.workflow_type == "NotAnAgent" for error in errors.values())
    signalled = [
        e for e in history.events if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    assert signalled == []


async def test_no_worker_raises_no_worker_naming_the_task_queue(client: Client) -> None:
    queue = unique("no-worker")
    agents = AgentClient(client, task_queue=queue, timeout=1)
    handle = await agents.start("nobody", "hi")
    with pytest.raises(NoWorker) as status:
        await handle.status()
    with pytest.raises(NoWorker):
        await handle.approve("d1")
    await client.get_workflow_handle(handle.id).terminate("test cleanup")
    assert f"no worker answered the status query for {handle.id!r} within 1s" in str(status.value)
    assert f"task queue {queue!r}" in str(status.value)


async def test_too_many_updates_in_flight_are_retried(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """The server takes ~10 updates in flight per workflow; the next is refused with
    RESOURCE_EXHAUSTED (after the SDK's own retries). The client retries until a worker
    drains them, and then gets the validator's answer."""
    spec = deploy_agent(CallLog())
    agent = spec.name
    queue = unique("busy")
    agents = AgentClient(client, task_queue=queue, timeout=60)
    handle = await agents.start(agent, "ship")
    raw = client.get_workflow_handle_for(AgentWorkflow.run, handle.id)
    stuck = [
        asyncio.create_task(
            raw.execute_update(
                AgentWorkflow.submit_approval,
                ApprovalSignal(tool_call_id=f"c{i}", approved=True),
                rpc_timeout=timedelta(seconds=90),
            )
        )
        for i in range(10)
    ]
    caplog.set_level(logging.WARNING, logger="durable_agent.client")
    await asyncio.sleep(1)
    approval = asyncio.create_task(handle.approve("nope"))
    deadline = asyncio.get_running_loop().time() + 60
    while "the server refused the approval" not in caplog.text:
        assert not approval.done(), approval
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.2)
    async with new_worker(client, task_queue=queue, agents=[spec]):
        with pytest.raises(Rejected) as rejected:
            await asyncio.wait_for(approval, 30)
        await asyncio.gather(*stuck, return_exceptions=True)
    await raw.terminate("test cleanup")
    assert "in-flight updates" in caplog.text
    assert rejected.value.type == "invalid_approval"


async def test_connect_reads_the_environment(
    dev_server: DevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", dev_server.address)
    monkeypatch.setenv("TEMPORAL_TASK_QUEUE", "from-env")
    agents = await AgentClient.connect()
    assert (agents.namespace, agents.task_queue) == ("default", "from-env")
    with pytest.raises(
        CannotConnect, match=r"cannot connect to the Temporal server at 127\.0\.0\.1:1"
    ):
        await AgentClient.connect("127.0.0.1:1", timeout=5)
    monkeypatch.setenv("DURABLE_AGENT_ENCRYPTION_KEYS", "not a key")
    with pytest.raises(AgentRunError):
        await AgentClient.connect()


# -- runs ended from outside: cancelled, terminated -----------------------------------------


async def test_cancel_clears_the_waiting_search_attributes(client: Client) -> None:
    name = unique("cancel")
    model = TestModel.with_responses([tool_response(call("scale", "c1", replicas=1))])

    def scale(replicas: int) -> str:
        return str(replicas)

    agent = AgentBuilder(model).name(name).tool(scale).approval_required_tools(["scale"]).build()
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, "go")
        await wait_for_status(handle, "waiting")
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 20)
        description = await handle.describe()
    attributes = description.typed_search_attributes
    values = {pair.key.name: pair.value for pair in attributes}
    assert values["AgentStatus"] == "cancelled"
    assert values["PendingApprovals"] == 0


async def test_status_of_a_terminated_run_reports_its_real_end(client: Client) -> None:
    """Terminate cannot run workflow code, so the run's own state still says waiting."""
    name = unique("terminate")
    model = TestModel.with_responses([tool_response(call("scale", "c1", replicas=1))])

    def scale(replicas: int) -> str:
        return str(replicas)

    agent = AgentBuilder(model).name(name).tool(scale).approval_required_tools(["scale"]).build()
    async with new_worker(client, agents=[agent]) as worker:
        agents = AgentClient(client, task_queue=worker.task_queue)
        run = await agents.start(name, "go")
        await wait_for_status(run.handle, "waiting")
        await run.handle.terminate("ops cleanup")
        raw = await run.handle.query(AgentWorkflow.status)
        view = await run.status()
        listed = [r.workflow_id async for r in agents.list(status="waiting", agent=name)]
    assert raw.status == "waiting", "the workflow's own view cannot know"
    assert view.status == "failed"
    assert view.error == "terminated: the workflow was terminated"
    assert view.pending_approvals == []
    assert listed == []
