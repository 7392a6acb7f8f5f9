"""`DurableAgentPlugin` adds to a user's client and worker settings and replaces none of them.

The merging tests use real temporalio objects (lazy clients that never dial, replayers that
never replay) and read back the configuration the plugin produced; the last test hosts an
agent on a real worker next to a user's own workflow, activity and interceptor.
"""

from __future__ import annotations

import dataclasses
import gc
import zlib
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.api.common.v1 import Payload
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.client import Client
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import (
    ActivitySerializationContext,
    DataConverter,
    DefaultFailureConverter,
    DefaultFailureConverterWithEncodedAttributes,
    DefaultPayloadConverter,
    ExternalStorage,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
    WorkflowSerializationContext,
)
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    Replayer,
    UnsandboxedWorkflowRunner,
    Worker,
    WorkerConfig,
)
from temporalio.worker.workflow_sandbox import (
    SandboxedWorkflowRunner,
    SandboxMatcher,
    SandboxRestrictions,
)

from durable_agent import Agent, AgentBuilder, TestModel
from durable_agent.temporal import (
    AgentActivityConfig,
    AgentClient,
    AgentRegistration,
    AgentWorkflow,
    AgentWorkflowInput,
    DurableAgentPlugin,
    runtime_of,
)
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.encryption import EncryptionCodec
from durable_agent.temporal.plugin import PASSTHROUGH_MODULES, PluginConfigurationError
from durable_agent.temporal.runtime import RuntimeInterceptor
from durable_agent.temporal.sandbox import (
    ContextCachingInstance,
    ContextCachingSandboxedWorkflowRunner,
    ignores_contexts,
)
from durable_agent.temporal.storage import FileStorageDriver
from durable_agent.temporal.tracing import TelemetryInterceptor, Tracing
from durable_agent.temporal.workflow.stream_polls import StreamPollInterceptor

from .helpers import call, text_response, tool_response
from .temporal_support import new_worker, unique

ZLIB = b"binary/x-user-zlib"


class UserZlibCodec(PayloadCodec):
    """A user's own codec: compresses each payload under an encoding of its own."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [
            Payload(metadata={"encoding": ZLIB}, data=zlib.compress(p.SerializeToString()))
            for p in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [
            Payload.FromString(zlib.decompress(p.data)) if p.metadata.get("encoding") == ZLIB else p
            for p in payloads
        ]


class UserFailureConverter(DefaultFailureConverter):
    pass


class UserPayloadConverter(PydanticPayloadConverter):
    pass


def agent_named(name: str, text: str = "ok") -> Agent[Any]:
    return AgentBuilder(TestModel.with_text(text)).name(name).build()


async def lazy_client(**options: Any) -> Client:
    """A real `Client` that never dials: nothing listens on port 1."""
    return await Client.connect("127.0.0.1:1", lazy=True, **options)


def replayer_config(**options: Any) -> dict[str, Any]:
    """What a `Replayer` ends up with once its plugins have configured it."""
    return dict(Replayer(workflows=[], **options).config(active_config=True))


# --- data converter ---------------------------------------------------------------------


async def test_user_codec_kept_and_pydantic_converter_added() -> None:
    codec = UserZlibCodec()
    client = await lazy_client(
        data_converter=DataConverter(payload_codec=codec), plugins=[DurableAgentPlugin()]
    )
    converter = client.data_converter
    assert converter.payload_codec is codec
    assert converter.payload_converter_class is PydanticPayloadConverter
    assert converter.failure_converter_class is DefaultFailureConverter


async def test_default_converter_becomes_pydantic() -> None:
    client = await lazy_client(plugins=[DurableAgentPlugin()])
    assert client.data_converter.payload_converter_class is PydanticPayloadConverter
    assert client.data_converter.payload_codec is None


async def test_user_failure_converter_kept_even_with_the_plugins_codec() -> None:
    plugin_codec = EncryptionCodec({"k": bytes(32)}, "k")
    client = await lazy_client(
        data_converter=DataConverter(failure_converter_class=UserFailureConverter),
        plugins=[DurableAgentPlugin(codec=plugin_codec)],
    )
    assert client.data_converter.failure_converter_class is UserFailureConverter
    assert client.data_converter.payload_codec is plugin_codec


async def test_plugin_codec_encodes_failures_when_the_user_left_the_default() -> None:
    plugin_codec = EncryptionCodec({"k": bytes(32)}, "k")
    plugin = DurableAgentPlugin(codec=plugin_codec)
    client = await lazy_client(plugins=[plugin])
    assert plugin.codec is plugin_codec
    assert client.data_converter.payload_codec is plugin_codec
    assert client.data_converter.failure_converter_class is (
        DefaultFailureConverterWithEncodedAttributes
    )


async def test_custom_payload_converter_kept() -> None:
    client = await lazy_client(
        data_converter=DataConverter(payload_converter_class=UserPayloadConverter),
        plugins=[DurableAgentPlugin()],
    )
    assert client.data_converter.payload_converter_class is UserPayloadConverter


async def test_two_codecs_are_refused_by_name() -> None:
    with pytest.raises(PluginConfigurationError) as raised:
        await lazy_client(
            data_converter=DataConverter(payload_codec=UserZlibCodec()),
            plugins=[DurableAgentPlugin(codec=EncryptionCodec({"k": bytes(32)}, "k"))],
        )
    assert "UserZlibCodec" in str(raised.value)
    assert "EncryptionCodec" in str(raised.value)


async def test_converter_merge_is_idempotent() -> None:
    """A client re-created from another's config runs the plugin again: nothing changes."""
    plugin = DurableAgentPlugin(codec=EncryptionCodec({"k": bytes(32)}, "k"))
    first = await lazy_client(plugins=[plugin])
    second = Client(**first.config(active_config=True))
    assert second.data_converter is first.data_converter


