"""Sub-agents (#27): a lead delegating to specialists, in-process and as child workflows.

The same scenario runs on both drivers and gives the same messages and usage; on Temporal
each call is one child `AgentWorkflow`, and a child waiting for a human makes its parent
wait, with the child's call in the parent's pending approvals.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Replayer

from durable_agent import AgentBuilder, TestModel, ToolApprovalDecision, ToolCallPart, UserError
from durable_agent.engine.subagents import MAX_SUBAGENT_DEPTH
from durable_agent.temporal import AgentWorkflow, AgentWorkflowInput
from durable_agent.temporal.client import AgentClient, Rejected
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.plugin import DurableAgentPlugin, PluginConfigurationError
from durable_agent.temporal.registry import AgentRegistry
from durable_agent.temporal.search_attributes import PENDING_APPROVALS
from durable_agent.temporal.worker import WorkerStartError, register_module

from . import subagent_agents as agents
from .cli_support import Cli, cli_runner
from .helpers import RecordingExecutor, normalized
from .temporal_support import new_worker, start_worker_process, unique

ROOT = Path(__file__).resolve().parents[1]


def hosted() -> list[Any]:
    """What `--agents tests.subagent_agents` gives a worker: the module's AGENTS."""
    return list(agents.AGENTS)


# -- in-process ------------------------------------------------------------------------------


async def test_the_sub_agents_output_is_the_tool_result_and_usage_adds_up() -> None:
    executor = RecordingExecutor()
    result = await agents.checker.with_executor(executor).run("check the tides")

    assert result.status.value == "completed"
    returns = {p.tool_call_id: p for p in result.messages[2].parts}  # type: ignore[union-attr]
    assert returns["k2"].content == {"topic": "tides", "confidence": 0.9}
    assert not returns["k2"].is_error
    # A failing sub-agent is the parent's model's business: an error it reads.
    assert returns["k1"].is_error
    assert returns["k1"].error_kind == "subagent_failed"
    assert "usage_limit_exceeded" in returns["k1"].content
    # The parent's own two requests, plus the analyst's one.
    assert result.usage.requests == 3
    own = sum(m.usage.requests for m in result.messages if m.kind == "response")
    assert own == 2


async def test_checkpoints_of_a_sub_agent_go_to_the_parents_executor_naming_the_call() -> None:
    executor = RecordingExecutor()
    result = await agents.checker.with_executor(executor).run("check")
    parent_run = result.state.run_id
    children = [c for c in executor.checkpoints if c.metadata.parent_tool_call_id]
    assert {c.metadata.parent_tool_call_id for c in children} == {"k1", "k2"}
    assert {c.metadata.parent_run_id for c in children} == {parent_run}
    assert all(c.run_id != parent_run for c in children)
    own = [c for c in executor.checkpoints if c.run_id == parent_run]
    assert all(c.metadata.parent_run_id is None for c in own)
    assert "parent_run_id" not in own[0].model_dump(mode="json")["metadata"]


async def test_a_sub_agent_needing_approval_can_be_approved_as_a_tool() -> None:
    lead = (
        AgentBuilder(TestModel.with_responses(agents.lead_script()))
        .name("lead-approving")
        .subagent(agents.researcher)
        .subagent(agents.analyst, name="analyse", description="Analyse a topic.")
        .approval_required_tools(["researcher"])
        .build()
    )
    params = lead.request_parameters()
    tools = {t.name: t for t in params.function_tools}
    assert tools["analyse"].description == "Analyse a topic."
    assert tools["researcher"].parameters_json_schema["required"] == ["prompt"]
    assert tools["researcher"].description.startswith("Research the topic")
    first = await lead.run("go")
    assert first.status.value == "waiting"
    assert [a.tool_name for a in first.pending_approvals] == ["researcher"]
    done = await lead.resume_after_hitl(first.state, approvals={"c1": True})
    assert done.status.value == "completed"
    assert done.usage.requests == 4  # two of the lead's, two of the researcher's


