"""Traces by the OpenTelemetry GenAI conventions, exported by the real SDK over OTLP/HTTP to
a receiver in the test (`otlp_receiver`): in-process runs, runs on Temporal (one trace per
run across continue-as-new, a human's decision and a worker SIGKILL; no span from a
replay; the run's span at its start and its `run_end`, see also `test_tracing_waits.py`),
message content only when asked for."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from temporalio.client import Client

from durable_agent import AgentBuilder, TestModel, ToolApprovalDecision
from durable_agent.cli.logs import configure_logging
from durable_agent.engine import telemetry
from durable_agent.temporal import AgentWorkflow, AgentWorkflowInput, DurableAgentPlugin
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.registry import AgentActivityConfig, AgentRegistration
from durable_agent.temporal.wire import ApprovalSignal

from .helpers import RecordingExecutor, call, text_response, tool_response
from .otlp_receiver import OtlpReceiver, ReceivedSpan
from .temporal_support import (
    new_replayer,
    new_worker,
    start_agent,
    start_worker_process,
    unique,
    wait_for_status,
)
from .test_worker_crash import wait_for_file
from .tracing_agents import SECRET

CONTENT = telemetry.CAPTURE_CONTENT_ENV


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    yield server
    server.close()


@pytest.fixture
def provider(receiver: OtlpReceiver) -> Iterator[TracerProvider]:
    """A real SDK provider exporting each span over OTLP/HTTP as it ends."""
    sdk = TracerProvider()
    sdk.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{receiver.endpoint}/v1/traces"))
    )
    yield sdk
    sdk.shutdown()


@pytest.fixture
def traced(provider: TracerProvider) -> Iterator[TracerProvider]:
    """In-process runs of this test trace to `provider` (the global one stays untouched)."""
    token = telemetry.use_provider(provider)
    yield provider
    telemetry._provider.reset(token)


def lookup(key: str) -> str:
    return f"{key} is {SECRET}"


def tool_agent(name: str) -> Any:
    model = TestModel.with_responses(
        [tool_response(call("lookup", "c1", key="k")), text_response("the answer")]
    )
    return AgentBuilder(model).name(name).tool(lookup).build()


def by_name(spans: list[ReceivedSpan]) -> dict[str, list[ReceivedSpan]]:
    out: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        out.setdefault(span.name, []).append(span)
    return out


def no_content(spans: list[ReceivedSpan]) -> None:
    for span in spans:
        for key, value in span.attributes.items():
            assert SECRET not in str(value), (span.name, key)
            assert not key.startswith(("gen_ai.input", "gen_ai.output")), (span.name, key)
            assert key not in ("gen_ai.tool.call.arguments", "gen_ai.tool.call.result")


# -- in-process ---------------------------------------------------------------------------------


async def test_an_in_process_run_is_one_trace_by_the_conventions(
    traced: TracerProvider, receiver: OtlpReceiver
) -> None:
    executor = RecordingExecutor()
    name = unique("traced")
    result = await tool_agent(name).with_executor(executor).run(f"find {SECRET}")
    spans = await receiver.wait_for(lambda s: any(x.name.startswith("invoke_agent") for x in s))
    named = by_name(spans)
    (run,) = named[f"invoke_agent {name}"]
    chats = named["chat test"]
    (tool,) = named["execute_tool lookup"]
    assert len(chats) == 2
    assert {s.trace_id for s in spans} == {run.trace_id}
    assert run.parent_span_id == ""
    assert all(s.parent_span_id == run.span_id for s in [*chats, tool])
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.agent.name"] == name
    assert run.attributes["durable_agent.status"] == "completed"
    for chat in chats:
        assert chat.kind == 3  # CLIENT
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "test"
        assert chat.attributes["gen_ai.response.model"] == "test"
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
        assert "gen_ai.provider.name" not in chat.attributes  # a test model has no provider
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "lookup"
    assert tool.attributes["gen_ai.tool.call.id"] == "c1"
    assert "error.type" not in tool.attributes
    no_content(spans)
    # The run's trace context: in its state and in every checkpoint's evidence.
    context = result.state.trace_context
    assert context is not None
    assert (context.trace_id, context.span_id) == (run.trace_id, run.span_id)
    assert all(c.resume.trace_context == context for c in executor.checkpoints)
    assert all(c.metadata.trace_id == run.trace_id for c in executor.checkpoints)
    assert all(c.metadata.span_id == run.span_id for c in executor.checkpoints)


async def test_message_content_only_when_switched_on(
    traced: TracerProvider, receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CONTENT, "true")
    await tool_agent(unique("content")).run(f"find {SECRET}")
    spans = await receiver.wait_for(lambda s: any(x.name.startswith("invoke_agent") for x in s))
    named = by_name(spans)
    first = named["chat test"][0]
    assert SECRET in first.attributes["gen_ai.input.messages"]
    assert "the answer" in named["chat test"][1].attributes["gen_ai.output.messages"]
    (tool,) = named["execute_tool lookup"]
    assert tool.attributes["gen_ai.tool.call.arguments"] == '{"key": "k"}'
    assert SECRET in tool.attributes["gen_ai.tool.call.result"]


async def test_a_failing_tool_and_model_say_why(
    traced: TracerProvider, receiver: OtlpReceiver
) -> None:
    def broken(key: str) -> str:
        raise RuntimeError("disk on fire")

    model = TestModel.with_responses(
        [tool_response(call("nope", "c0"), call("broken", "c1", key="k")), text_response("x")]
    )
    agent = AgentBuilder(model).name(unique("failing")).tool(broken).build()
    with pytest.raises(RuntimeError):
        await agent.run("go")
    spans = await receiver.wait_for(lambda s: any(x.name.startswith("invoke_agent") for x in s))
    named = by_name(spans)
    (unknown,) = named["execute_tool nope"]
    (failed,) = named["execute_tool broken"]
    (run,) = [s for s in spans if s.name.startswith("invoke_agent")]
    assert unknown.attributes["error.type"] == "retry"
    assert failed.attributes["error.type"] == "RuntimeError"
    assert failed.status_code == 2  # ERROR
    assert run.status_code == 2
    assert run.attributes["error.type"] == "RuntimeError"


async def test_a_run_continued_after_a_human_stays_in_its_trace(
    traced: TracerProvider, receiver: OtlpReceiver
) -> None:
    model = TestModel.with_responses(
        [tool_response(call("lookup", "c1", key="k")), text_response("ok")]
    )
    agent = (
        AgentBuilder(model)
        .name(unique("hitl"))
        .tool(lookup)
        .approval_required_tools(["lookup"])
        .build()
    )
    waiting = await agent.run("go")
    assert waiting.status == "waiting"
    done = await agent.resume_after_hitl(
        waiting.state, approvals={"c1": ToolApprovalDecision.approved(decided_by="alice")}
    )
    assert done.output == "ok"
    spans = await receiver.wait_for(
        lambda s: len([x for x in s if x.name.startswith("invoke_agent")]) == 2
    )
    first, second = sorted(
        (s for s in spans if s.name.startswith("invoke_agent")), key=lambda s: s.start
    )
    assert {s.trace_id for s in spans} == {first.trace_id}
    assert second.parent_span_id == first.span_id
    assert done.state.trace_context is not None
    assert done.state.trace_context.span_id == first.span_id


async def test_nothing_is_traced_without_a_provider(receiver: OtlpReceiver) -> None:
    result = await tool_agent(unique("dark")).run("go")
    assert result.state.trace_context is None
    await asyncio.sleep(0.2)
    assert receiver.spans == []


def test_log_records_carry_the_trace(
    traced: TracerProvider, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("json")
    tracer = telemetry.tracer()
    with tracer.start_as_current_span("outer") as span:
        structlog.get_logger("t").warning("inside")
    structlog.get_logger("t").warning("outside")
    lines = [line for line in capsys.readouterr().err.splitlines() if '"event"' in line]
    inside = next(line for line in lines if '"inside"' in line)
    outside = next(line for line in lines if '"outside"' in line)
    context = span.get_span_context()
    assert f'"trace_id": "{context.trace_id:032x}"' in inside
    assert f'"span_id": "{context.span_id:016x}"' in inside
    assert "trace_id" not in outside


# -- on Temporal --------------------------------------------------------------------------------


def approval_agent(name: str) -> Any:
    """Three model requests, a tool, a tool that needs approval; priced by no one."""
    model = TestModel.with_responses(
        [
            tool_response(call("lookup", "c1", key="k")),
            tool_response(call("lookup", "c2", key="j")),
            text_response(f"done {SECRET}"),
        ]
    )
    return AgentBuilder(model).name(name).tool(lookup).approval_required_tools(["lookup"]).build()


async def traced_client(dev_server: DevServer, provider: TracerProvider) -> Client:
    return await Client.connect(dev_server.address, plugins=[DurableAgentPlugin(tracing=provider)])


async def test_a_run_on_temporal_is_one_trace_across_continue_as_new_and_a_human(
    dev_server: DevServer, provider: TracerProvider, receiver: OtlpReceiver
) -> None:
    client = await traced_client(dev_server, provider)
    name = unique("traced")
    agent = AgentRegistration(
        approval_agent(name), AgentActivityConfig(continue_as_new_after_steps=1)
    )
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, f"go {SECRET}")
        for call_id in ("c1", "c2"):
            await wait_for_status(handle, "waiting")
            await handle.execute_update(
                AgentWorkflow.submit_approval,
                ApprovalSignal(tool_call_id=call_id, approved=True, decided_by="alice"),
            )
        result = await handle.result()
        latest = await handle.query(AgentWorkflow.latest_checkpoint)
    assert result.output == f"done {SECRET}"
    spans = await receiver.wait_for(lambda s: any(x.name == f"run_end {name}" for x in s))
    named = by_name(spans)
    (run,) = named[f"invoke_agent {name}"]  # exported when the run started
    (end,) = named[f"run_end {name}"]  # and its end, once
    assert {s.trace_id for s in spans} == {run.trace_id}
    assert len({s.span_id for s in spans}) == len(spans)
    assert len(named["chat test"]) == 3
    assert len(named["execute_tool lookup"]) == 2
    assert len(named["approval lookup"]) == 2
    assert all(s.parent_span_id == run.span_id for s in spans if s is not run)
    assert end.attributes["durable_agent.status"] == "completed"
    assert run.attributes["durable_agent.workflow_id"] == handle.id
    assert end.attributes["durable_agent.workflow_id"] == handle.id
    assert run.start <= min(s.start for s in spans)
    assert end.end >= max(s.end for s in spans)
    decision = named["approval lookup"][0]
    assert decision.attributes["durable_agent.approval.decided_by"] == "alice"
    assert decision.attributes["durable_agent.approval.approved"] is True
    assert decision.attributes["gen_ai.tool.call.id"] in ("c1", "c2")
    # The run continued as new (twice or more) and is still one run span, one trace.
    history = await handle.fetch_history()
    assert latest is not None
    assert latest.resume.trace_context is not None
    assert latest.resume.trace_context.trace_id == run.trace_id
    assert latest.resume.trace_context.span_id == run.span_id
    no_content(spans)

    # A replay (of the last run of the chain, on a worker with tracing on) adds no span.
    before = len(receiver.spans)
    replayer = new_replayer(agents=[agent], tracing=provider)
    await replayer.replay_workflow(history)
    provider.force_flush()
    await asyncio.sleep(0.3)
    assert len(receiver.spans) == before


async def test_continue_as_new_happened(dev_server: DevServer, provider: TracerProvider) -> None:
    """The run above really crosses continue-as-new (else it would prove little)."""
    client = await traced_client(dev_server, provider)
    name = unique("chain")
    agent = AgentRegistration(
        approval_agent(name), AgentActivityConfig(continue_as_new_after_steps=1)
    )
    async with new_worker(client, agents=[agent]) as worker:
        handle = await start_agent(client, worker, name, "go")
        for call_id in ("c1", "c2"):
            await wait_for_status(handle, "waiting")
            await handle.execute_update(
                AgentWorkflow.submit_approval, ApprovalSignal(tool_call_id=call_id, approved=True)
            )
        await handle.result()
        view = await handle.query(AgentWorkflow.status)
    assert view.continued_as_new >= 1


async def test_a_worker_without_tracing_adds_nothing(
    client: Client, provider: TracerProvider, receiver: OtlpReceiver
) -> None:
    """Tracing off (the default), even with a provider in reach: no span, no trace context."""
    token = telemetry.use_provider(provider)  # what an in-process caller would use
    try:
        name = unique("dark")
        agent = tool_agent(name)
        async with new_worker(client, agents=[agent]) as worker:
            handle = await start_agent(client, worker, name, "go")
            await handle.result()
            latest = await handle.query(AgentWorkflow.latest_checkpoint)
    finally:
        telemetry._provider.reset(token)
    await asyncio.sleep(0.3)
    assert receiver.spans == []
    assert latest is not None
    assert latest.resume.trace_context is None


# -- worker processes configured by the standard OTLP variables, one SIGKILLed ------------------


def start_worker(
    address: str, task_queue: str, test_dir: Path, log: Path, receiver: OtlpReceiver
) -> subprocess.Popen[bytes]:
    """`python worker.py` told by the standard variables to export to `receiver`."""
    with pytest.MonkeyPatch.context() as env:
        for name in [n for n in os.environ if n.startswith("OTEL_")]:
            env.delenv(name)
        env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        env.setenv("OTEL_SERVICE_NAME", "tracing-test-worker")
        env.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
        env.setenv("OTEL_METRIC_EXPORT_INTERVAL", "500")
        return start_worker_process(
            address, task_queue, test_dir, log, agents="tests.tracing_agents"
        )


@pytest.fixture
async def workers() -> AsyncIterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(10)


async def test_one_trace_across_a_worker_kill_an_approval_and_continue_as_new(
    client: Client,
    dev_server: DevServer,
    receiver: OtlpReceiver,
    tmp_path: Path,
    workers: list[subprocess.Popen[bytes]],
) -> None:
    task_queue = f"traces-{uuid.uuid4().hex[:8]}"
    workers.append(
        start_worker(dev_server.address, task_queue, tmp_path, tmp_path / "w1.log", receiver)
    )
    handle = await client.start_workflow(
        AgentWorkflow.run,
        AgentWorkflowInput(agent="trace-demo", prompt=f"go {SECRET}"),
        id=f"traces-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
    )
    await wait_for_file(tmp_path / "tool_started")
    await receiver.wait_for(lambda s: any(x.name == "chat trace-script" for x in s))
    workers[0].send_signal(signal.SIGKILL)
    workers[0].wait(10)

    workers.append(
        start_worker(dev_server.address, task_queue, tmp_path, tmp_path / "w2.log", receiver)
    )
    # The killed attempt is retried on the new worker once its heartbeat times out.
    await wait_for_file(tmp_path / "tool_started", lines=2, timeout=60)
    (tmp_path / "release").touch()
    await wait_for_status(handle, "waiting", timeout=60)
    await handle.execute_update(
        AgentWorkflow.submit_approval,
        ApprovalSignal(tool_call_id="deploy_1", approved=True, decided_by="alice"),
    )
    result = await asyncio.wait_for(handle.result(), 60)
    latest = await handle.query(AgentWorkflow.latest_checkpoint)
    view = await handle.query(AgentWorkflow.status)
    assert result.output == f"done {SECRET}"
    assert view.continued_as_new >= 2

    spans = await receiver.wait_for(
        lambda s: any(x.name == "run_end trace-demo" for x in s), timeout=30
    )
    workers[1].send_signal(signal.SIGTERM)  # a clean stop flushes what is left
    workers[1].wait(30)
    await asyncio.sleep(0.3)
    spans = list(receiver.spans)
    named = by_name(spans)
    (run,) = named["invoke_agent trace-demo"]
    (end,) = named["run_end trace-demo"]
    assert {s.trace_id for s in spans} == {run.trace_id}
    requests = (tmp_path / "model_requests").read_text().splitlines()
    assert len(named["chat trace-script"]) == len(requests) == 3
    # The slow tool ran twice (the killed attempt never ended: no span), deploy once.
    assert len(named["execute_tool slow_tool"]) == 1
    assert len(named["execute_tool deploy"]) == 1
    (decision,) = named["approval deploy"]
    assert decision.attributes["durable_agent.approval.decided_by"] == "alice"
    assert all(s.parent_span_id == run.span_id for s in spans if s is not run)
    # Every span its own id: a backend keeps one span per id (workflow spans have ids given
    # in advance; the activities' spans after them must not get those).
    assert len({s.span_id for s in spans}) == len(spans)
    chat = named["chat trace-script"][0]
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "trace-script"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 100
    assert chat.attributes["gen_ai.usage.output_tokens"] == 7
    assert chat.attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert run.resource["service.name"] == "tracing-test-worker"
    assert end.attributes["gen_ai.usage.input_tokens"] == 600
    assert latest is not None
    assert latest.resume.trace_context is not None
    assert latest.resume.trace_context.trace_id == run.trace_id
    no_content(spans)
    assert receiver.content_types == {"application/x-protobuf"}
    # Metrics by the conventions, from the same workers.
    assert "gen_ai.client.operation.duration" in receiver.metrics
    token_points = receiver.metrics["gen_ai.client.token.usage"]
    assert {p[0]["gen_ai.token.type"] for p in token_points} == {"input", "output"}
    assert "durable_agent.human.decision.duration" in receiver.metrics
    waiting = receiver.metrics["durable_agent.approvals.waiting"]  # +1 then -1: 0 at the end
    assert {p[0]["gen_ai.tool.name"] for p in waiting} == {"deploy"}
    ended = receiver.metrics["durable_agent.runs"]  # cumulative: one point per export
    assert {p[0]["durable_agent.status"] for p in ended} == {"completed"}
    assert {p[1] for p in ended} == {1}


# -- sub-agents: inside their parent's trace ----------------------------------------------------


def parent_and_child(prefix: str) -> tuple[Any, Any]:
    child = tool_agent(unique(f"{prefix}-child"))
    parent_model = TestModel.with_responses(
        [tool_response(call(child.name, "s1", prompt="look it up")), text_response("relayed")]
    )
    parent = AgentBuilder(parent_model).name(unique(f"{prefix}-parent")).subagent(child).build()
    return parent, child


def nested(spans: list[ReceivedSpan], parent: Any, child: Any) -> None:
    named = by_name(spans)
    (outer,) = named[f"invoke_agent {parent.name}"]
    (inner,) = named[f"invoke_agent {child.name}"]
    assert {s.trace_id for s in spans} == {outer.trace_id}
    assert inner.parent_span_id == outer.span_id
    (tool,) = named["execute_tool lookup"]
    assert tool.parent_span_id == inner.span_id
    assert len(named["chat test"]) == 4  # two requests each
    # The sub-agent call is a tool call of the parent's: its span beside the child's run.
    (call_span,) = named[f"execute_tool {child.name}"]
    assert call_span.parent_span_id == outer.span_id
    assert call_span.attributes["gen_ai.tool.call.id"] == "s1"
    assert call_span.attributes["gen_ai.tool.type"] == "agent"
    assert call_span.start <= inner.start
    assert len({span.span_id for span in spans}) == len(spans)


async def test_an_in_process_sub_agent_is_nested_in_its_parent(
    traced: TracerProvider, receiver: OtlpReceiver
) -> None:
    parent, child = parent_and_child("nest")
    result = await parent.run("go")
    assert result.output == "relayed"
    spans = await receiver.wait_for(
        lambda s: any(x.name == f"invoke_agent {parent.name}" for x in s)
    )
    nested(spans, parent, child)


async def test_a_sub_agent_on_temporal_is_nested_in_its_parent(
    dev_server: DevServer, provider: TracerProvider, receiver: OtlpReceiver
) -> None:
    client = await traced_client(dev_server, provider)
    parent, child = parent_and_child("nest")
    async with new_worker(client, agents=[child, parent]) as worker:
        handle = await start_agent(client, worker, parent.name, "go")
        result = await handle.result()
    assert result.output == "relayed"
    spans = await receiver.wait_for(lambda s: any(x.name == f"run_end {parent.name}" for x in s))
    nested(spans, parent, child)
    named = by_name(spans)
    for agent in (parent, child):  # each run's end, once, under its own run's span
        (run,) = named[f"invoke_agent {agent.name}"]
        (end,) = named[f"run_end {agent.name}"]
        assert end.parent_span_id == run.span_id


def test_the_worker_reads_the_standard_otlp_variables() -> None:
    from temporalio.contrib.opentelemetry import ReplaySafeTracerProvider

    from durable_agent.temporal.tracing import TracingConfigError, provider_from_env

    assert provider_from_env({}) is None
    assert provider_from_env({"OTEL_SERVICE_NAME": "x"}) is None
    with pytest.raises(TracingConfigError, match="thrift"):
        provider_from_env(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"}
        )
    made = provider_from_env(
        {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x/v1/traces",
            "OTEL_METRICS_EXPORTER": "none",
        }
    )
    assert isinstance(made, ReplaySafeTracerProvider)
    made.shutdown()
    plugin = DurableAgentPlugin.from_env(environ={"OTEL_EXPORTER_OTLP_ENDPOINT": ""})
    assert plugin.tracing is None
