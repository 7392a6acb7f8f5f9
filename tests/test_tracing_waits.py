"""A run's span is exported when the run starts, not when it ends (issue 38, item 15): a run
waiting for a human has its `invoke_agent` span in the backend, its children parented to it,
while it waits; its end goes out once as `run_end {agent}`; a worker restart while it waits
and continue-as-new export nothing twice; a run that fails at its very first step (an
unknown agent, a model it does not allow, a fork out of range) still has its span. Real SDK
exporters over OTLP/HTTP to the receiver in the test, a real dev server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from temporalio.client import Client, WorkflowFailureError

from durable_agent import AgentBuilder, TestModel
from durable_agent.engine.overrides import AgentOverrides
from durable_agent.temporal import AgentWorkflow, AgentWorkflowInput, DurableAgentPlugin
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.registry import AgentActivityConfig, AgentRegistration
from durable_agent.temporal.wire import ApprovalSignal, ResumeFrom

from .helpers import call, text_response, tool_response
from .otlp_receiver import OtlpReceiver, ReceivedSpan
from .record_release_histories import (
    ROOT,
    TreeWorkers,
    extract_release,
    wait_for,
    waiting_for_approval,
)
from .temporal_support import new_replayer, new_worker, start_agent, unique, wait_for_status


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    yield server
    server.close()


@pytest.fixture
def provider(receiver: OtlpReceiver) -> Iterator[TracerProvider]:
    sdk = TracerProvider()
    sdk.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{receiver.endpoint}/v1/traces"))
    )
    yield sdk
    sdk.shutdown()


@pytest.fixture
async def traced(dev_server: DevServer, provider: TracerProvider) -> Client:
    return await Client.connect(dev_server.address, plugins=[DurableAgentPlugin(tracing=provider)])


def deploy(env: str) -> str:
    return f"deployed to {env}"


def waiting_agent(name: str) -> Any:
    """Asks to deploy (needs approval), then answers."""
    model = TestModel.with_responses(
        [tool_response(call("deploy", "d1", env="prod")), text_response("deployed")]
    )
    return AgentBuilder(model).name(name).tool(deploy).approval_required_tools(["deploy"]).build()


def named(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == name]


async def exported(receiver: OtlpReceiver, name: str, timeout: float = 15) -> list[ReceivedSpan]:
    return await receiver.wait_for(lambda s: bool(named(s, name)), timeout=timeout)


async def approve(handle: Any) -> None:
    await handle.execute_update(
        AgentWorkflow.submit_approval,
        ApprovalSignal(tool_call_id="d1", approved=True, decided_by="alice"),
    )


def one_trace(spans: list[ReceivedSpan], agent: str) -> tuple[ReceivedSpan, ReceivedSpan]:
    """The run's two spans (`invoke_agent`, `run_end`), each exported once, every other
    span in their trace and under the run's span, no span id twice."""
    (run,) = named(spans, f"invoke_agent {agent}")
    (end,) = named(spans, f"run_end {agent}")
    assert {s.trace_id for s in spans} == {run.trace_id}
    assert all(s.parent_span_id == run.span_id for s in spans if s is not run)
    assert len({s.span_id for s in spans}) == len(spans)
    return run, end


async def test_a_waiting_runs_span_is_exported_before_it_is_approved(
    traced: Client, provider: TracerProvider, receiver: OtlpReceiver
) -> None:
    name = unique("waits")
    agent = waiting_agent(name)
    async with new_worker(traced, agents=[agent]) as worker:
        handle = await start_agent(traced, worker, name, "ship it")
        await wait_for_status(handle, "waiting")
        waiting = await exported(receiver, f"invoke_agent {name}")
        (run,) = named(waiting, f"invoke_agent {name}")
        (chat,) = named(waiting, "chat test")  # the request that asked for the call
        assert chat.parent_span_id == run.span_id
        assert chat.trace_id == run.trace_id
        assert run.parent_span_id == ""
        assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert run.attributes["gen_ai.agent.name"] == name
        assert run.attributes["durable_agent.workflow_id"] == handle.id
        assert run.end == run.start  # a mark where the run began: its end comes later
        assert not named(waiting, f"run_end {name}")
        await approve(handle)
        result = await handle.result()
    assert result.output == "deployed"
    spans = await exported(receiver, f"run_end {name}")
    run, end = one_trace(spans, name)
    assert end.attributes["durable_agent.status"] == "completed"
    assert end.attributes["gen_ai.usage.input_tokens"] > 0
    assert end.attributes["durable_agent.usage.requests"] == 2
    assert end.start == run.start  # its bar is the whole run
    assert end.end >= max(s.end for s in spans)
    assert len(named(spans, "chat test")) == 2
    assert len(named(spans, "approval deploy")) == 1


async def test_a_worker_restart_while_waiting_and_continue_as_new_export_nothing_twice(
    traced: Client, provider: TracerProvider, receiver: OtlpReceiver
) -> None:
    name = unique("restart")
    agent = AgentRegistration(
        waiting_agent(name), AgentActivityConfig(continue_as_new_after_steps=1)
    )
    queue = f"tq-{unique('restart')}"
    async with new_worker(traced, queue, agents=[agent]) as worker:
        handle = await start_agent(traced, worker, name, "ship it")
        await wait_for_status(handle, "waiting")
        await exported(receiver, f"invoke_agent {name}")
    # A new worker (nothing cached) replays the waiting run when the decision arrives.
    async with new_worker(traced, queue, agents=[agent]):
        await approve(handle)
        result = await handle.result()
        view = await handle.query(AgentWorkflow.status)
    assert result.output == "deployed"
    assert view.continued_as_new >= 1
    spans = await exported(receiver, f"run_end {name}")
    await asyncio.sleep(0.3)  # anything exported twice would have arrived by now
    spans = list(receiver.spans)
    _, end = one_trace(spans, name)
    assert end.attributes["durable_agent.status"] == "completed"
    assert len(named(spans, "chat test")) == 2
    assert len(named(spans, "execute_tool deploy")) == 1
    assert len(named(spans, "approval deploy")) == 1
    # A replay of the whole history, with tracing on, adds nothing; with it off, it replays.
    before = len(receiver.spans)
    history = await handle.fetch_history()
    await new_replayer(agents=[agent], tracing=provider).replay_workflow(history)
    await new_replayer(agents=[agent]).replay_workflow(history)
    await asyncio.sleep(0.3)
    assert len(receiver.spans) == before


