"""Traces of agent workflows: one trace per run, across workers, crashes and continue-as-new.

The run's span, `invoke_agent {agent}`, is part of the run's state: its ids are worked out
once, when the run starts (the starter's trace when it started the run inside a span,
otherwise ids of its own derived from the workflow and run id), kept in
`AgentRunState.trace_context` (so they cross continue-as-new, and every checkpoint's evidence
names them), and made the workflow's current OpenTelemetry context. Everything the run starts
inherits it through `temporalio.contrib.opentelemetry`'s header propagation: the `chat` and
`execute_tool` spans its activities make (`durable_agent.telemetry`), and the runs of its
sub-agents (child workflows), which nest in the parent's trace.

The span is exported when the run starts, so that a run waiting a week for a human has, in
every trace viewer, the parent its children name: a mark at the run's start with who and
what it is. What only the end knows (status, usage, cost, why it failed) goes out once the
run ends (completes, fails or is cancelled, not when it continues as new) as `run_end
{agent}`, a child of the run's span from the run's start to its end. Both are emitted by
live workflow code only (`workflow_spans`): a replay, on a new worker after a restart or a
crash, emits nothing; continue-as-new carries the context and begins no new span. A run that
fails at its very first step (an unknown agent, a model it does not allow, a fork of a
boundary that does not exist) has no state to carry a context: it gets one
`invoke_agent` span, failed, from its start to that failure. Chains that began under a
release that exported the run's span at its end (no `workflow.patched(RUN_SPAN_PATCH)`
marker, no `run_span` in the context) keep doing so, so nothing of theirs is lost or
doubled. Human decisions are spans of their own (`approval {tool}`, from the moment the run
began to wait to the decision), emitted as they arrive.

Switched on per worker: `DurableAgentPlugin(tracing=True)` uses the global tracer provider,
`tracing=provider` that one; the `durable-agent worker` (and `python worker.py`) turns it on
when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
variables are set (`otlp.provider_from_env`). Off, activities make no spans whatever the global
provider is, and workflows add nothing to their headers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import opentelemetry.context
from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, Status, StatusCode
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
from ._sdk import propagating_interceptor_class
from .otlp import OTLP_ENDPOINT_ENVS, TracingConfigError, flush, provider_from_env
from .workflow_spans import Tracing, active, emit, hex_id, traced_run

__all__ = [
    "RUN_SPAN_PATCH",
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

_START = "start_time_unix_nano"
RUN_SPAN = "run_span"
"""`TraceContext.metadata` key: `at_start` when the chain's `invoke_agent` span is exported
at its start (and its end as `run_end`); absent in chains begun by a release that exported
it at the end, which go on doing so."""
AT_START = "at_start"
RUN_SPAN_PATCH = "durable-agent-run-span-at-start"
"""Marks the histories whose run span went out at the start: a run recorded before (no
marker) and replayed here exports its span at its end, as it would have."""


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
    workflows whether they trace; emits a run's end when its workflow ends."""

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
        active.set(self.tracing)
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
    when it continued as new; a fork starts a trace of its own, linked to its source's),
    makes it the workflow's current context and, when this begins the chain's trace,
    exports its `invoke_agent` span. Nothing when tracing is off."""
    tracing = active.get()
    if tracing is None:
        return
    agent = _agent_name()
    context = state.trace_context
    begins = context is None or forked or not context.trace_id or not context.span_id
    if begins:
        context = _new_context(source=context if forked else None)
    assert context is not None
    if context.metadata.get(RUN_SPAN) != AT_START and workflow.patched(RUN_SPAN_PATCH):
        # A new chain; or one begun by an earlier release, whose span went out at its end
        # and so has not gone out yet: from here on, at its start (now, late) and its end.
        context = context.model_copy(update={"metadata": {**context.metadata, RUN_SPAN: AT_START}})
        _start_span(tracing, agent, state, context)
    state.trace_context = context
    span_context = telemetry.span_context_of(context, remote=False)
    if span_context is not None:
        opentelemetry.context.attach(trace.set_span_in_context(NonRecordingSpan(span_context)))


def _agent_name() -> str:
    """The agent this workflow runs, as its input names it (`LiveRun.input`)."""
    live = getattr(workflow.instance(), "live", None)
    return str(getattr(getattr(live, "input", None), "agent", None) or "agent")


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
        trace_id = hex_id(seed, "trace", 32)
        parent_span_id = None
        metadata["trace_flags"] = "01"
    if source is not None and source.trace_id and source.span_id:
        metadata["forked_from"] = {"trace_id": source.trace_id, "span_id": source.span_id}
    return TraceContext(
        trace_id=trace_id,
        span_id=hex_id(seed, "span", 16),
        parent_span_id=parent_span_id,
        metadata=metadata,
    )


def _run_attributes(agent: str, state: AgentRunState | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent,
        "durable_agent.workflow_id": workflow.info().workflow_id,
    }
    if state is not None:
        attributes["gen_ai.conversation.id"] = state.conversation_id
        attributes["durable_agent.run_id"] = state.run_id
    return attributes


def _links(context: TraceContext) -> list[Link]:
    source = context.metadata.get("forked_from")
    if isinstance(source, Mapping):
        linked = telemetry.span_context_of(TraceContext.model_validate(source))
        if linked is not None:
            return [Link(linked, {"durable_agent.link": "forked_from"})]
    return []


def _start_span(tracing: Tracing, agent: str, state: AgentRunState, context: TraceContext) -> None:
    """The run's `invoke_agent` span, a mark at its start (live only: a replay of the task
    that began the run emits nothing)."""
    if workflow.unsafe.is_replaying_history_events():
        return
    start = int(context.metadata.get(_START) or workflow.time_ns())
    emit(
        tracing,
        f"invoke_agent {agent}",
        context,
        start=start,
        end=start,
        attributes=_run_attributes(agent, state),
        links=_links(context),
    )


def _end_run(tracing: Tracing, error: BaseException | None) -> None:
    if workflow.unsafe.is_replaying_history_events():
        return
    live = getattr(workflow.instance(), "live", None)
    name = _agent_name()
    failure = getattr(live, "error", None)
    status = None
    attributes: dict[str, Any] = {}
    if error is not None and failure is None:
        failure = "cancelled" if isinstance(error, asyncio.CancelledError) else str(error)
        attributes["error.type"] = type(error).__name__
    if failure is not None:
        status = Status(StatusCode.ERROR, str(failure))
        attributes.setdefault("error.type", str(failure).partition(":")[0])
    run_metrics.run_ended(name, failure, error)
    run = traced_run()
    if run is None:
        _failed_at_first_step(tracing, name, live, attributes, status, error)
        return
    _, _, state, context = run

    def finish(span: Any) -> None:
        telemetry.finish_run_span(span, state)
        if status is not None:
            span.set_status(status)

    start = int(context.metadata.get(_START) or workflow.time_ns())
    if context.metadata.get(RUN_SPAN) != AT_START:  # a chain begun by an earlier release
        attributes = {**_run_attributes(name, state), **attributes}
        emit(
            tracing,
            f"invoke_agent {name}",
            context,
            start=start,
            attributes=attributes,
            links=_links(context),
            finish=finish,
        )
        return
    end = TraceContext(
        trace_id=context.trace_id,
        span_id=hex_id(f"{context.span_id}/end", "run_end", 16),
        parent_span_id=context.span_id,
        metadata=context.metadata,
    )
    attributes = {**_run_attributes(name, state), **attributes}
    del attributes["gen_ai.operation.name"]  # not a second invocation of the agent
    emit(tracing, f"run_end {name}", end, start=start, attributes=attributes, finish=finish)


def _failed_at_first_step(
    tracing: Tracing,
    name: str,
    live: Any,
    attributes: dict[str, Any],
    status: Status | None,
    error: BaseException | None,
) -> None:
    """A run that ended before it had a traced state (an unknown agent, a model it does not
    allow, bad input, a fork of a boundary that does not exist): one `invoke_agent` span
    from the workflow's start to now, with why."""
    state = getattr(live, "state", None)
    if error is None or (state is not None and state.trace_context is not None):
        return
    context = _new_context(source=None)
    started = workflow.info().start_time.timestamp()
    attributes = {
        **_run_attributes(name, state),
        "durable_agent.status": "cancelled"
        if isinstance(error, asyncio.CancelledError)
        else "failed",
        **attributes,
    }

    def finish(span: Any) -> None:
        if status is not None:
            span.set_status(status)

    emit(
        tracing,
        f"invoke_agent {name}",
        context,
        start=min(int(started * 1e9), workflow.time_ns()),
        attributes=attributes,
        finish=finish,
    )


def traced_sink(sink: StreamSink) -> StreamSink:
    """The workflow's record sink, emitting a span for each human decision as it arrives
    (`approval {tool}` or `deferred_result {tool}`: who decided what, and when). The sink
    itself when tracing is off."""
    tracing = active.get()
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
    run = traced_run()
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
        span_id=hex_id(f"{parent.span_id}/{seq}/{call_id}", "decision", 16),
        parent_span_id=parent.span_id,
        metadata=parent.metadata,
    )
    emit(tracing, name, child, start=min(start, now), attributes=attributes)
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
    tracing = active.get()
    run = traced_run() if tracing is not None else None
    if tracing is None or run is None:
        return
    parent = run[3]
    context = TraceContext(
        trace_id=parent.trace_id,
        span_id=hex_id(f"{parent.span_id}/tool/{child_workflow_id}", "tool", 16),
        parent_span_id=parent.span_id,
        metadata=parent.metadata,
    )
    attributes = telemetry.tool_attributes(agent_name, call_name, call_id, "agent")
    if error_type is not None:
        attributes["error.type"] = error_type
    emit(tracing, f"execute_tool {call_name}", context, start=start_ns, attributes=attributes)