def test_replayer_converter_is_merged_too() -> None:
    codec = UserZlibCodec()
    config = replayer_config(
        data_converter=DataConverter(payload_codec=codec), plugins=[DurableAgentPlugin()]
    )
    assert config["data_converter"].payload_codec is codec
    assert config["data_converter"].payload_converter_class is PydanticPayloadConverter


# --- sandbox ----------------------------------------------------------------------------


class UserRunner(UnsandboxedWorkflowRunner):
    pass


def test_sandbox_restrictions_of_the_user_kept_plus_passthrough() -> None:
    restrictions = dataclasses.replace(
        SandboxRestrictions.default,
        invalid_modules=SandboxMatcher(access={"user_forbidden"}),
        disable_lazy_sys_module_passthrough=True,
    ).with_passthrough_modules("user_lib")
    runner = SandboxedWorkflowRunner(restrictions=restrictions, runner_class=UserRunner)
    config = replayer_config(workflow_runner=runner, plugins=[DurableAgentPlugin()])
    merged = config["workflow_runner"]
    assert isinstance(merged, SandboxedWorkflowRunner)
    assert merged.runner_class is UserRunner
    assert merged.restrictions.invalid_modules is restrictions.invalid_modules
    assert merged.restrictions.invalid_module_members is restrictions.invalid_module_members
    assert merged.restrictions.disable_lazy_sys_module_passthrough
    assert merged.restrictions.passthrough_modules >= {"user_lib", *PASSTHROUGH_MODULES}
    assert restrictions.passthrough_modules.isdisjoint({"durable_agent"}), "user's object intact"


def test_default_sandbox_gains_the_passthrough() -> None:
    merged = replayer_config(plugins=[DurableAgentPlugin()])["workflow_runner"]
    assert isinstance(merged, SandboxedWorkflowRunner)
    assert merged.restrictions.passthrough_modules >= set(PASSTHROUGH_MODULES)
    assert "activities" not in merged.restrictions.passthrough_modules, "the user's, not ours"


