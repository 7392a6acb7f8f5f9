"""The workflow's components as plain classes, without a server (issue 25, item 1).

Each component reaches Temporal only through a `WorkflowPort`; here a `FakePort` stands in
for it (time, waits, search attributes, details). The same components run inside
`AgentWorkflow` against a real dev server in every other Temporal test.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic_core import to_json
from temporalio.api.common.v1 import Payload
from temporalio.common import SearchAttributeUpdate
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import PayloadConverter
from temporalio.exceptions import ApplicationError

from durable_agent import AgentBuilder, DirectAgentExecutor, SystemIdSource, TestModel
from durable_agent.agent.in_process import DirectNodeRunner
from durable_agent.contract.state import AgentRunState, RunStatus
from durable_agent.engine.controller import RunController
from durable_agent.engine.runner import Driver
from durable_agent.temporal.executor import TemporalExecutor
from durable_agent.temporal.wire import (
    AgentWorkflowInput,
    ApprovalSignal,
    DeferredResultSignal,
    PromptRequest,
)
from durable_agent.temporal.workflow.decisions import HumanDecisions
from durable_agent.temporal.workflow.events import plain_payload, plain_size, writes_plain
from durable_agent.temporal.workflow.gates import Gate, Refusal
from durable_agent.temporal.workflow.inputs import read_input
from durable_agent.temporal.workflow.live import LiveRun
from durable_agent.temporal.workflow.port import RunIdentity
from durable_agent.temporal.workflow.record_sizes import RecentSizes
from durable_agent.temporal.workflow.sessions import Session
from durable_agent.temporal.workflow.subscribers import Subscribers
from durable_agent.temporal.workflow.visibility import Visibility

from .helpers import call, text_response, tool_response


class FakePort:
    """A `WorkflowPort` for tests: a clock that moves only when told, waits that poll."""

    def __init__(self) -> None:
        self.logger = logging.getLogger("tests.workflow_components")
        self.clock = datetime(2026, 1, 1, tzinfo=UTC)
        self.upserts: list[list[tuple[str, Any]]] = []
        self.details = ""
        self.markers: list[str] = []
        self.soon_calls: list[Callable[[], None]] = []

    def now(self) -> datetime:
        return self.clock

    def identity(self) -> RunIdentity:
        return RunIdentity(workflow_id="wf-1", run_id="run-1", task_queue="q")

    def continue_as_new_suggested(self) -> bool:
        return False

    def is_replaying(self) -> bool:
        return False

    def patched(self, marker: str) -> bool:
        self.markers.append(marker)
        return True

    def cancel_requested(self) -> bool:
        return False

    async def wait(self, condition: Callable[[], bool], timeout: timedelta | None = None) -> None:
        async def until() -> None:
            while not condition():
                await asyncio.sleep(0.001)

        await asyncio.wait_for(until(), timeout.total_seconds() if timeout else None)

    def upsert(self, updates: Sequence[SearchAttributeUpdate[Any]]) -> None:
        self.upserts.append([(u.key.name, u.value) for u in updates])

    def soon(self, callback: Callable[[], None]) -> None:
        self.soon_calls.append(callback)

    def end_task(self) -> None:
        """What the workflow's event loop does once the code running now yields."""
        calls, self.soon_calls = self.soon_calls, []
        for callback in calls:
            callback()

    def set_details(self, details: str) -> None:
        self.details = details


async def waiting_state() -> tuple[Any, AgentRunState]:
    """An agent and its run waiting for the approval of `deploy` (call d1), in-process."""

    def deploy(env: str) -> str:
        return f"deployed to {env}"

    model = TestModel.with_responses(
        [tool_response(call("deploy", "d1", env="prod")), text_response("done")]
    )
    agent = (
        AgentBuilder(model)
        .name("deployer")
        .tool(deploy)
        .approval_required_tools(["deploy"])
        .approvers({"deploy": ["alice"]})
        .build()
    )
    result = await agent.run("ship it")
    assert result.state.status is RunStatus.WAITING
    return agent, result.state


