"""The live event stream of a run on a real dev server: every record on topic `events` of
its Workflow Stream, contiguous and exactly once, for subscribers that join mid-run,
reconnect from a seq, follow a run across continue-as-new, or know nothing of
durable-agent; the records a UI needs; checkpoints over the whole chain; what `stream()`
says to bad input; and a retried streamed request leaving no garbled text."""

from __future__ import annotations

import asyncio
import base64
import gc
import itertools
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.contrib.workflow_streams import PollResult, WorkflowStreamClient
from temporalio.contrib.workflow_streams._types import _WorkflowStreamWireItem

from durable_agent import (
    AgentBuilder,
    AgentExecutionNode,
    AgentStreamRecord,
    FunctionModel,
    ModelDelta,
    ModelHTTPError,
    ModelMessage,
    ModelResponse,
    TestModel,
    TextPart,
    ToolCallPart,
)
from durable_agent.cli.live import RunView
from durable_agent.models import AgentInfo
from durable_agent.temporal import (
    AgentActivityConfig,
    AgentClient,
    AgentRegistration,
    AgentWorkflow,
)
from durable_agent.temporal.client import NotAnAgentRun, RunNotFound
from durable_agent.temporal.run_errors import NoWorker
from durable_agent.temporal.streams import StreamPastEnd, StreamReader

from .helpers import RecordingExecutor
from .temporal_support import fast_activity, new_worker, unique, wait_for_status

TEXT = "The weather in Paris is sunny and warm today."


def lookup(city: str) -> str:
    return f"sunny in {city}"


def deploy(env: str) -> str:
    return f"deployed to {env}"


def talking(step: int, tool: str = "lookup", **arguments: Any) -> ModelResponse:
    """A response that says something before it calls a tool, as models do."""
    return ModelResponse(
        parts=[
            TextPart(text=f"Step {step}: let me look that up for you."),
            ToolCallPart(id=f"c{step}", name=tool, arguments=arguments or {"city": "Paris"}),
        ]
    )


def streaming_agent(
    name: str, *, steps: int = 2, delay: float = 0.0, tool: Callable[..., Any] = lookup
) -> Any:
    script = [talking(i) for i in range(1, steps)]
    script.append(ModelResponse(parts=[TextPart(text=TEXT)]))
    model = TestModel.with_responses(script).streamed(chunk=6, delay=delay)
    return AgentBuilder(model).name(name).tool(tool, name="lookup").build()


def registration(agent: Any, **config: Any) -> AgentRegistration:
    """`agent` with quick retries, and `config`."""
    fast = fast_activity()
    return AgentRegistration(
        agent,
        AgentActivityConfig(
            prepare_model_request=fast,
            model_request=fast,
            tool_call=fast,
            validate_output=fast,
            **config,
        ),
    )


def seqs(records: list[AgentStreamRecord]) -> list[int]:
    return [r.seq for r in records]


def streamed_text(records: list[AgentStreamRecord], step: int) -> str:
    return "".join(
        r.data["text"]
        for r in records
        if r.kind == "model_delta" and r.data["run_step"] == step and r.data["part"] == "text"
    )


async def collect(
    agents: AgentClient, workflow_id: str, after: int | None = None
) -> list[AgentStreamRecord]:
    return [r async for r in agents.get(workflow_id).stream(after, poll_interval=0.05)]


async def test_a_finished_run_replays_every_record_once_in_order(client: Client) -> None:
    name = unique("stream")
    hosted = registration(streaming_agent(name))
    agents = AgentClient(client)
    async with new_worker(client, agents=[hosted]) as worker:
        handle = await agents.start(name, "weather?", task_queue=worker.task_queue)
        await handle.result()
        records = await collect(agents, handle.id)
        again = await collect(agents, handle.id, after=10)
    assert seqs(records) == list(range(len(records)))
    assert records[-1].kind == "node_complete"
    assert streamed_text(records, 1) == "Step 1: let me look that up for you."
    assert streamed_text(records, 2) == TEXT
    final = next(r for r in records if r.kind == "model_response" and r.data["run_step"] == 2)
    assert final.data["text"] == TEXT
    usage = [r for r in records if r.kind == "usage"]
    assert [u.data["total"]["requests"] for u in usage] == [1, 2]
    call = next(r for r in records if r.kind == "tool_call")
    assert call.data["arguments"] == {"city": "Paris"}
    returned = next(r for r in records if r.kind == "tool_return")
    assert returned.data["content"] == "sunny in Paris"
    assert again == records[11:]