def test_unsandboxed_runner_kept() -> None:
    runner = UnsandboxedWorkflowRunner()
    config = replayer_config(workflow_runner=runner, plugins=[DurableAgentPlugin()])
    assert config["workflow_runner"] is runner


# --- workflows, activities, agents ------------------------------------------------------


@activity.defn
async def shout(text: str) -> str:
    return text.upper()


async def test_workflow_and_activities_added_once() -> None:
    """On both the client and the worker, the plugin configures a worker twice."""
    plugin = DurableAgentPlugin()
    client = await lazy_client(plugins=[plugin])
    config = WorkerConfig(client=client, task_queue="q", workflows=[], activities=[shout])
    for _ in range(2):
        config = plugin.configure_worker(config)
    runtime = runtime_of(config)
    assert list(config["workflows"]) == [AgentWorkflow]
    assert list(config["activities"]) == [shout, *runtime.activities.all()]
    assert sum(isinstance(i, RuntimeInterceptor) for i in config["interceptors"]) == 1
    assert sum(isinstance(i, StreamPollInterceptor) for i in config["interceptors"]) == 1


async def test_agents_register_with_a_worker_not_at_client_connect() -> None:
    agent = agent_named(unique("plugin-agent"))
    plugin = DurableAgentPlugin(agents=[agent])
    client = await lazy_client(plugins=[plugin])
    with pytest.raises(LookupError, match="DurableAgentPlugin"):
        runtime_of(client.config())
    config = plugin.configure_worker(WorkerConfig(client=client, task_queue="q"))
    runtime = runtime_of(config)
    assert runtime.agents.get(agent.name).agent is agent


def test_each_worker_has_a_runtime_of_its_own() -> None:
    """One plugin, two workers: two runtimes, each with its own caches, pools and agents."""
    agent = agent_named(unique("shared"))
    plugin = DurableAgentPlugin(agents=[agent])
    one = runtime_of(replayer_config(plugins=[plugin]))
    two = runtime_of(replayer_config(plugins=[plugin]))
    assert one is not two
    assert one.caches is not two.caches
    assert one.toolsets is not two.toolsets
    assert one.tool_threads is not two.tool_threads
    assert one.agents is not two.agents
    assert one.agents.get(agent.name).agent is two.agents.get(agent.name).agent is agent


def test_replayer_registers_agents_with_their_activity_options() -> None:
    agent = agent_named(unique("replay-agent"))
    options = AgentActivityConfig(max_concurrent_tool_activities=3)
    config = replayer_config(
        plugins=[DurableAgentPlugin(agents=[AgentRegistration(agent, options)])]
    )
    runtime = runtime_of(config)
    assert runtime.agents.get(agent.name).activities is options


def test_same_agent_object_again_is_fine() -> None:
    agent = agent_named(unique("twice"))
    plugins = [DurableAgentPlugin(agents=[agent]), DurableAgentPlugin(agents=[agent, agent])]
    runtime = runtime_of(replayer_config(plugins=plugins))
    assert runtime.agents.get(agent.name).agent is agent


def test_duplicate_agent_name_refused_on_one_worker() -> None:
    name = unique("taken")
    first, second = agent_named(name, "first"), agent_named(name, "second")
    with pytest.raises(PluginConfigurationError, match=name):
        replayer_config(
            plugins=[DurableAgentPlugin(agents=[first]), DurableAgentPlugin(agents=[second])]
        )
    with pytest.raises(PluginConfigurationError, match=name):
        DurableAgentPlugin(agents=[first, second])
    # Two workers may host different agents under one name: each finds its own.
    for agent in (first, second):
        runtime = runtime_of(replayer_config(plugins=[DurableAgentPlugin(agents=[agent])]))
        assert runtime.agents.get(name).agent is agent


def test_same_agent_with_other_activity_options_refused() -> None:
    agent = agent_named(unique("options"))
    other = AgentRegistration(agent, AgentActivityConfig(max_concurrent_tool_activities=2))
    with pytest.raises(PluginConfigurationError, match="AgentActivityConfigs"):
        replayer_config(
            plugins=[DurableAgentPlugin(agents=[agent]), DurableAgentPlugin(agents=[other])]
        )


