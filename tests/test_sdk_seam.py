"""What `durable_agent.temporal._sdk` reads of temporalio's private names, pinned (issue 37).

`_sdk` is the one module that reaches into temporalio's internals (the Workflow Streams
handler names, the sandboxed instance's workflow object, `@activity.defn`'s definition, the
OpenTelemetry contrib package's workflow interceptor and the provider its replay-safe one
wraps). Each test here fails naming what moved when a temporalio release moves it, and
`pyproject.toml` allows only the minor releases this file has passed on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import importlib
import re
import tomllib
import types
import uuid
from collections import Counter
from itertools import chain
from pathlib import Path
from typing import Any, ClassVar

import temporalio
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import (
    Worker,
    WorkflowInboundInterceptor,
    WorkflowInstance,
    WorkflowInstanceDetails,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from durable_agent.temporal import _sdk
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.runtime import WorkerRuntime
from durable_agent.temporal.sandbox import ContextCachingSandboxedWorkflowRunner

ROOT = Path(__file__).resolve().parent.parent
VERIFIED_MINORS = ("1.35",)
"""The temporalio minor releases this file has passed on; raise pyproject's bound with it."""


def _moved(what: str) -> str:
    return (
        f"temporalio {temporalio.__version__} moved {what}: durable_agent.temporal._sdk reads "
        "it where releases up to "
        f"{VERIFIED_MINORS[-1]} kept it; find where this release keeps it, change _sdk, and "
        "add the release to VERIFIED_MINORS and pyproject's temporalio bound"
    )


def test_the_workflow_streams_handler_names_are_the_sdks() -> None:
    try:
        stream: Any = importlib.import_module("temporalio.contrib.workflow_streams._stream")
        names = (stream._POLL, stream._OFFSET_QUERY, stream._PUBLISH_SIGNAL)
    except (ImportError, AttributeError) as error:
        raise AssertionError(_moved("Workflow Streams' handler names")) from error
    ours = (_sdk.STREAM_POLL, _sdk.STREAM_OFFSET_QUERY, _sdk.STREAM_PUBLISH_SIGNAL)
    assert names == ours, _moved(f"Workflow Streams' handler names (now {names})")


@activity.defn(name="pinned_probe")
async def _probe() -> None:
    """An activity only for reading its name back."""


def test_workflow_task_failures_are_logged_where_the_testing_environment_listens() -> None:
    try:
        instances: Any = importlib.import_module(_sdk.TASK_FAILURE_LOGGER)
    except ImportError as error:
        raise AssertionError(_moved("the module of its workflow instances")) from error
    assert instances.logger.name == _sdk.TASK_FAILURE_LOGGER, _moved(
        "the logger a failed workflow task is reported to"
    )


def test_activity_names_are_read_where_activity_defn_keeps_them() -> None:
    assert _sdk.activity_name(_probe) == "pinned_probe", _moved("@activity.defn's definition")
    assert _sdk.activity_name(lambda: None) is None
    names = [_sdk.activity_name(method) for method in WorkerRuntime().activities.all()]
    assert None not in names, _moved("@activity.defn's definition of methods")
    assert {"prepare_model_request", "model_request", "tool_call", "load_checkpoint"} <= set(names)


def test_the_propagating_interceptor_is_the_contrib_packages() -> None:
    try:
        propagating = _sdk.propagating_interceptor_class()
    except ImportError as error:
        raise AssertionError(_moved("the OpenTelemetry workflow interceptor")) from error
    assert issubclass(propagating, WorkflowInboundInterceptor), _moved(
        "the OpenTelemetry workflow interceptor"
    )
    contrib: Any = importlib.import_module("temporalio.contrib.opentelemetry._otel_interceptor")
    declared = contrib.OpenTelemetryInterceptor.workflow_interceptor_class.__annotations__
    assert "_TracingWorkflowInboundInterceptor" in str(declared.get("return")), _moved(
        "what OpenTelemetryInterceptor.workflow_interceptor_class answers"
    )


def test_the_replay_safe_provider_wraps_the_sdks() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from temporalio.contrib.opentelemetry import create_tracer_provider

    provider = create_tracer_provider()
    assert isinstance(_sdk.sdk_tracer_provider(provider), TracerProvider), _moved(
        "the provider ReplaySafeTracerProvider wraps"
    )
    plain = TracerProvider()
    assert _sdk.sdk_tracer_provider(plain) is plain


@workflow.defn(name="SdkSeamProbe")
class SdkSeamProbe:
    @workflow.run
    async def run(self) -> str:
        return "ran"


class _Keeping(SandboxedWorkflowRunner):
    """The SDK's sandbox, keeping each instance it makes."""

    made: ClassVar[list[WorkflowInstance]] = []

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        instance = super().create_instance(det)
        self.made.append(instance)
        return instance