class Parts:
    """The components wired as `AgentWorkflow` wires them, around a live waiting run."""

    def __init__(self, agent: Any, state: AgentRunState, input: AgentWorkflowInput) -> None:
        self.port = FakePort()
        self.live = LiveRun(input)
        self.live.controller = RunController(
            agent,
            Driver(
                runner=DirectNodeRunner(agent),
                executor=DirectAgentExecutor(),
                ids=SystemIdSource(),
            ),
        )
        self.live.controller.attach(state, stream_start=0)
        self.executor = TemporalExecutor()
        self.session = Session(input, self.live, self.port)
        self.decisions = HumanDecisions(
            self.live,
            self.port,
            status=lambda: self.visibility.status(),
            publish=lambda: self.visibility.publish(),
            keys=None,
        )
        self.visibility = Visibility(
            self.live, self.executor, self.session, self.decisions, self.port
        )
        self.approvals = Gate(
            "approval",
            ApprovalSignal,
            self.decisions.check_approval,
            self.decisions.record_approval,
            self.port,
        )


async def parts() -> Parts:
    agent, state = await waiting_state()
    return Parts(agent, state, AgentWorkflowInput(agent="deployer", prompt="ship it"))


# -- one path for a signal and its update ------------------------------------------------------


async def test_a_signal_and_its_update_are_refused_by_the_same_check(
    caplog: pytest.LogCaptureFixture,
) -> None:
    p = await parts()
    bad = ApprovalSignal(tool_call_id="nope", approved=True, decided_by="alice")
    with pytest.raises(ApplicationError) as refused:
        p.approvals.validate(bad)
    assert refused.value.type == "invalid_approval"
    assert refused.value.non_retryable
    caplog.set_level(logging.WARNING)
    assert p.approvals.signal((bad.model_dump(),)) is False
    assert f"approval signal ignored: {refused.value.message}" in caplog.text
    assert p.decisions.decided == {}


async def test_an_approver_not_listed_is_refused_by_update_and_dropped_with_a_marker_by_signal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    p = await parts()
    mallory = ApprovalSignal(tool_call_id="d1", approved=True, decided_by="mallory")
    with pytest.raises(ApplicationError) as refused:
        p.approvals.validate(mallory)
    assert refused.value.type == "unauthorized_approval"
    assert "mallory" in refused.value.message
    assert p.approvals.signal((mallory.model_dump(),)) is False
    # A signal's drop depends on worker-local rules, so it is recorded for replay.
    assert p.port.markers == ["durable-agent.approval-signal-dropped-1"]
    assert p.decisions.decided == {}


async def test_a_recorded_decision_updates_status_attributes_and_refuses_a_second_one() -> None:
    p = await parts()
    p.visibility.publish()
    assert p.port.upserts == [[("AgentStatus", "waiting"), ("PendingApprovals", 1)]]
    assert "call d1 · tool deploy · arguments" in p.port.details
    alice = ApprovalSignal(tool_call_id="d1", approved=True, decided_by="alice")
    p.approvals.validate(alice)
    p.approvals.record(alice)
    assert p.decisions.all_decided()
    assert p.port.upserts[-1] == [("AgentStatus", "waiting"), ("PendingApprovals", 0)]
    assert p.visibility.accepted("ok").status == "running"
    upserts = len(p.port.upserts)
    p.visibility.publish()
    assert len(p.port.upserts) == upserts, "nothing changed: no second command"
    with pytest.raises(ApplicationError, match="was already approved by alice"):
        p.approvals.validate(alice)
    approvals, results = p.decisions.take(p.live.state)  # type: ignore[arg-type]
    assert list(approvals) == ["d1"]
    assert approvals["d1"].approved
    assert results == []
    assert p.decisions.decisions == {}
    assert list(p.decisions.decided) == ["d1"], "kept, to refuse a late second decision"


async def test_a_deferred_result_for_a_run_with_no_deferred_calls_is_refused() -> None:
    p = await parts()
    refusal = p.decisions.check_result(DeferredResultSignal(tool_call_id="x"), False)
    assert refusal == Refusal(
        "invalid_deferred_result", "no deferred call with id 'x'; deferred calls: none"
    )


async def test_an_approval_wait_that_times_out_denies_the_undecided_calls() -> None:
    p = await parts()
    await p.decisions.wait(timeout_seconds=0.01)
    decision = p.decisions.decisions["d1"]
    assert not decision.approved
    assert (decision.decided_by, decision.reason) == ("system", "approval expired")
    assert p.decisions.waiting_since == p.port.clock