async def test_bad_sub_agent_arguments_and_configuration() -> None:
    with pytest.raises(UserError, match="name of another tool"):
        AgentBuilder(TestModel.with_text("x")).subagent(agents.researcher).subagent(
            agents.researcher
        ).build()
    with pytest.raises(UserError, match="built Agent"):
        AgentBuilder(TestModel.with_text("x")).subagent("researcher")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="timeout_seconds"):
        AgentBuilder(TestModel.with_text("x")).subagent(agents.researcher, timeout_seconds=0)
    lead = (
        AgentBuilder(TestModel.with_responses(agents.bad_arguments_script()))
        .name("lead-bad")
        .subagent(agents.researcher)
        .build()
    )
    result = await lead.run("go")
    tool_return = result.messages[2].parts[0]  # type: ignore[union-attr]
    assert tool_return.is_error
    assert "prompt" in tool_return.content


@pytest.mark.server
async def test_registering_a_parent_registers_its_sub_agents() -> None:
    target = AgentRegistry()
    leads = ["lead", "checker", "impatient", "delegator", "patient", "twins"]
    assert register_module(target, "tests.subagent_agents") == leads
    assert set(target.names()) == {
        *leads,
        *("researcher", "writer", "flaky", "analyst", "sleeper", "editor"),
    }
    register_module(target, "tests.subagent_agents")  # the same objects again: harmless

    impostor = AgentBuilder(TestModel.with_text("x")).name("researcher").build()
    clash = AgentBuilder(TestModel.with_text("x")).name("clash").subagent(impostor).build()
    module = types.ModuleType("tests._clashing_agents")
    module.AGENTS = [agents.lead, clash]  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        with pytest.raises(WorkerStartError, match="'researcher'"):
            register_module(AgentRegistry(), module.__name__)
    finally:
        del sys.modules[module.__name__]
    with pytest.raises(PluginConfigurationError, match="'researcher'"):
        Replayer(workflows=[], plugins=[DurableAgentPlugin(agents=[agents.lead, clash])])


# -- on Temporal -------------------------------------------------------------------------------


async def _status_until(handle: Any, done: Any, timeout: float = 30) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        view = await handle.query(AgentWorkflow.status)
        if done(view):
            return view
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"the status never got there: {view}")
        await asyncio.sleep(0.1)


async def _listed_ids(cli: Cli, *argv: str) -> list[str]:
    """`durable-agent list --status waiting` ids (retried a while when empty: visibility
    lags the runs)."""
    ids: list[str] = []
    for _ in range(25):
        outcome = await cli("list", "--json", "--status", "waiting", *argv)
        ids = [run["workflow_id"] for run in outcome.json()] if outcome.out.strip() else []
        if ids:
            break
        await asyncio.sleep(0.2)
    return ids


def _child_starts(history: Any) -> list[str]:
    return [
        e.start_child_workflow_execution_initiated_event_attributes.workflow_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
    ]


async def test_on_temporal_each_call_is_one_child_and_the_result_matches_in_process(
    client: Client,
) -> None:
    in_process = await agents.checker.run("check the tides")
    async with new_worker(client, agents=hosted()) as worker:
        handle = await client.start_workflow(
            AgentWorkflow.run,
            AgentWorkflowInput(agent="checker", prompt="check the tides"),
            id=unique("checker"),
            task_queue=worker.task_queue,
        )
        result = await asyncio.wait_for(handle.result(), 60)
        status = await handle.query(AgentWorkflow.status)
        history = await handle.fetch_history()
    assert result.status == "completed"
    assert result.usage == in_process.usage
    assert result.output == in_process.output
    children = _child_starts(history)
    assert len(children) == 2
    assert len(set(children)) == 2
    assert all(c.startswith(handle.id + "--") for c in children)
    views = {v.tool_call_id: v for v in status.subagents}
    assert views["k1"].agent == "flaky"
    assert views["k1"].status == "failed"
    assert views["k2"].agent == "analyst"
    assert views["k2"].status == "completed"
    assert views["k2"].workflow_id in children
    assert status.usage == in_process.usage