def _telemetry(config: dict[str, Any]) -> list[Tracing | None]:
    """The tracing of each telemetry interceptor the worker ended up with."""
    return [i.tracing for i in config["interceptors"] if isinstance(i, TelemetryInterceptor)]


def test_a_second_plugin_on_a_worker_adds_no_interceptors_again() -> None:
    """Each run and activity is seen once, whichever plugin brings the tracing: a second
    plugin's own telemetry would emit a run's span twice, or (without tracing) switch off
    the first one's for activities."""
    provider = SdkTracerProvider()
    tracing = DurableAgentPlugin(tracing=provider)
    for plugins in (
        [tracing, DurableAgentPlugin(agents=[agent_named(unique("joins"))])],
        [DurableAgentPlugin(agents=[agent_named(unique("first"))]), tracing],
        [tracing, tracing],
    ):
        config = replayer_config(plugins=plugins)
        interceptors = config["interceptors"]
        assert sum(isinstance(i, StreamPollInterceptor) for i in interceptors) == 1
        assert sum(isinstance(i, RuntimeInterceptor) for i in interceptors) == 1
        assert _telemetry(config) == [Tracing(provider)]
    config = replayer_config(plugins=[DurableAgentPlugin(), DurableAgentPlugin()])
    assert _telemetry(config) == [None]


def test_two_tracings_on_one_worker_refused() -> None:
    one = DurableAgentPlugin(tracing=SdkTracerProvider())
    with pytest.raises(PluginConfigurationError, match="tracer providers"):
        replayer_config(plugins=[one, DurableAgentPlugin(tracing=SdkTracerProvider())])


def test_not_an_agent_refused() -> None:
    with pytest.raises(PluginConfigurationError, match="AgentBuilder"):
        DurableAgentPlugin(agents=["support"])  # type: ignore[list-item]


async def test_worker_only_plugin_refused_when_the_client_lacks_its_converter() -> None:
    """A worker cannot change its client's converter: say so instead of failing on a payload."""
    client = await lazy_client()
    with pytest.raises(PluginConfigurationError, match=r"Client\.connect"):
        DurableAgentPlugin().configure_worker(WorkerConfig(client=client, task_queue="q"))
    assert client.data_converter.payload_converter_class is DefaultPayloadConverter


