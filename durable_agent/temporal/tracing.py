"""Traces of agent workflows: one trace per run, across workers, crashes and continue-as-new.

The run's span, `invoke_agent {agent}`, is part of the run's state: its ids are worked out
once, when the run starts (the starter's trace when it started the run inside a span,
otherwise ids of its own derived from the workflow and run id), kept in
`AgentRunState.trace_context` (so they cross continue-as-new, and every checkpoint's evidence
names them), and made the workflow's current OpenTelemetry context. Everything the run starts
inherits it through `temporalio.contrib.opentelemetry`'s header propagation: the `chat` and
`execute_tool` spans its activities make (`durable_agent.telemetry`), and the runs of its
sub-agents (child workflows), which nest in the parent's trace.

The span itself is exported exactly once, when the run ends (completes, fails or is
cancelled, not when it continues as new), by the worker that ends it, with the recorded ids,
start time and the end's time from workflow time: a worker that dies holds nothing that is
lost, a replay emits nothing (spans go out only while the workflow is not replaying
history). Human decisions are spans of their own (`approval {tool}`, from the moment the
run began to wait to the decision), emitted as they arrive. Workflow-side spans are built
with ids fixed in advance, never drawn from the workflow's random numbers.

Switched on per worker: `DurableAgentPlugin(tracing=True)` uses the global tracer provider,
`tracing=provider` that one; the `durable-agent worker` (and `python worker.py`) turns it on
when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
variables are set (`otlp.provider_from_env`). Off, activities make no spans whatever the global
provider is, and workflows add nothing to their headers.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import opentelemetry.context
import structlog
from opentelemetry import trace
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from temporalio import workflow
from temporalio.exceptions import FailureError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from ..contract.records import (
    AgentStreamRecord,
    ApprovalDecidedData,
    ApprovalRequestedData,
    DeferredResultData,
    StreamSink,
)
from ..contract.state import AgentRunState
from ..contract.trace_context import TraceContext
from ..engine import telemetry
from . import run_metrics
from ._sdk import propagating_interceptor_class, sdk_tracer_provider
from .otlp import OTLP_ENDPOINT_ENVS, TracingConfigError, flush, provider_from_env

__all__ = [
    "subagent_tool_span",
    "OTLP_ENDPOINT_ENVS",
    "TracingConfigError",
    "TelemetryInterceptor",
    "Tracing",
    "begin_run",
    "context_propagation",
    "flush",
    "provider_from_env",
    "traced_sink",
]

log = structlog.get_logger("durable_agent.tracing")

_START = "start_time_unix_nano"


@dataclass(frozen=True)
class Tracing:
    """A worker's choice: `provider` None means the global tracer provider."""

    provider: trace.TracerProvider | None = None
    warned: set[str] = field(default_factory=set, compare=False, repr=False)
    """The kinds of provider this worker has said it cannot emit run spans to (once each):
    the worker's own, as its workflows write it, not the process's."""

    def resolve(self) -> trace.TracerProvider:
        return self.provider if self.provider is not None else trace.get_tracer_provider()


_active: ContextVar[Tracing | None] = ContextVar("durable_agent_workflow_tracing", default=None)
"""Inside a workflow: its worker's tracing, None when off."""


# -- interceptors ---------------------------------------------------------------------------------


def context_propagation() -> Interceptor:
    """`temporalio.contrib.opentelemetry`'s interceptor for what it propagates (the current
    context into the headers of activities, child workflows, continue-as-new and client
    calls, and back out of them), making none of its own spans. Unlike its plugin's use it
    does not require a replay-safe global provider: it creates no span in workflow code,
    and the spans this package emits there have fixed ids. (The contrib package needs the
    OpenTelemetry SDK: the `otel` extra.)"""
    from temporalio.contrib.opentelemetry import OpenTelemetryInterceptor

    propagating = propagating_interceptor_class()

    class ContextPropagation(OpenTelemetryInterceptor):
        def __init__(self) -> None:
            super().__init__(add_temporal_spans=False)

        def workflow_interceptor_class(  # type: ignore[override]  # the same class, unnamed
            self, input: WorkflowInterceptorClassInput
        ) -> type[WorkflowInboundInterceptor]:
            return propagating

    return ContextPropagation()


