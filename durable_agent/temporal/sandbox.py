"""The plugin's sandbox: Temporal's, with the serialization contexts of a task remembered.

For every payload of every command and activation the SDK asks the workflow instance for
its serialization context (and, for an outgoing payload, its external-store context),
three or four times a payload; the sandboxed instance answers each by running code inside
the sandbox. Those calls are most of what a node activity costs a worker (an agent step
has six payloads: two activity inputs, their summaries, two results), and of a replay.

Within one encode or decode pass no workflow code runs, so the instance's answer for a
command cannot change: `ContextCachingInstance` remembers answers until the next
activation, which is where the workflow's pending commands change.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.converter import SerializationContext
from temporalio.worker import (
    WorkflowInstance,
    WorkflowInstanceDetails,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.workflow import Info

__all__ = ["ContextCachingInstance", "ContextCachingSandboxedWorkflowRunner"]


class ContextCachingInstance(WorkflowInstance):
    """A workflow instance whose context answers are remembered until its next activation."""

    def __init__(self, inner: WorkflowInstance) -> None:
        self.inner = inner
        self._contexts: dict[Any, SerializationContext | None] = {}
        self._stores: dict[Any, Any] = {}

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        self._contexts.clear()
        self._stores.clear()
        return self.inner.activate(act)

    def get_serialization_context(self, command_info: Any) -> SerializationContext | None:
        try:
            return self._contexts[command_info]
        except KeyError:
            context = self._contexts[command_info] = self.inner.get_serialization_context(
                command_info
            )
            return context

    def get_external_store_context(self, command_info: Any) -> Any:
        try:
            return self._stores[command_info]
        except KeyError:
            context = self._stores[command_info] = self.inner.get_external_store_context(
                command_info
            )
            return context

    def get_info(self) -> Info:
        return self.inner.get_info()

    def get_thread_id(self) -> int | None:
        return self.inner.get_thread_id()


@dataclasses.dataclass(frozen=True)
class ContextCachingSandboxedWorkflowRunner(SandboxedWorkflowRunner):
    """`SandboxedWorkflowRunner`, its instances wrapped in `ContextCachingInstance`."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return ContextCachingInstance(super().create_instance(det))