# -- visibility ---------------------------------------------------------------------------------


def visibility_of_new_run() -> tuple[FakePort, LiveRun, Visibility]:
    port = FakePort()
    input = AgentWorkflowInput(agent="a", prompt="p")
    live = LiveRun(input)
    session = Session(input, live, port)
    decisions = HumanDecisions(live, port, status=lambda: "", publish=lambda: None, keys=None)
    return port, live, Visibility(live, TemporalExecutor(), session, decisions, port)


async def test_status_reads_failure_first_then_starting() -> None:
    port, live, visibility = visibility_of_new_run()
    assert visibility.status() == "starting"
    assert visibility.undecided() == []
    live.error = "unknown_agent: no agent named 'a'"
    assert visibility.status() == "failed"
    visibility.publish()
    assert port.upserts == [[("AgentStatus", "failed"), ("PendingApprovals", 0)]]
    assert "**Failed:** unknown\\_agent\\: no agent named 'a'" in port.details


async def test_a_batched_run_upserts_what_holds_once_the_code_that_published_yields() -> None:
    port, live, visibility = visibility_of_new_run()
    visibility.begin(batched=True)
    visibility.publish()  # starting
    live.error = "boom"
    visibility.publish()  # failed, in the same task
    assert port.upserts == [], "nothing before the code that published yields"
    assert "**Failed:** boom" in port.details, "the details are not a command: at once"
    port.end_task()
    assert port.upserts == [
        [("AgentName", "a"), ("AgentStatus", "failed"), ("PendingApprovals", 0)]
    ], "the run's name goes with its first upsert, and only the last status"
    visibility.publish()
    port.end_task()
    visibility.flush()
    assert len(port.upserts) == 1, "nothing changed: no second command"
    live.error = None
    visibility.publish()
    visibility.flush()  # the workflow's own, before it ends
    port.end_task()
    assert port.upserts[1:] == [[("AgentStatus", "starting"), ("PendingApprovals", 0)]]


async def test_a_run_that_is_not_batched_upserts_at_each_change_and_flush_does_nothing() -> None:
    port, live, visibility = visibility_of_new_run()
    visibility.begin(batched=False)
    assert port.upserts == [[("AgentName", "a")]]
    visibility.publish()
    live.error = "boom"
    visibility.publish()
    visibility.flush()
    assert port.soon_calls == []
    assert [u[0][1] for u in port.upserts[1:]] == ["starting", "failed"]


# -- sessions -----------------------------------------------------------------------------------


async def test_a_session_takes_a_prompt_only_while_it_waits_for_one() -> None:
    port = FakePort()
    input = AgentWorkflowInput(agent="a", session=True)
    live = LiveRun(input)
    session = Session(input, live, port)
    assert session.awaiting_prompt, "a session opened without a prompt waits for one"
    assert session.prompt_problem("", "awaiting_prompt") == (
        "the prompt is empty; send the task for the agent"
    )
    assert session.prompt_problem("hi", "awaiting_prompt") is None
    waiter = asyncio.ensure_future(session.answer_for("hi", lambda: None))
    await asyncio.sleep(0.01)
    assert session.prompt_problem("again", "awaiting_prompt") == (
        "the session is busy with turn 0 (status: awaiting_prompt); wait for its answer, "
        "or steer it"
    )
    prompt = await session.next_prompt(lambda: None)
    assert (prompt, session.turn, session.awaiting_prompt) == ("hi", 1, False)
    state = AgentRunState(run_id="r", conversation_id="c", status=RunStatus.COMPLETED)
    assert session.answer(state)
    assert not session.answer(state), "a turn is answered once"
    turn, answer = await waiter
    assert turn == 1
    assert answer is not None
    assert answer.status == "completed"


async def test_a_session_idle_past_its_timeout_ends() -> None:
    port = FakePort()
    input = AgentWorkflowInput(agent="a", session=True, idle_timeout_seconds=0.01)
    session = Session(input, LiveRun(input), port)
    assert await session.next_prompt(lambda: None) is None
    assert session.ending