class TelemetryInterceptor(Interceptor):
    """Tells activities which provider their spans go to (none when tracing is off), and
    workflows whether they trace; emits a run's span when its workflow ends."""

    def __init__(self, tracing: Tracing | None) -> None:
        self.tracing = tracing

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivityTelemetry(next, self.tracing)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        tracing = self.tracing
        if tracing is None:
            return None

        class _Bound(_WorkflowTelemetry):
            pass

        _Bound.tracing = tracing
        return _Bound


class _ActivityTelemetry(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, tracing: Tracing | None) -> None:
        super().__init__(next)
        self._tracing = tracing

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        tracing = self._tracing
        token = telemetry.use_provider(tracing.resolve() if tracing is not None else None)
        try:
            return await super().execute_activity(input)
        finally:
            telemetry._provider.reset(token)


class _WorkflowTelemetry(WorkflowInboundInterceptor):
    tracing: Tracing

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        _active.set(self.tracing)
        try:
            result = await super().execute_workflow(input)
        except workflow.ContinueAsNewError:
            raise
        except (FailureError, asyncio.CancelledError) as error:
            _end_run(self.tracing, error)
            raise
        _end_run(self.tracing, None)
        return result


# -- the run's span -----------------------------------------------------------------------------


def begin_run(state: AgentRunState, *, forked: bool = False) -> None:
    """Gives a run starting in this workflow its trace context (kept from the run before
    when it continued as new; a fork starts a trace of its own, linked to its source's) and
    makes it the workflow's current context. Nothing when tracing is off."""
    if _active.get() is None:
        return
    context = state.trace_context
    if context is None or forked or not context.trace_id or not context.span_id:
        context = _new_context(source=context if forked else None)
        state.trace_context = context
    span_context = telemetry.span_context_of(context, remote=False)
    if span_context is not None:
        opentelemetry.context.attach(trace.set_span_in_context(NonRecordingSpan(span_context)))


def _new_context(source: TraceContext | None) -> TraceContext:
    info = workflow.info()
    seed = f"{info.workflow_id}/{info.run_id}"
    parent = trace.get_current_span().get_span_context()
    metadata: dict[str, Any] = {_START: workflow.time_ns()}
    if parent.is_valid:
        trace_id = f"{parent.trace_id:032x}"
        parent_span_id: str | None = f"{parent.span_id:016x}"
        metadata["trace_flags"] = f"{int(parent.trace_flags):02x}"
    else:
        trace_id = _hex(seed, "trace", 32)
        parent_span_id = None
        metadata["trace_flags"] = "01"
    if source is not None and source.trace_id and source.span_id:
        metadata["forked_from"] = {"trace_id": source.trace_id, "span_id": source.span_id}
    return TraceContext(
        trace_id=trace_id,
        span_id=_hex(seed, "span", 16),
        parent_span_id=parent_span_id,
        metadata=metadata,
    )


def _hex(seed: str, what: str, digits: int) -> str:
    value = hashlib.sha256(f"durable-agent/{what}/{seed}".encode()).hexdigest()[:digits]
    return value if int(value, 16) else "1".rjust(digits, "0")


def _traced_run() -> tuple[Any, Any, AgentRunState, TraceContext] | None:
    """This workflow's instance, its `LiveRun` and state, and the run's trace context; None
    while replaying (nothing is emitted then) or before the run has a traced state."""
    if workflow.unsafe.is_replaying_history_events():
        return None
    instance = workflow.instance()
    live = getattr(instance, "live", None)
    state: AgentRunState | None = getattr(live, "state", None)
    if state is None or state.trace_context is None:
        return None
    return instance, live, state, state.trace_context