async def test_streaming_off_publishes_no_deltas_and_sends_no_signal(client: Client) -> None:
    name = unique("stream-off")
    hosted = registration(streaming_agent(name))
    agents = AgentClient(client)
    async with new_worker(client, agents=[hosted]) as worker:
        on = await agents.start(name, "weather?", task_queue=worker.task_queue)
        off = await agents.start(
            name, "weather?", task_queue=worker.task_queue, stream_deltas=False
        )
        await on.result()
        await off.result()
        records_off = await collect(agents, off.id)
        history_on = await on.handle.fetch_history()
        history_off = await off.handle.fetch_history()
    assert not [r for r in records_off if r.kind == "model_delta"]
    final = [r.data["text"] for r in records_off if r.kind == "model_response"]
    assert final[-1] == TEXT
    signals_on = [
        e for e in history_on.events if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    signals_off = [
        e for e in history_off.events if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    assert signals_off == []
    assert len(signals_on) >= 2  # one batch or more per streamed request


async def test_a_subscriber_joining_mid_run_and_one_reconnecting_see_each_record_once(
    client: Client,
) -> None:
    name = unique("stream-live")
    reconnecting, calls = asyncio.Event(), 0

    async def held(city: str) -> str:
        """The lookup of step 2 waits for the test to reconnect: the run cannot end first."""
        nonlocal calls
        calls += 1
        if calls == 2:
            await reconnecting.wait()
        return lookup(city)

    hosted = registration(streaming_agent(name, steps=4, delay=0.04, tool=held))
    agents = AgentClient(client)
    async with new_worker(client, agents=[hosted]) as worker:
        handle = await agents.start(name, "weather?", task_queue=worker.task_queue)
        await wait_for_status(handle.handle, "running")
        while (await handle.status()).run_step < 1:
            await asyncio.sleep(0.05)
        late = asyncio.create_task(collect(agents, handle.id))
        first: list[AgentStreamRecord] = []
        async for record in handle.stream(poll_interval=0.05):
            first.append(record)
            if record.kind == "model_delta" and record.data["run_step"] == 2:
                break  # a disconnect in the middle of a streamed answer
        assert (await handle.status()).status == "running", "reconnect while the run goes on"
        reconnecting.set()
        rest = await collect(agents, handle.id, after=first[-1].seq)
        joined = await late
        result = await handle.result()
        replayed = await collect(agents, handle.id)
    assert result.output == TEXT
    assert seqs(replayed) == list(range(len(replayed)))
    assert joined == replayed
    assert first + rest == replayed
    assert streamed_text(replayed, 2) == "Step 2: let me look that up for you."


async def test_seq_is_contiguous_across_continue_as_new_and_checkpoints_span_the_chain(
    client: Client,
) -> None:
    name = unique("stream-can")
    steps = 7
    agent = streaming_agent(name, steps=steps, delay=0.01)
    hosted = registration(agent, continue_as_new_after_steps=2)
    executor = RecordingExecutor()
    await agent.with_executor(executor).run("weather?")
    agents = AgentClient(client)
    async with new_worker(client, agents=[hosted]) as worker:
        handle = await agents.start(name, "weather?", task_queue=worker.task_queue)
        live = asyncio.create_task(collect(agents, handle.id))
        plain = asyncio.create_task(_plain_subscriber(client, handle.id))
        result = await handle.result()
        followed = await asyncio.wait_for(live, 30)
        replayed = await collect(agents, handle.id)
        from_the_middle = await collect(agents, handle.id, after=replayed[len(replayed) // 2].seq)
        plain_records = await asyncio.wait_for(plain, 30)
        runs = await handle.runs()
        chain = await handle.checkpoint_chain()
        flat = await handle.checkpoints()
        view = await handle.status()
    assert result.output == TEXT
    assert len(runs) >= 3, runs
    assert view.continued_as_new == len(runs) - 1
    assert seqs(replayed) == list(range(len(replayed)))
    assert followed == replayed
    assert from_the_middle == replayed[len(replayed) // 2 + 1 :]
    assert plain_records == replayed, "a plain Workflow Streams client follows topic events"
    continued = [r for r in replayed if r.kind == "suspended"]
    assert len(continued) == len(runs) - 1
    assert [run.first_seq for run in runs[1:]] == [r.seq + 1 for r in continued]
    for step in range(1, steps):
        assert streamed_text(replayed, step) == f"Step {step}: let me look that up for you."
    assert chain.missing == []
    assert chain.indexes == list(range(view.checkpoint_count))
    assert [e.node.value for e in chain.checkpoints] == executor.nodes
    assert flat == chain.checkpoints


async def _plain_subscriber(
    client: Client, workflow_id: str, per_record: float = 0.0
) -> list[AgentStreamRecord]:
    """Workflow Streams' own client: no durable-agent code but the record's type; with
    `per_record`, it does that many seconds of work on each record (and falls behind)."""
    stream = WorkflowStreamClient.create(client, workflow_id)
    out: list[AgentStreamRecord] = []
    async for item in stream.subscribe(
        ["events"], result_type=AgentStreamRecord, poll_cooldown=timedelta(milliseconds=50)
    ):
        assert item.offset == item.data.seq
        out.append(item.data)
        if per_record:
            await asyncio.sleep(per_record)
    return out


async def test_records_a_ui_needs_approvals_decisions_suspend_and_resume(client: Client) -> None:
    name = unique("stream-ui")
    model = TestModel.with_responses(
        [talking(1, "deploy", env="prod"), ModelResponse(parts=[TextPart(text="Deployed.")])]
    )
    agent = AgentBuilder(model).name(name).tool(deploy).approval_required_tools(["deploy"]).build()
    hosted = registration(agent)
    agents = AgentClient(client)
    async with new_worker(client, agents=[hosted]) as worker:
        handle = await agents.start(
            name,
            "deploy",
            task_queue=worker.task_queue,
            suspend_at=[AgentExecutionNode.VALIDATE_OUTPUT],
        )
        await wait_for_status(handle.handle, "waiting")
        await handle.approve("c1", by="alice")
        while (await handle.status()).suspend_reason is None:
            await asyncio.sleep(0.05)
        await handle.resume("looks fine")
        await handle.result()
        records = await collect(agents, handle.id)
    kinds = [r.kind for r in records]
    requested = records[kinds.index("approval_requested")]
    assert requested.data == {
        "tool_call_id": "c1",
        "tool_name": "deploy",
        "arguments": {"env": "prod"},
        "reason": None,
    }
    assert (
        kinds.index("approval_requested") < kinds.index("waiting") < kinds.index("approval_decided")
    )
    decided = records[kinds.index("approval_decided")]
    assert decided.data["approved"] is True
    assert decided.data["decided_by"] == "alice"
    assert records[kinds.index("suspended")].data == {"reason": "suspend_at validate_output"}
    assert records[kinds.index("resumed")].data == {"reason": "looks fine"}
    assert seqs(records) == list(range(len(records)))
    view = RunView(handle.id)
    for record in records:
        view.apply(record)
    assert view.status == "completed"
    assert not view.waiting
    assert view.calls["c1"].state == "returned"


async def test_stream_of_bad_targets_and_seqs(client: Client) -> None:
    name = unique("stream-bad")
    hosted = registration(streaming_agent(name))
    agents = AgentClient(client)
    async with new_worker(client, workflows=[Elsewhere], agents=[hosted]) as worker:
        with pytest.raises(RunNotFound, match="no workflow with id 'nope-"):
            await anext(agents.get(unique("nope")).stream())
        other = await client.start_workflow(
            Elsewhere.run, id=unique("other"), task_queue=worker.task_queue
        )
        with pytest.raises(NotAnAgentRun, match="is not an agent run"):
            await anext(agents.get(other.id).stream())
        await other.terminate()
        handle = await agents.start(name, "weather?", task_queue=worker.task_queue)
        with pytest.raises(ValueError, match="after must be a seq"):
            await anext(handle.stream(-2))
        await handle.result()
        last = (await collect(agents, handle.id))[-1].seq
        assert await handle.stream_position() == last + 1
        assert await collect(agents, handle.id, after=last) == []
        with pytest.raises(StreamPastEnd, match=f"its last record is seq {last}") as past:
            await collect(agents, handle.id, after=last + 5)
        assert past.value.last_seq == last

        waiting = await agents.start(
            name,
            "weather?",
            task_queue=worker.task_queue,
            suspend_at=[AgentExecutionNode.VALIDATE_OUTPUT],
        )
        while (await waiting.status()).suspend_reason is None:
            await asyncio.sleep(0.05)
        ahead = await waiting.stream_position() + 3
        later = asyncio.create_task(_first(waiting.stream(ahead - 1, poll_interval=0.05)))
        outsider = WorkflowStreamClient.create(client, waiting.id)
        async with outsider:
            outsider.topic("events").publish({"seq": 999, "kind": "run_complete"})
        await asyncio.sleep(0.5)
        assert not later.done(), "a seq past the end of a running run is waited for"
        await waiting.resume()
        assert (await asyncio.wait_for(later, 20)).seq == ahead
        await waiting.result()
        records = await collect(agents, waiting.id)
    assert seqs(records) == list(range(len(records))), "an outside publish is refused"
    assert [r.kind for r in records].count("run_complete") == 1


async def _first(records: AsyncIterator[AgentStreamRecord]) -> AgentStreamRecord:
    return await anext(records)


@workflow.defn(name="Elsewhere")
class Elsewhere:
    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)


FIRST_TRY = "Bonjour, voici la mét"
RETRIED = "The forecast for Paris: sunny, 24 degrees."


async def flaky_stream(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | ModelDelta | ModelResponse]:
    """Attempt 1 writes half an answer, then the connection breaks; attempt 2 writes
    another one whole."""
    if activity.info().attempt == 1:
        for piece in (FIRST_TRY[:10], FIRST_TRY[10:]):
            yield piece
            await asyncio.sleep(0.4)  # each piece is its own batch
        raise ModelHTTPError("connection reset by peer", status_code=None, model_name="flaky")
    yield ModelDelta(kind="thinking", text="Checking the forecast.")
    for start in range(0, len(RETRIED), 8):
        yield RETRIED[start : start + 8]
        await asyncio.sleep(0.02)


async def test_a_retried_streamed_request_leaves_no_garbled_text(client: Client) -> None:
    name = unique("stream-retry")
    agent = AgentBuilder(FunctionModel(stream_function=flaky_stream)).name(name).build()
    hosted = registration(agent, delta_flush_interval=timedelta(milliseconds=50))
    agents = AgentClient(client)
    async with new_worker(client, agents=[hosted]) as worker:
        handle = await agents.start(name, "forecast?", task_queue=worker.task_queue)
        view = RunView(handle.id)
        shown: list[str] = []
        async for record in handle.stream(poll_interval=0.05):
            view.apply(record)
            shown.append(view.text(1))
        result = await handle.result()
        records = await collect(agents, handle.id)
    assert result.output == RETRIED
    kinds = [r.kind for r in records]
    assert "model_retry" in kinds
    retry = records[kinds.index("model_retry")]
    assert retry.data == {"run_step": 1, "attempt": 2, "superseded": 1}
    before = [r for r in records[: kinds.index("model_retry")] if r.kind == "model_delta"]
    assert "".join(r.data["text"] for r in before) == FIRST_TRY
    after = [r for r in records[kinds.index("model_retry") :] if r.kind == "model_delta"]
    assert {r.data["attempt"] for r in after} == {2}
    assert streamed_text(records[kinds.index("model_retry") :], 1) == RETRIED
    # What a client shows is the first attempt's text while it streams, then only the
    # retry's: never the two run together.
    assert shown[-1] == RETRIED
    assert view.steps[1].thinking == "Checking the forecast."
    assert all(FIRST_TRY not in text or text == FIRST_TRY for text in shown)
    assert all(not (text.startswith(FIRST_TRY) and len(text) > len(FIRST_TRY)) for text in shown)
    assert all(RETRIED.startswith(text) for text in shown[shown.index(RETRIED) :])


def writer(steps: int, seconds: float) -> Any:
    """A model that writes a sentence for `seconds` before each tool call, streaming or
    not (the same response after the same time)."""

    def response(messages: list[ModelMessage]) -> ModelResponse:
        step = 1 + sum(1 for m in messages if isinstance(m, ModelResponse))
        if step > steps:
            return ModelResponse(parts=[TextPart(text="done")])
        return talking(step)

    async def whole(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(seconds)
        return response(messages)

    async def streamed(
        messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | ModelDelta | ModelResponse]:
        final = response(messages)
        text = "".join(p.text for p in final.parts if isinstance(p, TextPart))
        for start in range(0, len(text), 6):
            await asyncio.sleep(seconds / (len(text) / 6))
            yield text[start : start + 6]
        yield final

    return FunctionModel(whole, stream_function=streamed)


async def test_streaming_with_a_subscriber_keeps_history_within_1_5x_of_streaming_off(
    client: Client,
) -> None:
    steps = 15
    name = unique("stream-cost")
    hosted = registration(AgentBuilder(writer(steps, 0.12)).name(name).tool(lookup).build())
    agents = AgentClient(client)
    async with new_worker(client, agents=[hosted]) as worker:
        on = await agents.start(name, "go", task_queue=worker.task_queue)
        read = await collect(agents, on.id)
        off = await agents.start(name, "go", task_queue=worker.task_queue, stream_deltas=False)
        await off.result()
        bytes_on = sum(e.ByteSize() for e in (await on.handle.fetch_history()).events)
        bytes_off = sum(e.ByteSize() for e in (await off.handle.fetch_history()).events)
    assert streamed_text(read, 3) == "Step 3: let me look that up for you."
    ratio = bytes_on / bytes_off
    print(f"\nhistory bytes, streaming on with a subscriber / off: {ratio:.2f}")
    assert ratio <= 1.5


async def test_a_plain_subscriber_far_behind_crosses_continue_as_new_without_a_gap(
    client: Client,
) -> None:
    """Issue 26, item 5: a Workflow Streams client more than 64 records behind when the run
    continued as new used to skip to the successor's first record; the handoff now keeps
    what the slowest subscriber that polled lately has not read (up to 256 KiB)."""
    name = unique("stream-lag")
    agent = streaming_agent(name, steps=10, delay=0.0)
    hosted = registration(agent, continue_as_new_after_steps=3)
    agents = AgentClient(client)
    async with new_worker(client, agents=[hosted]) as worker:
        handle = await agents.start(name, "weather?", task_queue=worker.task_queue)
        slow = asyncio.create_task(_plain_subscriber(client, handle.id, per_record=0.05))
        await handle.result()
        replayed = await collect(agents, handle.id)
        slow_records = await asyncio.wait_for(slow, 120)
        runs = await handle.runs()
    assert len(runs) >= 3, runs
    per_run = [b.first_seq - a.first_seq for a, b in itertools.pairwise(runs)]
    assert max(per_run) > 64, f"a run should publish more than the baseline: {per_run}"
    assert seqs(slow_records) == seqs(replayed), "no gap, no repeat"
    assert slow_records == replayed


async def test_a_plain_subscriber_of_a_waiting_run_reads_each_record_while_the_run_waits(
    client: Client,
) -> None:
    """Records nobody reads wait as bytes in the workflow (`EventStream.flush`): a poll that
    arrives while the run waits gets them all at once, and one already waiting is woken by
    each record that follows, with no query or continue-as-new in between."""
    name = unique("stream-waiting")
    model = TestModel.with_responses(
        [
            talking(1, "deploy", env="staging"),
            talking(2, "deploy", env="prod"),
            ModelResponse(parts=[TextPart(text="Deployed twice.")]),
        ]
    )
    agent = AgentBuilder(model).name(name).tool(deploy).approval_required_tools(["deploy"]).build()
    hosted = registration(agent)
    agents = AgentClient(client)
    seen: list[AgentStreamRecord] = []

    async def subscribe() -> None:
        stream = WorkflowStreamClient.create(client, handle.id)
        async for item in stream.subscribe(
            ["events"], result_type=AgentStreamRecord, poll_cooldown=timedelta(milliseconds=50)
        ):
            seen.append(item.data)

    async def until_seen(count: int, kind: str) -> None:
        while sum(r.kind == kind for r in seen) < count:
            await asyncio.sleep(0.05)

    async with new_worker(client, agents=[hosted]) as worker:
        handle = await agents.start(name, "deploy", task_queue=worker.task_queue)
        await wait_for_status(handle.handle, "waiting")
        # Nobody has read the stream: its log holds no `Payload` (each would keep a
        # protobuf arena for as long as the run is cached), the records wait as bytes.
        (waiting,) = [
            o
            for o in gc.get_objects()
            if type(o) is AgentWorkflow and getattr(vars(o).get("input"), "agent", "") == name
        ]
        assert waiting.events.stream._log == []
        assert waiting.events._unread
        subscriber = asyncio.create_task(subscribe())
        await asyncio.wait_for(until_seen(1, "waiting"), 20)
        assert (await handle.status()).status == "waiting"
        # The subscriber polls again 50 ms after a batch: its poll now waits in the
        # workflow, and what the approval publishes has to wake it.
        await asyncio.sleep(0.5)
        await handle.approve("c1", by="alice")
        await asyncio.wait_for(until_seen(2, "waiting"), 20)
        view = await handle.status()
        assert view.status == "waiting", view
        assert [p.tool_call_id for p in view.pending_approvals] == ["c2"]
        assert [r.data["tool_call_id"] for r in seen if r.kind == "approval_decided"] == ["c1"]
        await handle.approve("c2", by="alice")
        await handle.result()
        await asyncio.wait_for(subscriber, 30)
        replayed = await collect(agents, handle.id)
    assert seen == replayed
    assert seqs(seen) == list(range(len(seen)))


# -- a follower through a worker's death -------------------------------------------------------


class _ScriptedReader(StreamReader):
    """A `StreamReader` whose polls and status answers are scripted (the retry decisions
    alone; the server's part is `tests/faults/test_stream_kills.py`)."""

    def __init__(self, polls: list[PollResult | Exception], status: WorkflowExecutionStatus):
        super().__init__(SimpleNamespace(data_converter=pydantic_data_converter), "wf", 0.01)  # type: ignore[arg-type]
        self.polls = polls
        self.status = status

    async def _poll(self, run_id: str, offset: int) -> PollResult:
        answer = self.polls.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def _status(self, run_id: str | None) -> WorkflowExecutionStatus | None:
        return self.status


def _poll_of(*records: AgentStreamRecord) -> PollResult:
    converter = pydantic_data_converter.payload_converter
    items = [
        _WorkflowStreamWireItem(
            topic="events",
            data=base64.b64encode(converter.to_payload(r).SerializeToString()).decode(),
            offset=r.seq,
        )
        for r in records
    ]
    return PollResult(items=items, next_offset=records[-1].seq + 1 if records else 0)


async def test_a_follower_reads_once_more_when_the_run_closed_while_its_poll_waited() -> None:
    """A poll left waiting on a killed worker's sticky queue times out; by then another
    worker finished the run: the follower reads what the run published, instead of
    reporting no worker."""
    started = AgentStreamRecord(seq=0, kind="run_started", run_id="r", data={})
    ended = AgentStreamRecord(seq=1, kind="run_completed", run_id="r", data={})
    no_worker = NoWorker("no worker answered", workflow_id="wf")
    reader = _ScriptedReader(
        [_poll_of(started), no_worker, _poll_of(started, ended)],
        WorkflowExecutionStatus.COMPLETED,
    )
    seen = [r.seq async for r in reader._follow("run", 0, poll_interval=0)]
    assert seen == [0, 1]
    # a closed run no worker answers for at all: reported at once, as before
    never = _ScriptedReader([no_worker], WorkflowExecutionStatus.COMPLETED)
    with pytest.raises(NoWorker):
        _ = [r async for r in never._follow("run", 0, poll_interval=0)]
    # the read after it closed unanswered too: reported
    twice = _ScriptedReader(
        [_poll_of(started), no_worker, no_worker], WorkflowExecutionStatus.COMPLETED
    )
    with pytest.raises(NoWorker):
        _ = [r async for r in twice._follow("run", 0, poll_interval=0)]
