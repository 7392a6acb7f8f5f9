"""Packed activity payloads: what is left out comes back exactly, or is read back.

Unit tests of `durable_agent.temporal.compaction`, then runs on a real dev server: the tool
result travels once (to the workflow, not again to the model), a worker that did not see
the tool result reads the request's messages back by query, and a model request scheduled
whole (by release v0.2.0) is still served.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from durable_agent import (
    AgentBuilder,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TestModel,
    TextContent,
    ToolReturn,
    ToolReturnPart,
    UserPromptPart,
)
from durable_agent.engine.node_io import ToolApprovalNeeded, ToolRetry, ToolReturned
from durable_agent.engine.spec import AgentSpec
from durable_agent.temporal import AgentWorkflow, ApprovalSignal, WorkerRuntime, runtime_of
from durable_agent.temporal.compaction.caches import PayloadCaches
from durable_agent.temporal.compaction.digest import EMPTY_DIGEST, HistoryDigest, extend_digest
from durable_agent.temporal.compaction.format import (
    pack_messages,
    pack_response,
    pack_tool_outcome,
    unpack_messages,
    unpack_response,
    unpack_tool_outcome,
)
from durable_agent.temporal.wire import HistoryRef, ModelRequestActivityInput

from .helpers import call, text_response, tool_response
from .temporal_support import new_worker, start_agent, unique, wait_for_status

RESULT = "r" * 300
STAMP = {"run_id": "run_1", "conversation_id": "conv_1"}


def conversation() -> list[Any]:
    first = ModelRequest(
        parts=[UserPromptPart(content=[TextContent(text="go")])], timestamp="t0", **STAMP
    )
    answer = ModelResponse(parts=[call("lookup", "c1", key=1)], timestamp="t0", **STAMP)
    returns = ModelRequest(
        parts=[
            ToolReturnPart(tool_call_id="c1", name="lookup", content=RESULT, metadata={"d": 1}),
            RetryPromptPart(content="again", tool_name="other", tool_call_id="c2"),
        ],
        timestamp="t1",
        **STAMP,
    )
    return [first, answer, returns]


def cached(call_id: str) -> ToolReturn | None:
    if call_id == "c1":
        return ToolReturn(tool_call_id="c1", name="lookup", content=RESULT, metadata={"d": 1})
    return None


def test_a_digest_peeked_ahead_is_the_one_advancing_gives() -> None:
    messages = conversation()
    digest = HistoryDigest()
    assert digest.advance(messages, 1) == extend_digest(EMPTY_DIGEST, messages[:1])
    assert digest.peek(messages, 2) == extend_digest(EMPTY_DIGEST, messages[:2])
    assert digest.length == 1
    assert digest.advance(messages, 3) == extend_digest(EMPTY_DIGEST, messages)
    # Short of the peeked length, it still hashes from where it stood.
    behind = HistoryDigest()
    behind.peek(messages, 3)
    assert behind.advance(messages, 2) == extend_digest(EMPTY_DIGEST, messages[:2])
    with pytest.raises(ValueError, match="cannot go back"):
        behind.peek(messages, 1)


def test_packed_messages_leave_out_stamps_and_tool_results_and_come_back_exactly() -> None:
    _, answer, returns = conversation()
    packed = pack_messages([returns], previous=answer, timestamp="t1")
    text = json.dumps(packed)
    for left_out in (RESULT, "run_1", "t1"):
        assert left_out not in text
    assert unpack_messages(packed, previous=answer, timestamp="t1", tool_return=cached) == [returns]
    assert extend_digest(EMPTY_DIGEST, [returns]) == extend_digest(
        EMPTY_DIGEST,
        unpack_messages(packed, previous=answer, timestamp="t1", tool_return=cached) or [],
    )


def test_a_message_unlike_the_one_before_it_keeps_its_stamps() -> None:
    _, answer, returns = conversation()
    other = returns.model_copy(update={"run_id": "run_2"})
    packed = pack_messages([other], previous=answer, timestamp="t1")
    assert packed[0]["run_id"] == "run_2"
    assert "stamped" not in packed[0]
    assert unpack_messages(packed, previous=answer, timestamp="t1", tool_return=cached) == [other]
    unstamped = ModelRequest(parts=[UserPromptPart(content=[TextContent(text="hi")])])
    packed = pack_messages([unstamped], previous=answer, timestamp="t1")
    assert unpack_messages(packed, previous=answer, timestamp="t1", tool_return=cached) == [
        unstamped
    ]


def test_what_is_not_at_hand_gives_none_instead_of_a_guess() -> None:
    _, answer, returns = conversation()
    packed = pack_messages([returns], previous=answer, timestamp="t1")
    assert unpack_messages(packed, previous=None, timestamp="t1", tool_return=cached) is None
    assert (
        unpack_messages(packed, previous=answer, timestamp="t1", tool_return=lambda _: None) is None
    )


def test_responses_travel_without_stamps_or_zero_counters() -> None:
    response = ModelResponse(
        parts=[call("lookup", "c1", key=1)], model_name="m", timestamp="t1", **STAMP
    )
    packed = pack_response(response)
    assert not {"run_id", "conversation_id", "timestamp", "usage"} & packed.keys()
    decoded = ModelResponse.model_validate(packed)
    assert unpack_response(decoded, timestamp="t1", **STAMP) == response
    # A response an earlier release returned whole comes through unchanged.
    whole = ModelResponse.model_validate(response.model_dump(mode="json"))
    assert unpack_response(whole, timestamp="t1", **STAMP) == response


@pytest.mark.parametrize(
    "outcome",
    [
        ToolReturned(tool_return=ToolReturn(tool_call_id="c1", name="lookup", content=RESULT)),
        ToolReturned(
            tool_return=ToolReturn(tool_call_id="c1", name="lookup", content="x", is_error=True)
        ),
        ToolRetry(
            tool_return=ToolReturn(
                tool_call_id="c1", name="lookup", content="bad", is_error=True, retry=True
            )
        ),
        ToolApprovalNeeded(reason="risky"),
    ],
)
def test_tool_outcomes_round_trip_packed_and_whole(outcome: Any) -> None:
    packed = pack_tool_outcome(outcome, "c1", "lookup")
    assert unpack_tool_outcome(packed, "c1", "lookup") == outcome
    assert unpack_tool_outcome(outcome.model_dump(mode="json"), "c1", "lookup") == outcome
    if isinstance(outcome, ToolReturned):
        assert not {"kind", "tool_call_id", "name"} & packed.keys()


def test_a_return_leaves_its_milliseconds_to_its_seconds_unless_they_disagree() -> None:
    timed = {"duration_ms": 28, "duration_seconds": 0.028999}
    odd = {"duration_ms": 7, "duration_seconds": 0.028999}
    for metadata, kept in ((timed, False), (odd, True)):
        outcome = ToolReturned(
            tool_return=ToolReturn(tool_call_id="c1", name="t", content=1, metadata=metadata)
        )
        packed = pack_tool_outcome(outcome, "c1", "t")
        assert ("duration_ms" in packed["metadata"]) is kept
        assert unpack_tool_outcome(packed, "c1", "t") == outcome
    changed = ToolReturned(
        tool_return=ToolReturn(tool_call_id="c1", name="t", content=1), toolset_changed=True
    )
    assert unpack_tool_outcome(pack_tool_outcome(changed, "c1", "t"), "c1", "t") == changed


def lookup(key: int) -> str:
    return RESULT


def lookup_agent(steps: int) -> AgentSpec:
    script = [tool_response(call("lookup", f"c{i}", key=i)) for i in range(steps)]
    return (
        AgentBuilder(TestModel.with_responses([*script, text_response("done")]))
        .name(unique("compact"))
        .tool(lookup)
        .build()
    )


def payloads(history: Any, kind: int, activity: str | None = None) -> list[str]:
    """The JSON of every activity input (kind SCHEDULED) or result (COMPLETED)."""
    names: dict[int, str] = {}
    out: list[str] = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            names[event.event_id] = attrs.activity_type.name
            if kind == event.event_type and attrs.activity_type.name == activity:
                out.extend(p.data.decode() for p in attrs.input.payloads)
        if kind == event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = event.activity_task_completed_event_attributes
            if names[attrs.scheduled_event_id] == activity:
                out.extend(p.data.decode() for p in attrs.result.payloads)
    return out


async def run_lookups(
    client: Client, steps: int, *, tool_returns_kept: int | None = None
) -> tuple[Any, Any, PayloadCaches]:
    """A run on a worker of its own; its result and messages, its history, the worker's
    caches. `tool_returns_kept=0` is a worker that holds no tool result."""
    agent = lookup_agent(steps)
    name = agent.name
    async with new_worker(client, agents=[agent]) as worker:
        runtime = runtime_of(worker)
        if tool_returns_kept is not None:
            runtime.caches.tool_returns.max_returns = tool_returns_kept
        handle = await start_agent(client, worker, name, "go")
        result = await handle.result()
        messages = await handle.query(AgentWorkflow.message_history_page, _page())
    return (result, messages), await handle.fetch_history(), runtime.caches


def _page() -> Any:
    from durable_agent.temporal.wire import HistoryPageQuery

    return HistoryPageQuery(offset=0, limit=1000)


async def test_the_tool_result_travels_once_and_the_conversation_is_whole(client: Client) -> None:
    (result, messages), history, caches = await run_lookups(client, 3)
    assert result.output == "done"
    assert caches.histories.tail_reads == 0, "one worker: every request rebuilt from its cache"
    sched = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    done = EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    assert sum(RESULT in p for p in payloads(history, done, "tool_call")) == 3
    assert not any(RESULT in p for p in payloads(history, sched, "model_request"))
    assert not any(result.run_id in p for p in payloads(history, done, "model_request"))
    returns = [
        part.content
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    assert returns == [RESULT] * 3
    assert all(m.run_id == result.run_id and m.timestamp for m in messages)
    # An ended run leaves nothing in the worker's caches for the garbage collector to walk.
    workflow_id = history.workflow_id
    assert not caches.histories.holds(workflow_id), "its conversation is forgotten"
    assert not caches.tool_returns.holds(workflow_id), "each result was taken by the next request"


async def test_a_worker_without_the_tool_result_reads_the_messages_back(client: Client) -> None:
    (expected, expected_messages), _, _ = await run_lookups(client, 3)
    # As if every tool ran on another worker:
    (result, messages), _, caches = await run_lookups(client, 3, tool_returns_kept=0)
    assert caches.histories.tail_reads == 3
    assert result.output == expected.output == "done"

    def content(ms: list[Any]) -> list[Any]:
        # Everything but the stamps and the tools' durations, which differ between runs.
        return [(m.kind, [p.model_dump(exclude={"metadata"}) for p in m.parts]) for m in ms]

    assert content(messages) == content(expected_messages)


async def test_a_run_waiting_for_a_person_leaves_no_conversation_in_the_activity_cache(
    client: Client,
) -> None:
    """Its workflow holds the conversation; the worker's copy would wait with it for days.
    The request after the decision reads it back once, and the run goes on as it would."""

    async def deploy(env: str) -> str:
        return f"deployed to {env}"

    script = [
        tool_response(call("lookup", "c0", key=0)),
        tool_response(call("deploy", "d1", env="prod")),
        text_response("done"),
    ]
    agent = (
        AgentBuilder(TestModel.with_responses(script))
        .name(unique("compact"))
        .tool(lookup)
        .tool(deploy)
        .approval_required_tools(["deploy"])
        .build()
    )
    async with new_worker(client, agents=[agent]) as worker:
        caches = runtime_of(worker).caches
        handle = await start_agent(client, worker, agent.name, "go")
        await wait_for_status(handle, "waiting")
        assert not caches.histories.holds(handle.id), "nothing kept while it waits"
        assert (caches.histories.hits, caches.histories.misses) == (1, 0)
        await handle.signal(
            AgentWorkflow.approval, ApprovalSignal(tool_call_id="d1", approved=True)
        )
        result = await handle.result()
        messages = await handle.query(AgentWorkflow.message_history_page, _page())
    assert result.output == "done"
    assert (caches.histories.hits, caches.histories.misses) == (1, 1), "read back once"
    assert [m.kind for m in messages] == ["request", "response"] * 3


async def test_a_model_request_scheduled_whole_by_release_020_is_served() -> None:
    agent = lookup_agent(1)
    name = agent.name
    runtime = WorkerRuntime()
    runtime.agents.register(agent)
    first = ModelRequest(
        parts=[UserPromptPart(content=[TextContent(text="go")])], timestamp="t0", **STAMP
    )
    whole = ModelRequestActivityInput.model_validate(
        {
            "agent": name,
            "input": {
                **STAMP,
                "run_step": 0,
                "timestamp": "t0",
                "messages": [first.model_dump(mode="json")],
            },
            "history": {"length": 0, "digest": EMPTY_DIGEST},
        }
    )
    packed = await ActivityEnvironment().run(runtime.activities.model_request, whole)
    response = unpack_response(ModelResponse.model_validate(packed), timestamp="t0", **STAMP)
    assert [p.name for p in response.tool_calls] == ["lookup"]
    assert runtime.caches.histories.lookup(
        "test", HistoryRef(length=2, digest=extend_digest(EMPTY_DIGEST, [first, response]))
    ) == [first, response]


def test_a_tool_calls_idempotency_key_is_left_out_and_derived_again_by_one_rule() -> None:
    """The workflow leaves the default key out of the activity input; the activity derives
    it again; a key the run chose travels as it is."""
    from durable_agent.contract.messages import ToolCall
    from durable_agent.engine.node_io import ToolCallInput
    from durable_agent.temporal.compaction import default_idempotency_key
    from durable_agent.temporal.compaction.packer import RequestPacker
    from durable_agent.temporal.compaction.resolver import resolve_tool_call

    call = ToolCall(id="c1", name="deploy", arguments={"env": "prod"})
    for key, sent in (
        (default_idempotency_key("wf-1", "c1"), None),
        ("my-own-key", "my-own-key"),
    ):
        input = ToolCallInput.model_validate(
            {
                "run_id": "r",
                "conversation_id": "c",
                "run_step": 1,
                "timestamp": "2026-12-03T00:00:00Z",
                "call": call.model_dump(),
                "idempotency_key": key,
            }
        )
        packed = RequestPacker.tool_call("deployer", input, "wf-1")
        assert packed.input.idempotency_key == sent
        assert packed.input.timestamp is None, "a tool is not told the time"
        assert resolve_tool_call(packed, "wf-1").idempotency_key == key


class _SlowWorkflow:
    """A workflow handle whose queries go unanswered `unanswered` times (the client's own
    timeout, as when the run's pending workflow task waits in a backlog), then answer."""

    def __init__(self, unanswered: int, status: Any = None) -> None:
        from temporalio.service import RPCStatusCode

        self.unanswered, self.asked = unanswered, 0
        self.status = status or RPCStatusCode.CANCELLED

    async def query(self, query: str, *, args: Any, result_type: Any, rpc_timeout: Any) -> Any:
        from temporalio.service import RPCError

        self.asked += 1
        if self.asked <= self.unanswered:
            raise RPCError("Timeout expired", self.status, b"")
        return [query, *args]


async def test_a_read_back_query_the_workflow_cannot_answer_yet_is_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An activity that reads a run's history back (its worker's cache missed) waits for the
    workflow's answer instead of failing: under a fleet's backlog the run's workflow task,
    which a query waits behind, can take minutes, and failing spent the model request's
    attempts until the run failed (the rolling upgrade under load did). A refusal still
    fails at once."""
    from temporalio.service import RPCError, RPCStatusCode

    from durable_agent.temporal.compaction import caches

    monkeypatch.setattr(caches, "RETRY_DELAYS", (0.0,))
    slow = _SlowWorkflow(unanswered=3)
    answer = await caches.ask_workflow(slow, "history_segments", 1, result_type=list)  # type: ignore[arg-type]
    assert answer == ["history_segments", 1]
    assert slow.asked == 4

    refused = _SlowWorkflow(unanswered=1, status=RPCStatusCode.NOT_FOUND)
    with pytest.raises(RPCError):
        await caches.ask_workflow(refused, "history_segments", result_type=list)  # type: ignore[arg-type]
    assert refused.asked == 1