def test_from_env_takes_agents(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DURABLE_AGENT_ENCRYPTION_KEYS", raising=False)
    agent = agent_named(unique("env-agent"))
    plugin = DurableAgentPlugin.from_env(agents=[agent])
    assert plugin.codec is None
    assert plugin.agents == [agent]


# --- a real worker: the user's workflow runs an agent as a child --------------------------


class Ticket(BaseModel):
    agent: str
    prompt: str


class TicketOutcome(BaseModel):
    answer: str
    shouted: str


@workflow.defn
class TicketWorkflow:
    """A user's workflow: the agent answers as a child workflow, then the user's activity."""

    @workflow.run
    async def run(self, ticket: Ticket) -> TicketOutcome:
        result = await workflow.execute_child_workflow(
            AgentWorkflow.run,
            AgentWorkflowInput(agent=ticket.agent, prompt=ticket.prompt),
            id=f"{workflow.info().workflow_id}-agent",
        )
        shouted = await workflow.execute_activity(
            shout, str(result.output), start_to_close_timeout=timedelta(seconds=10)
        )
        return TicketOutcome(answer=str(result.output), shouted=shouted)


class CountingInterceptor(Interceptor):
    """The user's interceptor: counts the activities it sees, so we know it stayed on."""

    def __init__(self) -> None:
        self.activities: list[str] = []

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        seen = self.activities

        class Counting(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput) -> Any:
                seen.append(activity.info().activity_type)
                return await super().execute_activity(input)

        return Counting(next)


def lookup_order(order_id: str) -> str:
    """Where an order is.

    Args:
        order_id: the order number, e.g. "A-17"
    """
    return f"order {order_id} ships on Tuesday"


def order_agent(name: str, answer: str) -> Agent[Any]:
    """An agent that looks order A-17 up, then answers `answer`."""
    script = [tool_response(call("lookup_order", "c1", order_id="A-17")), text_response(answer)]
    return AgentBuilder(TestModel.with_responses(script)).name(name).tool(lookup_order).build()


async def order_client(
    dev_server: DevServer, name: str, answer: str, codec: PayloadCodec
) -> Client:
    """A client of the user's with `codec`, hosting `order_agent(name, answer)`."""
    return await Client.connect(
        dev_server.address,
        data_converter=DataConverter(payload_codec=codec),
        plugins=[DurableAgentPlugin(agents=[order_agent(name, answer)])],
    )


async def test_two_workers_in_one_process_keep_their_own_agents(dev_server: DevServer) -> None:
    """One process, two workers, one agent name meaning a different agent on each: each run
    is served by its own worker's agent, cached in its own worker's runtime."""
    name = unique("twin")
    first, second = agent_named(name, "from the first"), agent_named(name, "from the second")
    clients = [
        await Client.connect(dev_server.address, plugins=[DurableAgentPlugin(agents=[agent])])
        for agent in (first, second)
    ]
    queues = unique("first"), unique("second")
    async with (
        Worker(clients[0], task_queue=queues[0]) as one,
        Worker(clients[1], task_queue=queues[1]) as two,
    ):
        runs = [
            await AgentClient(client, task_queue=queue).start(name, "hi")
            for client, queue in zip(clients, queues, strict=True)
        ]
        results = [await run.result() for run in runs]
        histories = [runtime_of(w).caches.histories for w in (one, two)]
        assert runtime_of(one).agents.get(name).agent is first
        assert runtime_of(two).agents.get(name).agent is second
    assert [r.output for r in results] == ["from the first", "from the second"]
    assert histories[0] is not histories[1]


async def test_user_worker_hosts_an_agent_as_a_child_workflow(dev_server: DevServer) -> None:
    name = unique("orders")
    codec = UserZlibCodec()
    client = await order_client(dev_server, name, "Your order ships on Tuesday.", codec)
    interceptor = CountingInterceptor()
    workflow_id = unique("ticket")
    async with new_worker(
        client, workflows=[TicketWorkflow], activities=[shout], interceptors=[interceptor]
    ) as worker:
        runtime = runtime_of(worker)
        assert name in runtime.agents
        outcome = await client.execute_workflow(
            TicketWorkflow.run,
            Ticket(agent=name, prompt="Where is order A-17?"),
            id=workflow_id,
            task_queue=worker.task_queue,
            execution_timeout=timedelta(seconds=60),
        )
    assert outcome == TicketOutcome(
        answer="Your order ships on Tuesday.", shouted="YOUR ORDER SHIPS ON TUESDAY."
    )
    assert "tool_call" in interceptor.activities, "our activities ran through the user's"
    assert interceptor.activities[-1] == "shout"
    plain = await Client.connect(dev_server.address)  # no codec: what the server stores
    for run in (workflow_id, f"{workflow_id}-agent"):
        started = (await plain.get_workflow_handle(run).fetch_history()).events[0]
        payload = started.workflow_execution_started_event_attributes.input.payloads[0]
        assert payload.metadata["encoding"] == ZLIB, f"{run}: the user's codec was replaced"


def test_temporal_sandbox_becomes_the_context_caching_one_and_a_users_subclass_stays() -> None:
    merged = replayer_config(
        workflow_runner=SandboxedWorkflowRunner(runner_class=UserRunner),
        plugins=[DurableAgentPlugin()],
    )["workflow_runner"]
    assert type(merged) is ContextCachingSandboxedWorkflowRunner
    assert merged.runner_class is UserRunner
    assert merged.restrictions.passthrough_modules >= set(PASSTHROUGH_MODULES)

    class UserSandbox(SandboxedWorkflowRunner):
        pass

    own = UserSandbox()
    kept = replayer_config(workflow_runner=own, plugins=[DurableAgentPlugin()])["workflow_runner"]
    assert type(kept) is UserSandbox


def test_contexts_are_asked_once_per_command_until_the_next_activation() -> None:
    calls: list[object] = []

    class Inner:
        def get_serialization_context(self, info: object) -> object:
            calls.append(("context", info))
            return f"context of {info}"

        def get_external_store_context(self, info: object) -> object:
            calls.append(("store", info))
            return f"store of {info}"

        def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
            calls.append(("activate", act.run_id))
            return WorkflowActivationCompletion(run_id=act.run_id)

    instance = ContextCachingInstance(Inner())  # type: ignore[arg-type]
    for _ in range(3):
        assert instance.get_serialization_context("a") == "context of a"
        assert instance.get_external_store_context("a") == "store of a"
    assert instance.get_serialization_context(None) == "context of None"
    instance.activate(WorkflowActivation(run_id="act"))
    assert instance.get_serialization_context("a") == "context of a"
    assert calls == [
        ("context", "a"),
        ("store", "a"),
        ("context", None),
        ("activate", "act"),
        ("context", "a"),
    ]


# --- serialization contexts: answered without the sandbox only when nothing reads them ---


CONTEXT_KEY = "x-test-context"


class ContextBoundCodec(PayloadCodec, WithSerializationContext):
    """A user's codec bound to the payload's context (as a per-workflow key would be):
    it writes the context it encoded under, and refuses a payload decoded under another."""

    def __init__(self, context: SerializationContext | None = None, seen: list[str] | None = None):
        self.context = context
        self.seen = [] if seen is None else seen

    def with_context(self, context: SerializationContext) -> ContextBoundCodec:
        return ContextBoundCodec(context, self.seen)

    def describe(self) -> str:
        if isinstance(self.context, ActivitySerializationContext | WorkflowSerializationContext):
            return f"{type(self.context).__name__}:{self.context.workflow_id}"
        return "none"

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        label = self.describe()
        self.seen.append(label)
        return [
            Payload(metadata={**p.metadata, CONTEXT_KEY: label.encode()}, data=p.data)
            for p in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = []
        for p in payloads:
            label = p.metadata.get(CONTEXT_KEY)
            if label is not None and label.decode() != self.describe():
                raise ValueError(f"encoded under {label.decode()}, decoded under {self.describe()}")
            metadata = {k: v for k, v in p.metadata.items() if k != CONTEXT_KEY}
            out.append(Payload(metadata=metadata, data=p.data))
        return out


class TenantCodec(ContextBoundCodec):
    """Binds only to the contexts of its tenants' workflows, and answers others with itself."""

    def with_context(self, context: SerializationContext) -> ContextBoundCodec:
        workflow_id = getattr(context, "workflow_id", None) or ""
        return super().with_context(context) if workflow_id.startswith("tenant-") else self


def test_only_a_converter_that_ignores_contexts_is_answered_without_the_sandbox(
    tmp_path: Path,
) -> None:
    plain = replayer_config(plugins=[DurableAgentPlugin()])
    assert ignores_contexts(plain["data_converter"])
    assert plain["workflow_runner"].context_free
    encrypted = replayer_config(
        plugins=[DurableAgentPlugin(codec=EncryptionCodec({"k": bytes(32)}, "k"))]
    )
    assert encrypted["workflow_runner"].context_free, "our codec does not read contexts"
    bound = replayer_config(
        data_converter=DataConverter(payload_codec=ContextBoundCodec()),
        plugins=[DurableAgentPlugin()],
    )
    assert not ignores_contexts(bound["data_converter"])
    tenant = DataConverter(payload_codec=TenantCodec())
    assert not ignores_contexts(tenant), "a codec that takes contexts, whatever it answers"
    assert not bound["workflow_runner"].context_free
    stored = replayer_config(
        plugins=[
            DurableAgentPlugin(
                external_storage=ExternalStorage(drivers=[FileStorageDriver(tmp_path)])
            )
        ]
    )
    assert not stored["workflow_runner"].context_free, "a store context goes to the driver"


def test_a_context_free_instance_does_not_ask_the_sandbox() -> None:
    class Inner:
        def get_serialization_context(self, info: object) -> object:
            raise AssertionError("asked the sandbox")

        get_external_store_context = get_serialization_context

    instance = ContextCachingInstance(Inner(), context_free=True)  # type: ignore[arg-type]
    assert instance.get_serialization_context("a") is None
    assert instance.get_external_store_context("a").target is None


async def test_a_context_bound_codec_gets_each_payloads_context(dev_server: DevServer) -> None:
    """A codec that reads contexts still gets the real one for every payload, workflow side
    and activity side: a wrong or missing context fails the payload's decode."""
    name = unique("contexts")
    codec = ContextBoundCodec()
    client = await order_client(dev_server, name, "Tuesday.", codec)
    async with new_worker(client) as worker:
        runner = worker.config(active_config=True)["workflow_runner"]
        assert isinstance(runner, ContextCachingSandboxedWorkflowRunner)
        assert not runner.context_free
        workflow_id = unique("bound")
        result = await client.execute_workflow(
            AgentWorkflow.run,
            AgentWorkflowInput(agent=name, prompt="Where is order A-17?"),
            id=workflow_id,
            task_queue=worker.task_queue,
            execution_timeout=timedelta(seconds=60),
        )
    assert result.output == "Tuesday."
    assert f"ActivitySerializationContext:{workflow_id}" in codec.seen
    assert f"WorkflowSerializationContext:{workflow_id}" in codec.seen


# --- an evicted run is freed at once -----------------------------------------------------------


async def test_an_evicted_agent_run_leaves_nothing_for_the_collector(dev_server: DevServer) -> None:
    """The SDK's workflow instance refers to itself, and so do a run's components: without
    `release_evicted` a finished run's workflow, state and conversation stayed in memory
    until the collector's next full pass. This fails too when a temporalio release keeps
    its sandboxed instance elsewhere (then nothing is released)."""
    name = unique("evicted")
    queue = unique("evicted")
    client = await Client.connect(
        dev_server.address, plugins=[DurableAgentPlugin(agents=[order_agent(name, "Tuesday.")])]
    )
    gc.collect()
    async with Worker(client, task_queue=queue):  # a run that ends is evicted at once
        runs = [await AgentClient(client, task_queue=queue).start(name, "A-17?") for _ in range(3)]
        results = [await run.result() for run in runs]
    assert [r.output for r in results] == ["Tuesday."] * 3
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        left = Counter(type(o).__qualname__ for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    for kind in ("AgentRunState", "AgentLoop", "TemporalExecutor", "ModelRequest"):
        assert left[kind] == 0, f"{left[kind]} {kind} left for the collector: {left.most_common(8)}"


def test_an_eviction_run_again_releases_once_and_never_fails() -> None:
    """The SDK runs an eviction again when one overran its deadlock timeout: the hook is
    called once, and a hook that raises does not fail the eviction."""
    calls: list[str] = []

    class Evicted:
        def _durable_agent_evicted(self) -> None:
            calls.append("released")
            raise RuntimeError("a hook that fails")

    class SDKInstance:
        def __init__(self) -> None:
            self._object = Evicted()

    class InSandbox:
        instance = SDKInstance()

    class Inner:
        def __init__(self) -> None:
            self.globals_and_locals = {"__temporal_in_sandbox": InSandbox()}

        def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
            completion = WorkflowActivationCompletion(run_id=act.run_id)
            completion.successful.SetInParent()
            return completion

    instance = ContextCachingInstance(Inner())  # type: ignore[arg-type]
    eviction = WorkflowActivation(run_id="r")
    eviction.jobs.add().remove_from_cache.SetInParent()
    for _ in range(2):
        assert instance.activate(eviction).HasField("successful")
    assert calls == ["released"]