async def test_the_sandboxed_workflow_object_is_found(client: Client) -> None:
    """The object a sandboxed instance runs is where `_sdk.workflow_object` looks, before
    and after its eviction (when the plugin's sandbox calls the workflow's eviction hook)."""
    queue = f"sdk-seam-{uuid.uuid4()}"
    _Keeping.made.clear()
    # This module, passed through: the sandbox need not import its test machinery again.
    restrictions = SandboxRestrictions.default.with_passthrough_modules(__name__)
    runner = _Keeping(restrictions=restrictions)
    async with Worker(client, task_queue=queue, workflows=[SdkSeamProbe], workflow_runner=runner):
        result = await client.execute_workflow(
            SdkSeamProbe.run, id=f"sdk-seam-{uuid.uuid4()}", task_queue=queue
        )
    assert result == "ran"
    # The first instance only validated the workflow at the worker's start; the last ran it.
    validated, ran = _Keeping.made[0], _Keeping.made[-1]
    assert _sdk.workflow_object(validated) is None
    found = _sdk.workflow_object(ran)
    assert type(found).__name__ == "SdkSeamProbe", _moved("the sandboxed instance's object")


_CONVERTERS: list[object] = []
"""The payload converter each `ConverterProbe` run had (this module passes through, so its
runs append to this list)."""


@workflow.defn(name="ConverterProbe")
class ConverterProbe:
    @workflow.run
    async def run(self) -> None:
        _CONVERTERS.append(workflow.payload_converter())


async def _converters(address: str, context_free: bool) -> list[object]:
    """The converters of two runs on a worker of a bare client (no plugin to set the
    runner's `context_free` from its converter)."""
    _CONVERTERS.clear()
    client = await Client.connect(address)
    queue = f"sdk-seam-{uuid.uuid4()}"
    restrictions = SandboxRestrictions.default.with_passthrough_modules(__name__)
    runner = ContextCachingSandboxedWorkflowRunner(
        restrictions=restrictions, context_free=context_free
    )
    async with Worker(client, task_queue=queue, workflows=[ConverterProbe], workflow_runner=runner):
        for _ in range(2):
            await client.execute_workflow(
                ConverterProbe.run, id=f"sdk-seam-{uuid.uuid4()}", task_queue=queue
            )
    return list(_CONVERTERS)


async def test_a_context_free_sandbox_gives_its_runs_one_payload_converter(
    dev_server: DevServer,
) -> None:
    """The SDK builds each instance's converter with `WorkflowInstanceDetails`'
    `payload_converter_factory`: the plugin's sandbox hands it one that answers every run
    of a passed-through workflow with the same converter (`sandbox`'s docstring says why)."""
    first, second = await _converters(dev_server.address, context_free=True)
    assert first is second, _moved("how a workflow instance gets its payload converter")
    first, second = await _converters(dev_server.address, context_free=False)
    assert first is not second, "a converter that may take contexts is the SDK's, one a run"


def test_only_a_passed_through_workflow_shares_the_converter() -> None:
    restrictions = SandboxRestrictions.default.with_passthrough_modules("shop.models")
    runner = ContextCachingSandboxedWorkflowRunner(restrictions=restrictions, context_free=True)
    assert runner.passes_through("shop.models")
    assert runner.passes_through("shop.models.orders")
    assert runner.passes_through("durable_agent.temporal.workflow.agent_workflow") is False
    assert not runner.passes_through("shop.modelsx")
    assert not runner.passes_through("shop")
    everything = dataclasses.replace(restrictions, passthrough_all_modules=True)
    assert ContextCachingSandboxedWorkflowRunner(restrictions=everything).passes_through("x")


def test_pyproject_allows_only_verified_temporalio_releases() -> None:
    installed = Version(temporalio.__version__)
    assert f"{installed.major}.{installed.minor}" in VERIFIED_MINORS, (
        f"temporalio {installed} is not among the releases _sdk was verified on; run this "
        "file on it and add it to VERIFIED_MINORS"
    )
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    every = [*project["dependencies"], *chain(*project["optional-dependencies"].values())]
    specs = [d for d in every if re.match(r"temporalio\b(?!-)", d)]
    assert specs, "pyproject names no temporalio dependency"
    newest = Version(VERIFIED_MINORS[-1])
    next_minor = Version(f"{newest.major}.{newest.minor + 1}")
    for spec in specs:
        allowed = SpecifierSet(re.sub(r"^temporalio(\[[^\]]*\])?", "", spec))
        assert next_minor not in allowed, f"{spec} allows {next_minor}, which nothing verified"
        for minor in VERIFIED_MINORS:
            assert Version(minor) in allowed or Version(f"{minor}.1") in allowed, (spec, minor)


def test_no_other_module_names_temporalios_private_names() -> None:
    """Only `_sdk` reaches into temporalio's internals (its handler names and private
    modules); every other module reads them through it."""
    private = re.compile(r"__temporal|temporalio[\w.]*\._|from temporalio[\w.]* import \(?\s*_")
    for path in sorted((ROOT / "durable_agent").rglob("*.py")):
        if path.name != "_sdk.py":
            found = private.search(path.read_text())
            assert found is None, f"{path.relative_to(ROOT)} names {found.group()!r}"