def _end_run(tracing: Tracing, error: BaseException | None) -> None:
    run = _traced_run()
    if run is None:
        return
    _, live, state, context = run
    name = getattr(getattr(live, "input", None), "agent", "agent")
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": name,
        "gen_ai.conversation.id": state.conversation_id,
        "durable_agent.run_id": state.run_id,
        "durable_agent.workflow_id": workflow.info().workflow_id,
    }
    links = []
    source = context.metadata.get("forked_from")
    if isinstance(source, Mapping):
        linked = telemetry.span_context_of(TraceContext.model_validate(source))
        if linked is not None:
            links.append(Link(linked, {"durable_agent.link": "forked_from"}))
    status = None
    failure = getattr(live, "error", None)
    if error is not None and failure is None:
        failure = "cancelled" if isinstance(error, asyncio.CancelledError) else str(error)
        attributes["error.type"] = type(error).__name__
    if failure is not None:
        status = Status(StatusCode.ERROR, str(failure))
        attributes.setdefault("error.type", str(failure).partition(":")[0])

    def finish(span: Any) -> None:
        telemetry.finish_run_span(span, state)
        if status is not None:
            span.set_status(status)

    run_metrics.run_ended(name, failure, error)
    _emit(
        tracing,
        f"invoke_agent {name}",
        context,
        start=int(context.metadata.get(_START) or workflow.time_ns()),
        attributes=attributes,
        links=links,
        finish=finish,
    )


def traced_sink(sink: StreamSink) -> StreamSink:
    """The workflow's record sink, emitting a span for each human decision as it arrives
    (`approval {tool}` or `deferred_result {tool}`: who decided what, and when). The sink
    itself when tracing is off."""
    tracing = _active.get()
    if tracing is None:
        return sink

    def traced(record: AgentStreamRecord) -> None:
        sink(record)
        data = record.data
        if isinstance(data, ApprovalDecidedData | DeferredResultData):
            _decision_span(tracing, record.seq, data)
        if isinstance(data, ApprovalRequestedData | ApprovalDecidedData):
            run_metrics.approvals_waiting(data)

    return traced


def _decision_span(
    tracing: Tracing, seq: int, data: ApprovalDecidedData | DeferredResultData
) -> None:
    run = _traced_run()
    if run is None:
        return
    instance, _, _, parent = run
    tool = data.tool_name or "tool"
    call_id = data.tool_call_id
    now = workflow.time_ns()
    since = getattr(getattr(instance, "decisions", None), "waiting_since", None)
    start = int(since.timestamp() * 1e9) if since is not None else now
    attributes: dict[str, Any] = {
        "gen_ai.tool.name": tool,
        "gen_ai.tool.call.id": call_id,
        "durable_agent.human.decision": data.KIND,
    }
    if isinstance(data, ApprovalDecidedData):
        attributes["durable_agent.approval.approved"] = data.approved
        if data.decided_by:
            attributes["durable_agent.approval.decided_by"] = data.decided_by
        if data.reason:
            attributes["durable_agent.approval.reason"] = data.reason
        name = f"approval {tool}"
    else:
        attributes["durable_agent.deferred.status"] = data.status
        name = f"deferred_result {tool}"
    child = TraceContext(
        trace_id=parent.trace_id,
        span_id=_hex(f"{parent.span_id}/{seq}/{call_id}", "decision", 16),
        parent_span_id=parent.span_id,
        metadata=parent.metadata,
    )
    _emit(tracing, name, child, start=min(start, now), attributes=attributes)
    run_metrics.decision_duration(data.KIND, tool, (now - min(start, now)) / 1e9)