async def test_prompts_to_a_run_that_is_not_a_session_are_refused() -> None:
    port = FakePort()
    input = AgentWorkflowInput(agent="a", prompt="p")
    session = Session(input, LiveRun(input), port)
    request = PromptRequest(prompt="hi")
    assert session.prompt_problem(request.prompt, "running") == (
        "this run is not a session; start one with session=true to send prompts"
    )
    assert session.carry() is None
    assert session.view() is None
    assert session.end() is False


# -- the input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ({"agent": "a", "prompt": "p"}, None),
        (None, "the workflow was started without an input"),
        ("hello", "the workflow input must be a JSON object"),
        ({"agent": 5}, "invalid workflow input: agent: Input should be a valid string (got 5)"),
        ({"prompt": "p"}, "invalid workflow input: agent: Field required"),
    ],
    ids=["good", "none", "string", "agent-number", "agent-missing"],
)
def test_read_input_names_what_is_wrong(raw: Any, problem: str | None) -> None:
    input, found = read_input(raw)
    if problem is None:
        assert found is None
        assert input.agent == "a"
    else:
        assert found is not None
        assert found.startswith(problem), found


# -- plain stream subscribers ------------------------------------------------------------------


def test_subscribers_are_followed_while_they_poll_and_forgotten_after_five_minutes() -> None:
    port = FakePort()
    subscribers = Subscribers(port)
    assert subscribers.slowest() is None
    subscribers.polled(40)
    subscribers.polled(7)
    port.clock += timedelta(minutes=4)
    subscribers.polled(90)
    assert subscribers.slowest() == 7
    carried = Subscribers(port, subscribers.carry())
    assert carried.slowest() == 7, "a successor run keeps following them"
    port.clock += timedelta(minutes=2)
    assert subscribers.slowest() == 90, "the first two polled more than five minutes ago"
    port.clock += timedelta(minutes=5)
    assert subscribers.slowest() is None
    assert subscribers.carry() == []


@pytest.mark.parametrize("length", [0, 1, 127, 128, 300, 16_383, 16_384, 2_097_152])
def test_a_record_waiting_as_bytes_is_counted_at_its_payloads_size(length: int) -> None:
    # The continue-as-new handoff picks records by these sizes: counted from the bytes a
    # record waits as, they must be what the Payload it becomes would measure.
    data = b"x" * length
    assert plain_size(data) == plain_payload(data).ByteSize()
    assert plain_payload(data).metadata == {"encoding": b"json/plain"}


class _Indented(PayloadConverter):
    """Writes JSON as the plugin's converter would not: indented."""

    def to_payloads(self, values: Sequence[Any]) -> list[Payload]:
        return [
            Payload(metadata={"encoding": b"json/plain"}, data=to_json(v, indent=2)) for v in values
        ]

    def from_payloads(self, payloads: Sequence[Payload], type_hints: Any = None) -> list[Any]:
        raise NotImplementedError("this converter only writes")


def test_records_are_written_as_plain_json_only_when_the_converter_writes_them_so() -> None:
    # `EventStream.publish` writes records itself (and keeps them as bytes) only for a
    # converter whose payloads are exactly that; another converter's are published as it
    # writes them.
    assert writes_plain(pydantic_data_converter.payload_converter)
    assert not writes_plain(_Indented())


def test_the_handoff_sizes_keep_the_latest_within_their_bound() -> None:
    sizes = RecentSizes(1000)
    added: list[int] = []
    for n in range(500):
        size = 7 + (n * 37) % 190
        sizes.add(size)
        added.append(size)
        # what a plain list would keep: the newest sizes within the bound, the newest always
        kept = [added[-1]]
        for earlier in reversed(added[:-1]):
            if sum(kept) + earlier > 1000:
                break
            kept.append(earlier)
        assert len(sizes) == len(kept), n
        assert sizes.fitting(10**9) == len(kept)
        assert sizes.fitting(300) == next(
            i for i in range(len(kept) + 1) if i == len(kept) or sum(kept[: i + 1]) > 300
        )
        assert sizes.fitting(10**9, records=3) == min(3, len(kept))
    alone = RecentSizes(10)
    alone.add(50)
    assert (len(alone), alone.fitting(100), alone.fitting(10)) == (1, 1, 0)