@workflow.defn(name="SdkSeamWaiter")
class SdkSeamWaiter:
    """Waits for `go`, then answers with its memo: what a run read from its first activation
    must still read right after its views into it were let go of."""

    def __init__(self) -> None:
        self.went = False

    @workflow.signal
    def go(self) -> None:
        self.went = True

    @workflow.query
    def waiting(self) -> bool:
        return not self.went

    @workflow.run
    async def run(self) -> str:
        await workflow.sleep(0.01)  # a second activation, with a command of its own before it
        await workflow.wait_condition(lambda: self.went)
        return str(workflow.memo_value("note"))


def _sdk_of(instance: WorkflowInstance) -> Any:
    """The SDK's own instance inside a sandboxed one (the plugin's wraps the SDK's)."""
    while not hasattr(instance, "globals_and_locals"):
        instance = instance.inner  # type: ignore[attr-defined]
    return instance.globals_and_locals["__temporal_in_sandbox"].instance  # type: ignore[attr-defined]


def _protobuf_reached(instance: WorkflowInstance) -> Counter[str]:
    """The protobuf messages and containers a sandboxed instance's SDK instance reaches, by
    type name (classes, modules and functions are not walked: every run shares them)."""
    sdk = _sdk_of(instance)
    seen: set[int] = set()
    found: Counter[str] = Counter()
    todo: list[object] = [sdk]
    while todo:
        item = todo.pop()
        if id(item) in seen or isinstance(item, type | types.ModuleType | types.FunctionType):
            continue
        seen.add(id(item))
        module = type(item).__module__
        if "_pb2" in module or "upb" in module:
            found[type(item).__name__] += 1
        todo.extend(gc.get_referents(item))
    return found


_VIEWS = {"WorkflowActivationCompletion", "RepeatedScalarContainer", "MessageMapContainer"}
"""Only ever views: the completion a run sent last, its last activation's flags, its first
activation's headers (each keeps the whole activation's arena allocated)."""


class _KeepingOurs(_Keeping, ContextCachingSandboxedWorkflowRunner):
    """The plugin's sandbox, keeping each instance it makes (in `_Keeping.made`)."""


async def _waiting_views(
    client: Client, runner: SandboxedWorkflowRunner
) -> tuple[list[Counter[str]], set[int]]:
    """What 3 runs waiting on a worker with `runner` reach of protobuf, and the ids of their
    worker versions; their answers once let go on are checked."""
    queue = f"sdk-seam-{uuid.uuid4()}"
    made: list[WorkflowInstance] = type(runner).made  # type: ignore[attr-defined]
    made.clear()
    async with Worker(client, task_queue=queue, workflows=[SdkSeamWaiter], workflow_runner=runner):
        handles = [
            await client.start_workflow(
                SdkSeamWaiter.run,
                id=f"sdk-seam-{uuid.uuid4()}",
                task_queue=queue,
                memo={"note": f"run {k}"},
            )
            for k in range(3)
        ]
        for handle in handles:
            while not await _slept(handle) or not await handle.query(SdkSeamWaiter.waiting):
                await asyncio.sleep(0.05)
        waiting = made[-3:]  # the first instance only validated the workflow
        reached = [_protobuf_reached(instance) for instance in waiting]
        versions = {id(_sdk_of(i)._deployment_version_for_current_task) for i in waiting}
        for handle in handles:
            await handle.signal(SdkSeamWaiter.go)
        answers = [await handle.result() for handle in handles]
    assert answers == ["run 0", "run 1", "run 2"]
    return reached, versions


async def _slept(handle: Any) -> bool:
    """Whether the run's timer fired (its second activation happened)."""
    history = await handle.fetch_history()
    return any(event.HasField("timer_fired_event_attributes") for event in history.events)


async def test_a_waiting_run_keeps_no_view_into_its_activations(client: Client) -> None:
    """The SDK's instance keeps views into its first and last activations and its last
    completion (`sandbox`'s docstring); the plugin's sandbox gives each run copies of its
    own instead, so the messages they came from are freed. The SDK's own sandbox keeps
    views: if a release no longer does, `_sdk.let_go_of_activation` has nothing to do."""
    restrictions = SandboxRestrictions.default.with_passthrough_modules(__name__)
    sdks, _ = await _waiting_views(client, _Keeping(restrictions=restrictions))
    for reached in sdks:
        assert set(reached) >= _VIEWS, _moved(f"what a waiting instance keeps ({reached})")
    plugins, versions = await _waiting_views(client, _KeepingOurs(restrictions=restrictions))
    for reached in plugins:
        assert not _VIEWS & set(reached), f"a waiting run still holds views: {reached}"
        assert set(reached) <= {"Payloads", "Payload", "WorkerDeploymentVersion"}, reached
    assert len(versions) == 1, "every activation's worker version is one shared message"
