"""Every reach into temporalio's private names, in one module.

The SDK offers no public way to do a few things this package needs, so it reads them where
the installed release keeps them: here, and nowhere else. `tests/test_sdk_seam.py` checks
each against the installed temporalio and fails naming what moved; pyproject's `temporalio`
bound admits only the minor releases that test has passed on (raise both together, after
running it on the new release).

- `STREAM_POLL`, `STREAM_OFFSET_QUERY`, `STREAM_PUBLISH_SIGNAL`: the names `WorkflowStream`
  registers its handlers under (`temporalio.contrib.workflow_streams._stream`): the run's
  stream poll interceptor, its refusal of outside publishers and `streams.StreamReader` call
  those handlers by name.
- `workflow_object`: the workflow object a sandboxed instance runs, whose eviction hook the
  plugin's sandbox calls (`sandbox.call_evicted_hook`).
- `activity_name`: the name `@activity.defn` gave a function, so the plugin adds no activity
  twice (`plugin`).
- `propagating_interceptor_class`: `temporalio.contrib.opentelemetry`'s workflow interceptor,
  which propagates the trace context without requiring a replay-safe global provider
  (`tracing.context_propagation`).
- `sdk_tracer_provider`: the OpenTelemetry SDK provider a `ReplaySafeTracerProvider` wraps,
  whose tracers emit a run's spans with the ids fixed in advance (`tracing`).
- `TASK_FAILURE_LOGGER`: the logger a workflow task that raised is reported to, which
  `durable_agent.testing` listens on to fail the test.
- `let_go_of_activation`: the SDK instance's references into its last activation and
  completion, which the plugin's sandbox replaces by values of their own (`sandbox`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from google.protobuf.message import Message
from temporalio.worker import WorkflowInboundInterceptor, WorkflowInstance

__all__ = [
    "TASK_FAILURE_LOGGER",
    "STREAM_OFFSET_QUERY",
    "STREAM_POLL",
    "STREAM_PUBLISH_SIGNAL",
    "activity_name",
    "let_go_of_activation",
    "own_copies",
    "own_copy",
    "propagating_interceptor_class",
    "sdk_tracer_provider",
    "workflow_object",
]

STREAM_POLL = "__temporal_workflow_stream_poll"
"""Workflow Streams' poll: an update, and a query of the same name that does not wait."""
STREAM_OFFSET_QUERY = "__temporal_workflow_stream_offset"
"""Workflow Streams' query of the offset its next item will get."""
STREAM_PUBLISH_SIGNAL = "__temporal_workflow_stream_publish"
"""The Workflow Streams signal through which outside clients publish."""

TASK_FAILURE_LOGGER = "temporalio.worker._workflow_instance"
"""Where temporalio logs a workflow task that raised (its workflow instances' module)."""

_ACTIVITY_DEFINITION = "__temporal_activity_definition"
"""Where `@activity.defn` keeps a function's definition (`temporalio.activity._Definition`)."""
_IN_SANDBOX = "__temporal_in_sandbox"
"""The sandboxed instance's `InSandbox`, in the globals its code runs in."""


MessageT = TypeVar("MessageT", bound=Message)

_ACTIVATION_FIELDS = (
    "_current_completion",
    "_current_internal_flags",
    "_deployment_version_for_current_task",
    "_workflow_input",
)
"""Where the SDK's instance keeps parts of its last activation and completion between
activations (`let_go_of_activation`)."""


def _sdk_fields(instance: WorkflowInstance) -> dict[str, Any] | None:
    """The attributes of the SDK's own instance inside a `SandboxedWorkflowRunner` instance:
    the sandbox keeps its `InSandbox` in the globals its code runs in, which holds it. None
    for another runner's instance or an SDK that keeps it elsewhere."""
    scope = getattr(instance, "globals_and_locals", None)
    in_sandbox = scope.get(_IN_SANDBOX) if isinstance(scope, dict) else None
    fields = getattr(getattr(in_sandbox, "instance", None), "__dict__", None)
    return fields if isinstance(fields, dict) else None


def workflow_object(instance: WorkflowInstance) -> object | None:
    """The workflow object a `SandboxedWorkflowRunner` instance runs (None for another
    runner's instance, one that made no object yet, or an SDK that keeps it elsewhere)."""
    fields = _sdk_fields(instance)
    return fields.get("_object") if fields is not None else None


def let_go_of_activation(instance: WorkflowInstance, version: Callable[[Message], Message]) -> bool:
    """After an activation of a sandboxed `instance`: the SDK's instance keeps, until the
    next one, the completion it sent, the activation's internal flags and worker version,
    and for the whole run the first activation's headers. Each is a view into the protobuf
    arena of the whole activation or completion (payloads, maps, every job), which stays
    allocated while any view is held: a few kB a cached run, for as long as it waits. The
    completion is dropped (the SDK makes a new one at the next activation), the flags
    become a list, each header a copy, and the version `version(message)`: an equal
    message outside the activation (the caller's, shared by its runs). False (nothing
    changed) if the SDK keeps these elsewhere."""
    fields = _sdk_fields(instance)
    if fields is None or not all(name in fields for name in _ACTIVATION_FIELDS):
        return False
    fields["_current_completion"] = None
    fields["_current_internal_flags"] = list(fields["_current_internal_flags"])
    current = fields["_deployment_version_for_current_task"]
    if isinstance(current, Message):
        fields["_deployment_version_for_current_task"] = version(current)
    started = fields["_workflow_input"]
    if started is not None and not isinstance(started.headers, dict):
        # In place: the run's coroutines hold this input too.
        started.headers = own_copies(started.headers)
    return True


def own_copy(message: MessageT) -> MessageT:
    """`message` in an arena of its own: holding it no longer keeps the message it was
    read from (an activation) allocated."""
    copy = type(message)()
    copy.CopyFrom(message)
    return copy


def own_copies(messages: Mapping[str, MessageT]) -> dict[str, MessageT]:
    """Each of `messages` (a map read from an activation: headers, a memo) in its own arena."""
    return {key: own_copy(value) for key, value in messages.items()}


def activity_name(function: Callable[..., Any]) -> str | None:
    """The name `@activity.defn` registered `function` (or a method of it) under; None for
    a callable it did not decorate."""
    name = getattr(getattr(function, _ACTIVITY_DEFINITION, None), "name", None)
    return name if isinstance(name, str) else None


def propagating_interceptor_class() -> type[WorkflowInboundInterceptor]:
    """`temporalio.contrib.opentelemetry`'s workflow interceptor class, as its
    `OpenTelemetryInterceptor` would answer it without its check of the global provider.
    Imported when asked for: the contrib package needs the OpenTelemetry SDK (the `otel`
    extra), which this module must not require."""
    from temporalio.contrib.opentelemetry._otel_interceptor import (
        _TracingWorkflowInboundInterceptor,
    )

    return _TracingWorkflowInboundInterceptor


def sdk_tracer_provider(provider: object) -> object:
    """The provider a `ReplaySafeTracerProvider` (`create_tracer_provider`'s) wraps, the
    OpenTelemetry SDK's; any other provider as it is."""
    return getattr(provider, "_tracer_provider", provider)
