"""The plugin's sandbox: Temporal's, with the serialization contexts of a task remembered.

For every payload of every command and activation the SDK asks the workflow instance for
its serialization context (and, for an outgoing payload, its external-store context),
three or four times a payload; the sandboxed instance answers each by running code inside
the sandbox. Those calls are most of what a node activity costs a worker (an agent step
has six payloads: two activity inputs, their summaries, two results), and of a replay.

Within one encode or decode pass no workflow code runs, so the instance's answer for a
command cannot change: `ContextCachingInstance` remembers answers until the next
activation, which is where the workflow's pending commands change.

Most workers' converters (the plugin's pydantic one, with or without our codec) do not
look at the context at all, and without external storage the store context is not read
either. For those the plugin marks the runner `context_free` (`ignores_contexts`), and
the instance answers without entering the sandbox: the SDK then picks the same converter
it would have picked from the real answer. The plugin judges the converter it is given:
a replayer plugin listed after it that adds a context-aware codec must be listed before.

A context-free worker's instances of a workflow passed through the sandbox (`AgentWorkflow`
is) also share one payload converter. The SDK makes one for every workflow instance, and
pydantic's keeps a cache of type adapters of its own: some 9 kB a run, which a cached run
keeps for as long as it waits. These converters keep nothing of a run but that cache, whose
keys are the types the run decodes: a passed-through workflow's are the worker's own, the
same in every run. A sandboxed module's types are imported again for each run, so a shared
cache would keep every run's copies: such workflows keep a converter of their own.

Between activations the SDK's instance keeps views into protobuf messages it was handed:
the completion it sent last, the last activation's flags and worker version, the first
activation's headers, memo and last completion result. A view keeps the arena of its whole
message allocated (every job, payload and map of the activation), some kB a cached run
for as long as it waits; bare Temporal's workers keep them. The plugin's instances hand the
SDK copies of the first activation's (`create_instance`) and after each activation replace
the rest by values of their own (`_sdk.let_go_of_activation`): worker versions are shared
by the runner's instances, one message a version.

When a run leaves the worker's cache (an eviction activation that succeeded: no task of it
is left, and a query or its next task replays it in a new instance), `call_evicted_hook` lets
a workflow that asks for it (`EVICTED_HOOK`: `AgentWorkflow` does) drop what its run held.
The SDK's instance refers to itself (its handler maps hold its own bound methods), so
everything it reaches, the workflow object and its run's conversation included, would
otherwise wait for the collector's full pass; what the workflow lets go of is freed at once.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from temporalio.bridge.proto.common import WorkerDeploymentVersion
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import (
    ActivitySerializationContext,
    DataConverter,
    DefaultPayloadConverter,
    PayloadConverter,
    SerializationContext,
    StorageDriverStoreContext,
    WithSerializationContext,
    WorkflowSerializationContext,
)
from temporalio.worker import (
    WorkflowInstance,
    WorkflowInstanceDetails,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.workflow import Info

from ._sdk import let_go_of_activation, own_copies, own_copy, workflow_object

__all__ = [
    "EVICTED_HOOK",
    "ContextCachingInstance",
    "ContextCachingSandboxedWorkflowRunner",
    "call_evicted_hook",
    "ignores_contexts",
]

log = logging.getLogger(__name__)

EVICTED_HOOK = "_durable_agent_evicted"
"""A workflow object's method that `call_evicted_hook` calls once its run has left the cache."""

_PROBES: tuple[SerializationContext, ...] = (
    WorkflowSerializationContext(namespace="probe", workflow_id="probe"),
    ActivitySerializationContext(
        namespace="probe",
        activity_id="1",
        activity_type="probe",
        activity_task_queue="probe",
        workflow_id="probe",
        workflow_type="probe",
        is_local=False,
    ),
)
_NO_STORE = StorageDriverStoreContext(target=None)
_CONTEXT_FREE_PAYLOAD_CONVERTERS = (DefaultPayloadConverter, PydanticPayloadConverter)


def ignores_contexts(converter: DataConverter) -> bool:
    """True if no part of `converter` can read a serialization context and it stores no
    payload externally: then no context answer can change how a payload is encoded.

    Judged by what the parts are, not by how they answer a sample context (a codec may
    answer one context with itself and another with a new instance): the codec and the
    failure converter must not take contexts at all, and the payload converter must be
    Temporal's default or pydantic one, whose encoders take none (checked too)."""
    if converter.external_storage is not None:
        return False
    if isinstance(converter.payload_codec, WithSerializationContext):
        return False
    if isinstance(converter.failure_converter, WithSerializationContext):
        return False
    if converter.payload_converter_class not in _CONTEXT_FREE_PAYLOAD_CONVERTERS:
        return False
    payload = converter.payload_converter
    if not isinstance(payload, WithSerializationContext):
        return True
    return all(payload.with_context(probe) is payload for probe in _PROBES)