async def test_a_child_waiting_for_approval_makes_the_parent_wait_and_approve_routes_there(
    client: Client,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    dev_server: DevServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli = cli_runner(dev_server.address, capsys)
    monkeypatch.setenv("DA_TEST_DIR", str(tmp_path))
    async with new_worker(client, agents=hosted()) as worker:
        agents_client = AgentClient(client, task_queue=worker.task_queue)
        run = await agents_client.start("lead", "research tides", workflow_id=unique("lead"))
        view = await _status_until(
            run.handle,
            lambda v: (
                v.status == "waiting"
                and {s.agent: s.status for s in v.subagents}.get("researcher") == "completed"
            ),
        )
        assert [(p.tool_call_id, p.tool_name, p.agent) for p in view.pending_approvals] == [
            ("p1", "publish", "writer")
        ]
        holder = view.pending_approvals[0].workflow_id
        writer_view = {v.agent: v for v in view.subagents}["writer"]
        assert holder == writer_view.workflow_id != run.id
        assert writer_view.status == "waiting"
        description = await run.handle.describe()
        assert description.typed_search_attributes.get(PENDING_APPROVALS) == 1
        shown = await cli("status", run.id)
        assert shown.code == 0, shown.err
        assert "sub-agents (2):" in shown.out
        assert re.search(r"c2\s+writer\s+waiting", shown.out), shown.out
        assert re.search(r"c1\s+researcher\s+completed", shown.out), shown.out
        assert f"[sub-agent writer, {holder}]" in shown.out
        as_json = (await cli("status", run.id, "--json")).json()
        assert as_json["subagents"][holder]["status"] == "waiting"
        # Once visibility lists the child (with --all), the default list leaves it out.
        assert holder in await _listed_ids(cli, "--agent", "writer", "--all")
        assert await _listed_ids(cli, "--agent", "writer") == []
        assert run.id in await _listed_ids(cli, "--agent", "lead")
        # The parent cannot take the update; its handle follows it to the child.
        accepted = await run.approve("p1", by="alice")
        assert accepted.accepted
        result = await asyncio.wait_for(run.result(), 60)
    assert result.status == "completed"
    runs = (tmp_path / "tool_runs").read_text().splitlines()
    assert sorted(runs) == ["publish", "search"]
    # The lead's two requests, the researcher's two and the writer's two.
    assert result.usage.requests == 6
    assert result.usage.tool_calls == 4


# -- worker processes: a crash while a child waits, cancellation, forks ----------------------


def _start_worker(
    server: DevServer, task_queue: str, test_dir: Path, log: Path
) -> subprocess.Popen[bytes]:
    return start_worker_process(
        server.address, task_queue, test_dir, log, agents="tests.subagent_agents"
    )


async def _child_history_starts(client: Client, workflow_id: str) -> list[str]:
    return _child_starts(await client.get_workflow_handle(workflow_id).fetch_history())


async def test_a_worker_killed_while_a_child_waits_loses_nothing_and_starts_no_second_child(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    task_queue = unique("subagents")
    agents_client = AgentClient(client, task_queue=task_queue)
    first = _start_worker(dev_server, task_queue, tmp_path, tmp_path / "worker1.log")
    second: subprocess.Popen[bytes] | None = None
    try:
        direct = await agents_client.start("lead", "tides, approved at the child")
        routed = await agents_client.start("lead", "tides, approved at the parent")
        holders = {}
        for run in (direct, routed):
            view = await _status_until(run.handle, lambda v: v.status == "waiting", timeout=60)
            holders[run.id] = view.pending_approvals[0].workflow_id
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        second = _start_worker(dev_server, task_queue, tmp_path, tmp_path / "worker2.log")
        for holder in holders.values():  # the new worker answers for the waiting children
            await _status_until(
                client.get_workflow_handle(holder), lambda v: v.status == "waiting", timeout=60
            )

        # Once to the child itself, once (another run) through the parent's handle.
        await agents_client.get(holders[direct.id]).approve("p1", by="alice")
        await routed.approve("p1", by="bob")
        results = [await asyncio.wait_for(r.result(), 90) for r in (direct, routed)]
        for run, result in zip((direct, routed), results, strict=True):
            assert result.status == "completed"
            assert result.usage.requests == 6
            children = await _child_history_starts(client, run.id)
            assert len(children) == 2  # one child per call, whatever the crash
            assert holders[run.id] in children
        runs = sorted((tmp_path / "tool_runs").read_text().splitlines())
        assert runs == ["publish", "publish", "search", "search"]  # each exactly once per run
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(10)


async def test_cancelling_the_parent_cancels_its_children(client: Client) -> None:
    async with new_worker(client, agents=hosted()) as worker:
        agents_client = AgentClient(client, task_queue=worker.task_queue)
        run = await agents_client.start("lead", "tides, then cancelled")
        view = await _status_until(run.handle, lambda v: v.status == "waiting")
        holder = view.pending_approvals[0].workflow_id
        assert holder is not None
        await run.cancel()
        for workflow_id in (holder, run.id):
            handle = client.get_workflow_handle(workflow_id)
            for _ in range(100):
                description = await handle.describe()
                if description.status == WorkflowExecutionStatus.CANCELED:
                    break
                await asyncio.sleep(0.1)
            assert description.status == WorkflowExecutionStatus.CANCELED, workflow_id


async def test_a_fork_after_a_finished_child_does_not_run_it_again(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DA_TEST_DIR", str(tmp_path))
    async with new_worker(client, agents=hosted()) as worker:
        agents_client = AgentClient(client, task_queue=worker.task_queue)
        run = await agents_client.start("checker", "check the tides")
        first = await asyncio.wait_for(run.result(), 60)
        evidence = await run.checkpoints()
        after = max(i for i, e in enumerate(evidence) if e.node.value == "prepare_model_request")
        before = min(i for i, e in enumerate(evidence) if e.node.value == "tool_call")

        later = await run.fork(at=after)
        replayed = await asyncio.wait_for(later.result(), 60)
        assert replayed.output == first.output
        assert await _child_history_starts(client, later.id) == []
        assert replayed.usage == first.usage

        earlier = await run.fork(at=before)
        again = await asyncio.wait_for(earlier.result(), 60)
        children = await _child_history_starts(client, earlier.id)
        assert len(children) == 2
        assert all(c.startswith(earlier.id + "--") for c in children)
        assert again.usage == first.usage


# -- limits, timeouts and records ------------------------------------------------------------


def _chain(depth: int) -> Any:
    """`depth + 1` agents, each delegating to the next; the last answers."""
    agent = AgentBuilder(TestModel.with_text("bottom")).name(f"level-{depth}").build()
    for level in range(depth - 1, -1, -1):
        script = [
            agents._calls(
                ToolCallPart(id=f"d{level}", name=agent.name, arguments={"prompt": "go down"})
            ),
            agents._text(f"level {level} done"),
        ]
        agent = (
            AgentBuilder(TestModel.with_responses(script))
            .name(f"level-{level}")
            .subagent(agent)
            .build()
        )
    return agent


async def test_sub_agents_nest_five_deep_and_no_deeper() -> None:
    fine = await _chain(MAX_SUBAGENT_DEPTH).run("go")
    assert fine.status.value == "completed"
    assert fine.usage.requests == 2 * MAX_SUBAGENT_DEPTH + 1

    executor = RecordingExecutor()
    too_deep = await _chain(MAX_SUBAGENT_DEPTH + 1).with_executor(executor).run("go")
    assert too_deep.status.value == "completed"  # each level's model read its child's error
    deepest = [c for c in executor.checkpoints if c.state.metadata.get("subagent_depth") == 5]
    returned = deepest[-1].state.message_history[2].parts[0]  # type: ignore[union-attr]
    assert returned.is_error
    assert "subagent_depth_exceeded" in returned.content


async def test_a_sub_agent_over_its_time_is_a_tool_error_in_process_and_on_temporal(
    client: Client,
) -> None:
    in_process = await agents.impatient.run("rest a while")
    returned = in_process.messages[2].parts[0]  # type: ignore[union-attr]
    assert returned.is_error
    assert "failed (timeout)" in returned.content
    async with new_worker(client, agents=hosted()) as worker:
        run = await AgentClient(client, task_queue=worker.task_queue).start(
            "impatient", "rest a while"
        )
        result = await asyncio.wait_for(run.result(), 60)
        messages = await run.conversation()
    assert result.output == "It took too long."
    returned = messages[2].parts[0]  # type: ignore[union-attr]
    assert returned.is_error
    assert "failed (timeout)" in returned.content


async def test_the_parents_stream_has_a_start_and_an_end_record_per_sub_agent_call() -> None:
    records = [record async for record in agents.checker.run_stream("check")]
    starts = [r for r in records if r.kind == "subagent_start"]
    ends = [r for r in records if r.kind == "subagent_end"]
    assert [(r.data["tool_call_id"], r.data["agent"]) for r in starts] == [
        ("k1", "flaky"),
        ("k2", "analyst"),
    ]
    assert all(r.data["workflow_id"].endswith(r.data["tool_call_id"]) for r in starts)
    by_call = {r.data["tool_call_id"]: r.data for r in ends}
    assert by_call["k1"]["is_error"] is True
    assert by_call["k2"]["is_error"] is False
    assert by_call["k2"]["usage"]["requests"] == 1


# -- a sub-agent waiting for a human, in-process ----------------------------------------------


async def test_in_process_a_waiting_sub_agent_makes_its_parent_wait_and_goes_on_there(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DA_TEST_DIR", str(tmp_path))
    waiting = await agents.lead.run("research tides")
    assert waiting.status.value == "waiting"
    (pending,) = waiting.pending_approvals
    assert (pending.tool_call_id, pending.tool_name) == ("p1", "publish")
    assert pending.metadata == {"held_by": "c2", "agent": "writer"}
    # The waiting state round-trips, as a durable store would keep it.
    stored = type(waiting.state).model_validate_json(waiting.state.model_dump_json())
    done = await agents.lead.resume_after_hitl(stored, approvals={"p1": True})
    assert done.status.value == "completed"
    assert done.usage.requests == 6
    assert done.usage.tool_calls == 4
    assert sorted((tmp_path / "tool_runs").read_text().splitlines()) == ["publish", "search"]

    # The same scenario on Temporal: the same conversation and usage.
    async with new_worker(client, agents=hosted()) as worker:
        run = await AgentClient(client, task_queue=worker.task_queue).start(
            "lead", "research tides"
        )
        await _status_until(run.handle, lambda v: v.status == "waiting")
        await run.approve("p1")
        result = await asyncio.wait_for(run.result(), 60)
        messages = await run.conversation()
    assert result.usage == done.usage
    assert normalized(messages) == normalized(done.messages)


async def test_in_process_a_grandchilds_call_is_decided_through_the_top_run() -> None:
    manager = (
        AgentBuilder(
            TestModel.with_responses(
                [
                    agents._calls(
                        ToolCallPart(id="m1", name="lead", arguments={"prompt": "tides"})
                    ),
                    agents._text("Managed."),
                ]
            )
        )
        .name("manager")
        .subagent(agents.lead)
        .build()
    )
    waiting = await manager.run("manage")
    (pending,) = waiting.pending_approvals
    assert pending.tool_call_id == "p1"
    assert pending.metadata == {"held_by": "m1", "agent": "writer"}
    denied = await manager.resume_after_hitl(
        waiting.state, approvals={"p1": ToolApprovalDecision.deny("not today")}
    )
    assert denied.status.value == "completed"
    assert denied.output == "Managed."
    assert denied.usage.requests == 8  # two each: the manager, the lead and its two sub-agents


async def test_stream_with_children_and_watch_follow_the_sub_agents_live(
    client: Client, dev_server: DevServer, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = cli_runner(dev_server.address, capsys)
    async with new_worker(client, agents=hosted()) as worker:
        run = await AgentClient(client, task_queue=worker.task_queue).start(
            "checker", "check the tides"
        )
        records = [r async for r in run.stream(children=True)]
        watched = await cli("watch", run.id)
        only_parent = [r async for r in run.stream()]
    own = [r for r in records if r.workflow_id is None]
    assert [r.seq for r in own] == [r.seq for r in only_parent]
    start = {
        r.data["tool_call_id"]: r.data["workflow_id"] for r in own if r.kind == "subagent_start"
    }
    analyst = [r for r in records if r.workflow_id == start["k2"]]
    assert analyst
    assert {r.depth for r in analyst} == {1}
    assert analyst[0].kind == "run_start"
    completed = next(r for r in analyst if r.kind == "run_complete")
    assert json.loads(completed.data["output"]) == {"topic": "tides", "confidence": 0.9}
    assert watched.code == 0, watched.err
    assert "sub-agent analyst started for k2" in watched.out
    assert re.search(r"^    \[\d+\] completed: ", watched.out, re.MULTILINE), watched.out


class _SuspendChildAtToolCall(RecordingExecutor):
    """Suspends once, at the first boundary a sub-agent's run reaches at its tool call."""

    def __init__(self) -> None:
        super().__init__()
        self.suspended = False

    async def checkpoint(self, checkpoint: Any) -> Any:
        from durable_agent import Continue, Suspend

        self.checkpoints.append(checkpoint)
        child = checkpoint.metadata.parent_tool_call_id is not None
        if child and checkpoint.node.value == "tool_call" and not self.suspended:
            self.suspended = True
            return Suspend(reason="look before the search")
        return Continue()


async def test_in_process_resuming_a_parent_suspended_inside_its_sub_agent_resumes_it_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from durable_agent import ExecutionSuspended

    monkeypatch.setenv("DA_TEST_DIR", str(tmp_path))
    executor = _SuspendChildAtToolCall()
    script = [
        agents._calls(ToolCallPart(id="c1", name="researcher", arguments={"prompt": "tides"})),
        agents._text("ok"),
    ]
    researching = (
        AgentBuilder(TestModel.with_responses(script))
        .name("lead-suspending")
        .subagent(agents.researcher)
        .build()
        .with_executor(executor)
    )
    with pytest.raises(ExecutionSuspended) as suspended:
        await researching.run("research")
    checkpoint = suspended.value.checkpoint
    assert checkpoint.node.value == "tool_call"
    assert checkpoint.metadata.parent_run_id is None  # the parent's own checkpoint
    assert "c1" in checkpoint.state.suspended_subagents
    assert not (tmp_path / "tool_runs").exists()  # the search has not run yet
    stored = type(checkpoint).model_validate_json(checkpoint.model_dump_json())
    done = await researching.resume(stored)
    assert done.status.value == "completed"
    assert (tmp_path / "tool_runs").read_text().splitlines() == ["search"]
    returned = {p.tool_call_id: p for p in done.messages[2].parts}  # type: ignore[union-attr]
    assert returned["c1"].content == "Tides follow the moon."


# -- cancellation, calls of one id, usage as it goes -------------------------------------------


def _scheduled(history: Any, activity: str) -> int:
    return sum(
        1
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity
    )


async def _ended_as(client: Client, workflow_id: str, status: WorkflowExecutionStatus) -> None:
    handle = client.get_workflow_handle(workflow_id)
    for _ in range(150):
        description = await handle.describe()
        if description.status == status:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{workflow_id} is {description.status}, not {status}")


async def test_a_lead_cancelled_while_its_sub_agent_waits_ends_cancelled_and_asks_no_model(
    client: Client, dev_server: DevServer, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = cli_runner(dev_server.address, capsys)
    async with new_worker(client, agents=hosted()) as worker:
        agents_client = AgentClient(client, task_queue=worker.task_queue)
        run = await agents_client.start("delegator", "tides, then cancelled")
        view = await _status_until(run.handle, lambda v: v.status == "waiting")
        holder = view.pending_approvals[0].workflow_id
        assert holder is not None
        # The lead's usage holds its child's as it goes: its one request and the writer's.
        assert view.usage.requests == 2, view.usage
        cancelled = await cli("cancel", run.id, "--reason", "not needed any more")
        assert cancelled.code == 0, cancelled.err
        await _ended_as(client, run.id, WorkflowExecutionStatus.CANCELED)
        await _ended_as(client, holder, WorkflowExecutionStatus.CANCELED)
        history = await run.handle.fetch_history()
        assert _scheduled(history, "model_request") == 1  # none after the cancellation
        records = [r async for r in run.stream()]
        assert records[-1].kind == "run_cancelled"
        assert records[-1].data.get("reason") == "not needed any more"
        again = await cli("cancel", run.id)
        assert again.code == 1, again.out


async def test_a_lead_cancelled_while_its_sub_agent_works_ends_cancelled(client: Client) -> None:
    async with new_worker(client, agents=hosted()) as worker:
        agents_client = AgentClient(client, task_queue=worker.task_queue)
        run = await agents_client.start("patient", "rest, then cancelled")
        view = await _status_until(
            run.handle, lambda v: [s.status for s in v.subagents] == ["running"]
        )
        child = view.subagents[0].workflow_id
        await asyncio.sleep(0.5)  # the child's nap (5 s) is under way
        await run.cancel("changed my mind")
        await _ended_as(client, run.id, WorkflowExecutionStatus.CANCELED)
        await _ended_as(client, child, WorkflowExecutionStatus.CANCELED)
        history = await run.handle.fetch_history()
        assert _scheduled(history, "model_request") == 1
        child_history = await client.get_workflow_handle(child).fetch_history()
        assert _scheduled(child_history, "model_request") == 1  # nothing after its nap


async def test_calls_of_one_id_in_two_sub_agents_are_told_apart(
    client: Client,
    dev_server: DevServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli = cli_runner(dev_server.address, capsys)
    monkeypatch.setenv("DA_TEST_DIR", str(tmp_path))
    async with new_worker(client, agents=hosted()) as worker:
        agents_client = AgentClient(client, task_queue=worker.task_queue)
        run = await agents_client.start("twins", "write and edit")
        view = await _status_until(
            run.handle, lambda v: len([p for p in v.pending_approvals if not p.decided]) == 2
        )
        holders = {p.agent: p.workflow_id for p in view.pending_approvals}
        assert [p.tool_call_id for p in view.pending_approvals] == ["p1", "p1"]
        assert holders["writer"] != holders["editor"]

        ambiguous = await cli("approve", run.id, "p1", "--by", "alice")
        assert ambiguous.code == 1
        assert "pending in more than one workflow" in ambiguous.err
        assert holders["writer"] in ambiguous.err
        assert holders["editor"] in ambiguous.err
        with pytest.raises(Rejected) as refused:
            await run.deny("p1", "no", by="alice")
        assert refused.value.type == "ambiguous_call"
        nope = await cli("approve", run.id, "call_nope", "--by", "alice")
        assert nope.code == 1
        assert "no pending approval for tool call id 'call_nope' here" in nope.err
        assert f"'p1' (editor: publish, in {holders['editor']})" in nope.err

        denied = await cli(
            "deny", run.id, "p1", "--reason", "not the edit", "--holder", holders["editor"]
        )
        assert denied.code == 0, denied.err
        view = await _status_until(
            run.handle, lambda v: [p.agent for p in v.pending_approvals] == ["writer"]
        )
        # One call of that id is left: the id alone names it now.
        approved = await cli("approve", run.id, "p1", "--by", "alice")
        assert approved.code == 0, approved.err
        result = await asyncio.wait_for(run.result(), 60)
    assert result.status == "completed"
    # The writer published; the editor's publish was denied and never ran.
    assert (tmp_path / "tool_runs").read_text().splitlines() == ["publish"]


async def test_a_decision_a_sub_agent_refuses_reaches_whoever_sent_it(
    client: Client, dev_server: DevServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """By update (the CLI, the handle) the refusal is the sender's error; a signal cannot
    answer, so the lead's stream, its details and `watch` say it."""
    cli = cli_runner(dev_server.address, capsys)
    async with new_worker(client, agents=hosted()) as worker:
        agents_client = AgentClient(client, task_queue=worker.task_queue)
        run = await agents_client.start("delegator", "tides")
        view = await _status_until(run.handle, lambda v: v.status == "waiting")
        holder = view.pending_approvals[0].workflow_id
        bad = await cli("approve", run.id, "p1", "--by", "alice", "--args", '{"title": 5}')
        assert bad.code == 1
        assert "override_arguments for tool 'publish' (call 'p1') are invalid" in bad.err
        await run.handle.signal(
            "approval",
            {"tool_call_id": "p1", "approved": True, "override_arguments": {"title": 5}},
        )

        status = await _status_until(run.handle, lambda v: bool(v.refused_decisions))
        (refusal,) = status.refused_decisions
        assert refusal.workflow_id == holder
        assert "override_arguments for tool 'publish'" in refusal.reason
        metadata = await run.handle.query("__temporal_workflow_metadata")
        assert "Refused approval signals" in metadata.current_details
        shown = await cli("status", run.id)
        assert f"p1 in {holder}: override_arguments for tool 'publish'" in shown.out
        approved = await cli("approve", run.id, "p1", "--by", "alice")
        assert approved.code == 0, approved.err
        result = await asyncio.wait_for(run.result(), 60)
    assert result.status == "completed"
