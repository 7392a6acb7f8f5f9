"""OpenTelemetry spans and metrics for agent runs, by the GenAI semantic conventions.

- `invoke_agent {agent}`: a run (in-process here; on Temporal `temporal.tracing` emits it
  once for the whole workflow chain);
- `chat {model}`: one model request, made by `nodes.model_request` (so in-process and in the
  `model_request` activity alike), with the request and response model, finish reasons,
  token counts (cache reads and writes too) and the price;
- `execute_tool {tool}`: one run of a tool, made by `nodes.tool_call`;
- metrics `gen_ai.client.token.usage` and `gen_ai.client.operation.duration`.

In-process the global tracer and meter providers are used, as instrumentation libraries do
(nothing is recorded until the application installs an SDK). A Temporal worker sets its own
choice per activity (`use_provider`): off unless `DurableAgentPlugin(tracing=...)` is on.
Message text, tool arguments and results go on spans only with
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any, Self

from opentelemetry import metrics, trace
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace import TraceFlags as OtelTraceFlags

from ..contract.checkpoint import ExecutionSuspended
from ..contract.trace_context import TraceContext
from .genai_messages import as_json, as_text, genai_message

if TYPE_CHECKING:
    from ..contract.messages import ModelMessage, ModelResponse
    from ..contract.state import AgentRunState
    from .node_io import ToolCallInput, ToolCallOutcome

__all__ = [
    "record_subagent_tool_span",
    "tool_attributes",
    "CAPTURE_CONTENT_ENV",
    "INSTRUMENTATION",
    "RunSpan",
    "capture_content",
    "chat_span",
    "invoke_agent_span",
    "span_context_of",
    "tool_span",
    "trace_context_of",
    "tracer",
    "use_provider",
]

INSTRUMENTATION = "durable_agent"
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

_OFF = trace.NoOpTracerProvider()
_provider: ContextVar[trace.TracerProvider | None] = ContextVar(
    "durable_agent_tracer_provider", default=None
)
"""None: the global provider. A Temporal worker sets its own for each activity."""
_tracers: dict[int, tuple[trace.TracerProvider, trace.Tracer]] = {}


def use_provider(provider: trace.TracerProvider | None) -> Token[trace.TracerProvider | None]:
    """Spans of this context go to `provider`; None turns them off (not: the global one)."""
    return _provider.set(provider if provider is not None else _OFF)


def tracer() -> trace.Tracer:
    provider = _provider.get() or trace.get_tracer_provider()
    cached = _tracers.get(id(provider))
    if cached is None or cached[0] is not provider:
        cached = provider, provider.get_tracer(INSTRUMENTATION)
        _tracers[id(provider)] = cached
    return cached[1]


def _enabled() -> bool:
    """False when spans would go nowhere: turned off, or no SDK provider installed (the
    API's default proxy), so an uninstrumented application pays next to nothing."""
    provider = _provider.get()
    if provider is None:
        provider = trace.get_tracer_provider()
        return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
    return provider is not _OFF


def capture_content() -> bool:
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() == "true"


_meter: metrics.Meter | None = None
_instruments: tuple[metrics.Histogram, metrics.Histogram] | None = None


def _histograms() -> tuple[metrics.Histogram, metrics.Histogram]:
    global _meter, _instruments
    if _instruments is None:
        _meter = metrics.get_meter(INSTRUMENTATION)
        _instruments = (
            _meter.create_histogram(
                "gen_ai.client.token.usage",
                unit="{token}",
                description="Number of input and output tokens used",
            ),
            _meter.create_histogram(
                "gen_ai.client.operation.duration",
                unit="s",
                description="GenAI operation duration",
            ),
        )
    return _instruments


# -- trace contexts -----------------------------------------------------------------------------


def trace_context_of(span: Span) -> TraceContext | None:
    """The evidence's `trace_context` for a recording span (None for a no-op one)."""
    context = span.get_span_context()
    if not context.is_valid or not span.is_recording():
        return None
    return TraceContext(trace_id=f"{context.trace_id:032x}", span_id=f"{context.span_id:016x}")


def span_context_of(context: TraceContext | None, *, remote: bool = True) -> SpanContext | None:
    """The OpenTelemetry span context a stored trace context names (None when it names none)."""
    if context is None or not context.trace_id or not context.span_id:
        return None
    try:
        flags = int(str(context.metadata.get("trace_flags", "01")), 16)
        return SpanContext(
            trace_id=int(context.trace_id, 16),
            span_id=int(context.span_id, 16),
            is_remote=remote,
            trace_flags=OtelTraceFlags(flags),
        )
    except ValueError:
        return None


# -- invoke_agent (in-process) ------------------------------------------------------------------


class RunSpan:
    """The `invoke_agent` span of one in-process call; `finished(state)` records its end."""

    def __init__(self, span: Span) -> None:
        self.span = span

    def finished(self, state: AgentRunState) -> AgentRunState:
        finish_run_span(self.span, state)
        return state


@contextmanager
def invoke_agent_span(agent_name: str, state: AgentRunState, *, new_run: bool) -> Iterator[RunSpan]:
    """`invoke_agent {agent}` around one in-process call (a run, a resume, a continuation
    after a human's decision). A new run records its span in `state.trace_context`; a later
    call for the same run is a child of that span, so one run is one trace."""
    if not _enabled():
        yield RunSpan(trace.INVALID_SPAN)
        return
    parent = None if new_run else span_context_of(state.trace_context)
    context = trace.set_span_in_context(NonRecordingSpan(parent)) if parent else None
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent_name,
        "gen_ai.conversation.id": state.conversation_id,
        "durable_agent.run_id": state.run_id,
    }
    with tracer().start_as_current_span(
        f"invoke_agent {agent_name}",
        context=context,
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        if new_run and state.trace_context is None:
            state.trace_context = trace_context_of(span)
        try:
            yield RunSpan(span)
        except ExecutionSuspended as suspended:
            span.set_attribute("durable_agent.status", "suspended")
            span.set_attribute("durable_agent.suspended.node", suspended.node.value)
            raise
        except BaseException as error:
            _failed(span, error)
            raise


def finish_run_span(span: Span, state: AgentRunState | None) -> None:
    """A run span's closing attributes: its status, what it spent and why it failed."""
    if state is None or not span.is_recording():
        return
    usage = state.usage
    span.set_attributes(
        {
            "durable_agent.status": state.status.value,
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "durable_agent.usage.requests": usage.requests,
            "durable_agent.usage.tool_calls": usage.tool_calls,
        }
    )
    if usage.cost is not None:
        span.set_attribute("durable_agent.usage.cost_usd", usage.cost)
    if state.error is not None:
        span.set_attribute("error.type", state.error.kind)
        span.set_status(Status(StatusCode.ERROR, state.error.message))


def _failed(span: Span, error: BaseException) -> None:
    kind = getattr(error, "kind", None) or type(error).__name__
    span.set_attribute("error.type", str(kind))
    span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))