class ContextCachingInstance(WorkflowInstance):
    """A workflow instance whose context answers are remembered until its next activation."""

    def __init__(
        self,
        inner: WorkflowInstance,
        *,
        context_free: bool = False,
        version: Callable[[Any], Any] = own_copy,
    ) -> None:
        self.inner = inner
        self.context_free = context_free
        """The worker's converter ignores contexts (`ignores_contexts`): answer without
        asking the sandboxed instance."""
        self._version = version
        """An activation's worker version, as a message of the runner's (`sandbox`)."""
        self._contexts: dict[Any, SerializationContext | None] = {}
        self._stores: dict[Any, Any] = {}
        self._released = False

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        self._contexts.clear()
        self._stores.clear()
        completion = self.inner.activate(act)
        let_go_of_activation(self.inner, self._version)
        if (
            not self._released
            and completion.HasField("successful")
            and any(job.HasField("remove_from_cache") for job in act.jobs)
        ):
            # The SDK may run an eviction again (one that overran its deadlock timeout):
            # release once, and never let releasing fail an eviction that succeeded.
            self._released = True
            try:
                call_evicted_hook(self.inner)
            except Exception:
                log.debug("releasing an evicted run failed", exc_info=True)
        return completion

    def get_serialization_context(self, command_info: Any) -> SerializationContext | None:
        if self.context_free:
            return None  # the SDK's context-free converter, which every context gives here
        try:
            return self._contexts[command_info]
        except KeyError:
            context = self._contexts[command_info] = self.inner.get_serialization_context(
                command_info
            )
            return context

    def get_external_store_context(self, command_info: Any) -> Any:
        if self.context_free:
            return _NO_STORE  # read only by external storage, which this worker has none of
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


def call_evicted_hook(instance: WorkflowInstance) -> None:
    """After a sandboxed run's eviction succeeded: calls its workflow object's `EVICTED_HOOK`,
    if it has one. Nothing is called for a workflow without the hook, nor under an SDK whose
    sandbox no longer keeps its object where `_sdk.workflow_object` looks (tests in
    `tests/test_sdk_seam.py` and `tests/test_plugin.py` fail then). The SDK's own instance is
    left as it is: futures it owns may still report to it (as their event loop) when they
    are freed."""
    hook = getattr(workflow_object(instance), EVICTED_HOOK, None)
    if callable(hook):
        hook()


@dataclasses.dataclass(frozen=True)
class ContextCachingSandboxedWorkflowRunner(SandboxedWorkflowRunner):
    """`SandboxedWorkflowRunner`, its instances wrapped in `ContextCachingInstance`."""

    context_free: bool = False
    """Set by the plugin when the worker's (or replayer's) converter `ignores_contexts`."""
    _converters: dict[Any, Callable[[], PayloadConverter]] = dataclasses.field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Per factory the SDK hands its instances (the worker's data converter's): one that
    answers every instance with the same converter."""
    _versions: dict[tuple[str, str], WorkerDeploymentVersion] = dataclasses.field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """The worker versions its instances' activations named, one message each."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        if self.context_free and self.passes_through(det.defn.cls.__module__):
            det = dataclasses.replace(det, payload_converter_factory=self.shared(det))
        det = _own_start(det)
        inner = super().create_instance(det)
        return ContextCachingInstance(inner, context_free=self.context_free, version=self.version)

    def version(self, message: WorkerDeploymentVersion) -> WorkerDeploymentVersion:
        """The runner's message equal to an activation's worker version `message`."""
        key = (message.deployment_name, message.build_id)
        found = self._versions.get(key)
        if found is None:
            found = self._versions[key] = own_copy(message)
        return found

    def passes_through(self, module: str) -> bool:
        """Whether the sandbox imports `module` once, outside it, as the SDK's importer
        decides: the module or a package above it is listed, or every module is."""
        listed = self.restrictions.passthrough_modules
        parts = module.split(".")
        return self.restrictions.passthrough_all_modules or any(
            ".".join(parts[:end]) in listed for end in range(1, len(parts) + 1)
        )

    def shared(self, det: WorkflowInstanceDetails) -> Callable[[], PayloadConverter]:
        """A factory answering every instance with the one converter `det`'s factory made.
        Only for context-free workers, whose converter is Temporal's or pydantic's
        (`ignores_contexts` checks which), and passed-through workflows."""
        factory = det.payload_converter_factory
        found = self._converters.get(factory)
        if found is None:
            found = self._converters[factory] = _Always(factory())
        return found


def _own_start(det: WorkflowInstanceDetails) -> WorkflowInstanceDetails:
    """`det` with its first activation's headers, memo and last completion result copied
    out of it (`sandbox`): what the run keeps of them then holds no view into that
    activation."""
    info = det.info
    return dataclasses.replace(
        det,
        info=dataclasses.replace(
            info, headers=own_copies(info.headers), raw_memo=own_copies(info.raw_memo)
        ),
        last_completion_result=own_copy(det.last_completion_result),
    )


class _Always:
    """A factory that answers with the one converter it was given."""

    __slots__ = ("converter",)

    def __init__(self, converter: PayloadConverter) -> None:
        self.converter = converter

    def __call__(self) -> PayloadConverter:
        return self.converter