async def failed_at_once(client: Client, queue: str, input: AgentWorkflowInput) -> str:
    handle = await client.start_workflow(
        AgentWorkflow.run, input, id=unique("first-step"), task_queue=queue
    )
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    return handle.id


@pytest.mark.parametrize("how", ["unknown_agent", "model_not_allowed", "fork_out_of_range"])
async def test_a_run_that_fails_at_its_first_step_has_its_span(
    traced: Client, provider: TracerProvider, receiver: OtlpReceiver, how: str
) -> None:
    name = unique("first")
    agent = waiting_agent(name)
    async with new_worker(traced, agents=[agent]) as worker:
        queue = worker.task_queue
        if how == "unknown_agent":
            expected, kind = "nosuchagent", "unknown_agent"
            input = AgentWorkflowInput(agent=expected, prompt="hi")
        elif how == "model_not_allowed":
            expected, kind = name, "invalid_input"
            input = AgentWorkflowInput(
                agent=name, prompt="hi", overrides=AgentOverrides(model="notallowed")
            )
        else:
            source = await start_agent(traced, worker, name, "ship it")
            await wait_for_status(source, "waiting")
            expected, kind = name, "index_out_of_range"
            input = AgentWorkflowInput(
                agent=name, prompt="", resume_from=ResumeFrom(workflow_id=source.id, index=999)
            )
        workflow_id = await failed_at_once(traced, queue, input)
    spans = await receiver.wait_for(
        lambda s: any(x.attributes.get("durable_agent.workflow_id") == workflow_id for x in s)
    )
    (run,) = [s for s in spans if s.attributes.get("durable_agent.workflow_id") == workflow_id]
    assert run.name == f"invoke_agent {expected}"
    assert run.status_code == 2  # ERROR
    assert run.attributes["error.type"] == kind
    assert run.attributes["durable_agent.status"] == "failed"
    assert run.parent_span_id == ""


async def test_histories_recorded_before_replay_with_tracing_on_and_export_nothing(
    provider: TracerProvider, receiver: OtlpReceiver
) -> None:
    """Runs recorded without the run-span marker (every committed history, releases'
    included) replay on a tracing worker unchanged: no marker is asked for, nothing goes
    out."""
    from durable_agent.testing import replay_histories

    from .test_replay import HISTORIES, REPLAY_OPTIONS, every_agent

    replayed = await replay_histories(
        HISTORIES, agents=every_agent(), plugin_options={**REPLAY_OPTIONS, "tracing": provider}
    )
    assert replayed >= len(HISTORIES)
    provider.force_flush()
    await asyncio.sleep(0.3)
    assert receiver.spans == []


BEFORE = "7252f6c"
"""The last commit whose workers exported a run's span only at its end."""


async def test_a_run_begun_before_keeps_its_span_at_its_end_after_an_upgrade(
    dev_server: DevServer, receiver: OtlpReceiver, tmp_path: Path
) -> None:
    """A run left waiting by a worker of the release before (which exports the run's span
    when the run ends), finished by today's worker: one `invoke_agent` span, at its end,
    parent of everything; no `run_end`, nothing twice."""
    tree = extract_release(BEFORE, tmp_path / "tree")
    async with TreeWorkers(dev_server.address, tmp_path / "run", "span-upgrade") as workers:
        workers.extra_env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_METRICS_EXPORTER": "none",
        }
        old = await workers.start_tree_worker(tree, "before")
        client = await Client.connect(dev_server.address)
        handle = await client.start_workflow(
            "AgentWorkflow",
            {"agent": "upgrade-deployer", "prompt": "ship it"},
            id=unique("span-upgrade"),
            task_queue=workers.task_queue,
        )
        await wait_for(handle, waiting_for_approval("d1"), "approval of d1")
        await receiver.wait_for(lambda s: len(named(s, "chat upgrade-deployer-script")) == 2)
        assert not [s for s in receiver.spans if s.name.startswith("invoke_agent")]
        old.kill()
        await workers.start_tree_worker(ROOT, "today")
        await handle.execute_update(
            "submit_approval", {"tool_call_id": "d1", "approved": True, "decided_by": "alice"}
        )
        (workers.dir / "release").touch()
        await asyncio.wait_for(handle.result(), 60)
        spans = await exported(receiver, "invoke_agent upgrade-deployer")
        await asyncio.sleep(0.5)
        spans = list(receiver.spans)
    (run,) = named(spans, "invoke_agent upgrade-deployer")
    assert not [s for s in spans if s.name.startswith("run_end")]
    assert run.attributes["durable_agent.status"] == "completed"
    assert {s.trace_id for s in spans} == {run.trace_id}
    assert all(s.parent_span_id == run.span_id for s in spans if s is not run)
    assert len({s.span_id for s in spans}) == len(spans)