# -- chat ---------------------------------------------------------------------------------------


class ChatSpan:
    """The `chat` span of one model request; `record(response)` sets what came back."""

    def __init__(self, span: Span, attributes: dict[str, Any]) -> None:
        self.span = span
        self.attributes = attributes
        self.response: ModelResponse | None = None

    def record(self, response: ModelResponse) -> None:
        self.response = response
        span = self.span
        if not span.is_recording():
            return
        usage = response.usage
        values: dict[str, Any] = {
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
        }
        if response.model_name:
            values["gen_ai.response.model"] = response.model_name
        if response.finish_reason:
            values["gen_ai.response.finish_reasons"] = [response.finish_reason]
        if usage.cache_read_tokens:
            values["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read_tokens
        if usage.cache_write_tokens:
            values["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
        if usage.cost is not None:
            values["durable_agent.usage.cost_usd"] = usage.cost
        response_id = response.metadata.get("id") if response.metadata else None
        if isinstance(response_id, str):
            values["gen_ai.response.id"] = response_id
        if capture_content():
            values["gen_ai.output.messages"] = as_json([genai_message(response)])
        span.set_attributes(values)


class _Silent:
    """What `chat_span` and `tool_span` give when spans would go nowhere: one object for
    every call, its own context manager, recording nothing (a step pays for no generator
    and no span)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def record(self, result: object) -> None:
        return None


class _NoChatSpan(_Silent, ChatSpan):
    def __init__(self) -> None:
        ChatSpan.__init__(self, trace.INVALID_SPAN, {})


_NO_CHAT_SPAN = _NoChatSpan()


def chat_span(
    agent_name: str,
    model_name: str,
    provider: str | None,
    messages: Sequence[ModelMessage],
    *,
    settings: Any = None,
) -> AbstractContextManager[ChatSpan]:
    """`chat {model}` around one model request, and its two metrics."""
    if not _enabled():
        return _NO_CHAT_SPAN
    return _chat_span(agent_name, model_name, provider, messages, settings)


@contextmanager
def _chat_span(
    agent_name: str,
    model_name: str,
    provider: str | None,
    messages: Sequence[ModelMessage],
    settings: Any,
) -> Iterator[ChatSpan]:
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model_name,
    }
    if provider:
        attributes["gen_ai.provider.name"] = provider
    span_attributes = {**attributes, "gen_ai.agent.name": agent_name}
    if settings is not None:
        for key, name in (
            ("temperature", "gen_ai.request.temperature"),
            ("max_tokens", "gen_ai.request.max_tokens"),
            ("top_p", "gen_ai.request.top_p"),
            ("seed", "gen_ai.request.seed"),
        ):
            value = getattr(settings, key, None)
            if value is not None:
                span_attributes[name] = value
    if capture_content():
        span_attributes["gen_ai.input.messages"] = as_json([genai_message(m) for m in messages])
    started = time.perf_counter()
    error_type: str | None = None
    with tracer().start_as_current_span(
        f"chat {model_name}",
        kind=SpanKind.CLIENT,
        attributes=span_attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        chat = ChatSpan(span, attributes)
        try:
            yield chat
        except BaseException as error:
            error_type = str(getattr(error, "kind", None) or type(error).__name__)
            _failed(span, error)
            raise
        finally:
            _measure(chat, time.perf_counter() - started, error_type)


def _measure(chat: ChatSpan, seconds: float, error_type: str | None) -> None:
    tokens, duration = _histograms()
    attributes = dict(chat.attributes)
    response = chat.response
    if response is not None and response.model_name:
        attributes["gen_ai.response.model"] = response.model_name
    if error_type is not None:
        duration.record(seconds, {**attributes, "error.type": error_type})
        return
    duration.record(seconds, attributes)
    if response is not None:
        usage = response.usage
        tokens.record(usage.input_tokens, {**attributes, "gen_ai.token.type": "input"})
        tokens.record(usage.output_tokens, {**attributes, "gen_ai.token.type": "output"})


# -- execute_tool -------------------------------------------------------------------------------


class ToolSpan:
    def __init__(self, span: Span) -> None:
        self.span = span

    def record(self, outcome: ToolCallOutcome) -> None:
        span = self.span
        if not span.is_recording():
            return
        kind = getattr(outcome, "kind", None)
        tool_return = getattr(outcome, "tool_return", None)
        if kind == "return" and tool_return is not None and tool_return.is_error:
            span.set_attribute("error.type", tool_return.error_kind or "tool_error")
            span.set_status(Status(StatusCode.ERROR))
        elif kind == "retry" and tool_return is not None:
            span.set_attribute("error.type", tool_return.error_kind or "retry")
            span.set_status(Status(StatusCode.ERROR, as_text(tool_return.content)[:500]))
        elif kind in ("approval_required", "deferred"):
            span.set_attribute("durable_agent.tool.outcome", kind)
        if capture_content() and tool_return is not None:
            span.set_attribute("gen_ai.tool.call.result", as_text(tool_return.content))


class _NoToolSpan(_Silent, ToolSpan):
    def __init__(self) -> None:
        ToolSpan.__init__(self, trace.INVALID_SPAN)


_NO_TOOL_SPAN = _NoToolSpan()


def tool_span(agent_name: str, input: ToolCallInput) -> AbstractContextManager[ToolSpan]:
    """`execute_tool {tool}` around one run of a tool."""
    if not _enabled():
        return _NO_TOOL_SPAN
    return _tool_span(agent_name, input)


@contextmanager
def _tool_span(agent_name: str, input: ToolCallInput) -> Iterator[ToolSpan]:
    call = input.call
    kind = "function" if input.toolset_tool is None else "extension"
    attributes = tool_attributes(agent_name, call.name, call.id, kind)
    if capture_content():
        attributes["gen_ai.tool.call.arguments"] = as_json(call.arguments)
    with tracer().start_as_current_span(
        f"execute_tool {call.name}",
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield ToolSpan(span)
        except BaseException as error:
            _failed(span, error)
            raise


def tool_attributes(agent_name: str, call_name: str, call_id: str, kind: str) -> dict[str, Any]:
    """An `execute_tool` span's attributes; `kind` is `function`, `extension` (a toolset's
    tool) or `agent` (a sub-agent, whose own run is an `invoke_agent` span beside it)."""
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call_name,
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.type": kind,
        "gen_ai.agent.name": agent_name,
    }


def record_subagent_tool_span(
    agent_name: str, call_name: str, call_id: str, start_ns: int, error_type: str | None
) -> None:
    """In-process: the `execute_tool` span of a finished sub-agent call, in the current
    (the parent run's) context."""
    if not _enabled():
        return
    span = tracer().start_span(
        f"execute_tool {call_name}",
        kind=SpanKind.INTERNAL,
        attributes=tool_attributes(agent_name, call_name, call_id, "agent"),
        start_time=start_ns,
    )
    if error_type is not None:
        span.set_attribute("error.type", error_type)
        span.set_status(Status(StatusCode.ERROR, error_type))
    span.end()


# -- message content (opt-in) -------------------------------------------------------------------
