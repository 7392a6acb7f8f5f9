"""Spans that workflow code emits: ids fixed in advance, exported only while live.

Built on what `temporalio.contrib.opentelemetry`'s replay-safe provider does for workflow
spans (deterministic ids, a replay rebuilds a span without exporting it, only live code ends
and exports one), with one difference: ids are derived from the workflow's own ids
(`hex_id`), not drawn from the workflow's random numbers as its `TemporalIdGenerator` draws
them. Drawing them would shift every later `workflow.uuid4()` of a run with tracing on, so a
worker with tracing off could not replay it identically; and derived ids survive
continue-as-new, which random ones do not. The spans go to the SDK provider behind a
`ReplaySafeTracerProvider` (or a plain SDK provider given), through a tracer of their own
scope (`WORKFLOW_SPANS`) whose id generator answers the ids given.

`Tracing` is a worker's choice (`DurableAgentPlugin(tracing=...)`); `active` holds it inside
a workflow (None when off).
"""

from __future__ import annotations

import hashlib
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import opentelemetry.context
import structlog
from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from temporalio import workflow

from ..contract.state import AgentRunState
from ..contract.trace_context import TraceContext
from ..engine import telemetry
from ._sdk import sdk_tracer_provider

__all__ = ["WORKFLOW_SPANS", "Tracing", "active", "emit", "hex_id", "traced_run"]

log = structlog.get_logger("durable_agent.tracing")


@dataclass(frozen=True)
class Tracing:
    """A worker's choice: `provider` None means the global tracer provider."""

    provider: trace.TracerProvider | None = None
    warned: set[str] = field(default_factory=set, compare=False, repr=False)
    """The kinds of provider this worker has said it cannot emit run spans to (once each):
    the worker's own, as its workflows write it, not the process's."""

    def resolve(self) -> trace.TracerProvider:
        return self.provider if self.provider is not None else trace.get_tracer_provider()


active: ContextVar[Tracing | None] = ContextVar("durable_agent_workflow_tracing", default=None)
"""Inside a workflow: its worker's tracing, None when off."""


def hex_id(seed: str, what: str, digits: int) -> str:
    """A span (16 digits) or trace (32) id derived from `seed`: the same on every worker."""
    value = hashlib.sha256(f"durable-agent/{what}/{seed}".encode()).hexdigest()[:digits]
    return value if int(value, 16) else "1".rjust(digits, "0")


def traced_run() -> tuple[Any, Any, AgentRunState, TraceContext] | None:
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


def emit(
    tracing: Tracing,
    name: str,
    context: TraceContext,
    *,
    start: int,
    attributes: dict[str, Any],
    links: list[Link] | None = None,
    finish: Any = None,
    end: int | None = None,
) -> None:
    """Exports one finished span with the ids `context` names (its parent:
    `parent_span_id`), started at `start` and ending at `end` (default: now, workflow
    time). Outside the sandbox's restrictions (an exporter may do I/O and import as it
    likes: nothing of it reaches workflow state), and never failing the workflow task."""
    try:
        with workflow.unsafe.sandbox_unrestricted(), workflow.unsafe.imports_passed_through():
            _export(tracing, name, context, start, end, attributes, links, finish)
    except Exception as error:
        log.warning("could not emit a workflow span", span=name, error=repr(error))


def _export(
    tracing: Tracing,
    name: str,
    context: TraceContext,
    start: int,
    end: int | None,
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
    span.end(end_time=max(workflow.time_ns() if end is None else end, start))


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