def subagent_tool_span(
    agent_name: str,
    call_name: str,
    call_id: str,
    child_workflow_id: str,
    start_ns: int,
    error_type: str | None,
) -> None:
    """The `execute_tool` span of a sub-agent call whose child workflow ended, beside the
    child's own `invoke_agent` span, in the parent run's trace (live only; its id is fixed
    by the child's workflow id, unique over the parent's chain)."""
    tracing = _active.get()
    run = _traced_run() if tracing is not None else None
    if tracing is None or run is None:
        return
    parent = run[3]
    context = TraceContext(
        trace_id=parent.trace_id,
        span_id=_hex(f"{parent.span_id}/tool/{child_workflow_id}", "tool", 16),
        parent_span_id=parent.span_id,
        metadata=parent.metadata,
    )
    attributes = telemetry.tool_attributes(agent_name, call_name, call_id, "agent")
    if error_type is not None:
        attributes["error.type"] = error_type
    _emit(tracing, f"execute_tool {call_name}", context, start=start_ns, attributes=attributes)


def _emit(
    tracing: Tracing,
    name: str,
    context: TraceContext,
    *,
    start: int,
    attributes: dict[str, Any],
    links: list[Link] | None = None,
    finish: Any = None,
) -> None:
    """Exports one finished span with the ids `context` names (its parent:
    `parent_span_id`), started at `start` and ending now (workflow time). Outside the
    sandbox's restrictions (an exporter may do I/O and import as it likes: nothing of it
    reaches workflow state), and never failing the workflow task."""
    try:
        with workflow.unsafe.sandbox_unrestricted(), workflow.unsafe.imports_passed_through():
            _export(tracing, name, context, start, attributes, links, finish)
    except Exception as error:
        log.warning("could not emit a workflow span", span=name, error=repr(error))


def _export(
    tracing: Tracing,
    name: str,
    context: TraceContext,
    start: int,
    attributes: dict[str, Any],
    links: list[Link] | None,
    finish: Any,
) -> None:
    try:
        from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    except ImportError:  # no SDK: nothing would export it anyway
        return
    provider: Any = tracing.resolve()
    sdk = sdk_tracer_provider(provider)  # a ReplaySafeTracerProvider's own
    if not isinstance(sdk, SdkTracerProvider):
        _unsupported(tracing, type(provider).__name__)
        return
    if context.trace_id is None or context.span_id is None:
        return
    # A tracer of its own scope whose id generator answers the ids given in advance: the
    # SDK caches one tracer per scope, and the activities' spans (scope INSTRUMENTATION)
    # must keep drawing random ids.
    tracer: Any = sdk.get_tracer(WORKFLOW_SPANS)
    if not isinstance(tracer.id_generator, _FixedIds):
        tracer.id_generator = _FixedIds()
    flags = TraceFlags(int(str(context.metadata.get("trace_flags", "01")), 16))
    parent = None
    if context.parent_span_id:
        remote = SpanContext(
            int(context.trace_id, 16), int(context.parent_span_id, 16), True, flags
        )
        parent = trace.set_span_in_context(NonRecordingSpan(remote))
    ids = _given_ids.set((int(context.trace_id, 16), int(context.span_id, 16)))
    try:
        span = tracer.start_span(
            name,
            context=parent if parent is not None else opentelemetry.context.Context(),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=links or None,
            start_time=start,
        )
    finally:
        _given_ids.reset(ids)
    if finish is not None:
        finish(span)
    span.end(end_time=max(workflow.time_ns(), start))


WORKFLOW_SPANS = f"{telemetry.INSTRUMENTATION}.workflow"
"""The instrumentation scope of the spans workflow code emits with ids given in advance."""

_given_ids: ContextVar[tuple[int, int]] = ContextVar("durable_agent_given_span_ids")
"""The trace and span id of the span being emitted (set around `start_span`, per thread
and task, so workflows emitting at once on other threads do not see each other's)."""


class _FixedIds:
    """An id generator that answers the ids the span being emitted was given in advance."""

    def generate_trace_id(self) -> int:
        return _given_ids.get()[0]

    def generate_span_id(self) -> int:
        return _given_ids.get()[1]

    def is_trace_id_random(self) -> bool:
        return False


def _unsupported(tracing: Tracing, kind: str) -> None:
    if kind not in tracing.warned:
        tracing.warned.add(kind)
        log.warning(
            "the tracer provider is not the OpenTelemetry SDK's; run spans are not emitted",
            provider=kind,
        )
