"""`DurableAgentPlugin`: hosts agents on a Temporal client and worker the user already has.

    client = await Client.connect(address, data_converter=my_converter,
                                  plugins=[DurableAgentPlugin(agents=[support_agent])])
    worker = Worker(client, task_queue="app", workflows=[MyWorkflow], activities=[my_activity])

The plugin *adds* to what the user configured and replaces none of it, because a worker that
hosts agents is usually a worker that existed before the agents did:

- data converter: the user's codec, failure converter and external storage stay. Only the
  stock JSON payload converter is swapped for pydantic's (`PydanticPayloadConverter`), since
  every workflow input, result and activity argument of ours is a pydantic model. A custom
  payload converter is kept as it is; it must then handle pydantic models itself (e.g. by
  subclassing `PydanticPayloadConverter`).
- `codec=` (e.g. `durable_agent.temporal.encryption.EncryptionCodec`) is used only when the
  user has no codec, and then failures are encoded too unless the user chose a failure
  converter. Two codecs are refused rather than guessed into an order (compress before
  encrypting, or after?): chain them in one codec of your own.
- sandbox: a `SandboxedWorkflowRunner` keeps its restrictions and gains our pass-through
  modules; Temporal's own class (not a subclass of the user's) becomes
  `ContextCachingSandboxedWorkflowRunner` (`.sandbox`), the same sandbox asked less often,
  and not at all for serialization contexts when the worker's converter ignores them.
  Any other runner (e.g. `UnsandboxedWorkflowRunner`) is left alone.
- interceptors: the user's stay; one is added (`StreamPollInterceptor`) that shows each run
  the offsets plain Workflow Streams subscribers poll, so continue-as-new leaves none behind.
- runtime: each worker (or replayer) the plugin configures gets one `WorkerRuntime`
  (`.runtime`): its agents, settings, caches, thread pool and toolsets. A second
  `DurableAgentPlugin` on the same worker (one on the client, one on the worker) adds its
  agents to the same runtime.
- workflows and activities: `AgentWorkflow` and the worker's node activities (methods of
  its runtime's `NodeActivities`) are appended unless already there.
- agents: registered in the worker's runtime, each with the sub-agents its runs may start;
  connecting a client registers nothing, so `DurableAgentPlugin()` with no agents is the
  client-side plugin.
- search attributes: a worker registers `AgentName`, `AgentStatus` and `PendingApprovals`
  when the namespace lacks them (or warns where it may not, e.g. Temporal Cloud).
- toolsets (MCP servers): the hosted agents' servers are started and listed when a worker
  starts (a misconfigured one stops it), kept while it runs, and closed when it stops
  (`.toolsets`).

Pass the plugin to `Client.connect`: a worker takes its data converter from its client, so a
plugin given only to `Worker(plugins=[...])` on a client without it is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import structlog
from opentelemetry.trace import TracerProvider
from temporalio.contrib.pydantic import PydanticPayloadConverter, pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverter,
    DefaultFailureConverterWithEncodedAttributes,
    DefaultPayloadConverter,
    ExternalStorage,
    PayloadCodec,
)
from temporalio.plugin import SimplePlugin
from temporalio.service import RPCError
from temporalio.worker import ReplayerConfig, Worker, WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from durable_agent import UserError
from durable_agent.engine.quotas import ModelQuota
from durable_agent.engine.spec import AgentSpec

from ._sdk import activity_name
from .quota import QUOTA_ACTIVITIES, QuotaKeeper
from .registry import AgentNameTaken, AgentRegistration
from .runtime import RuntimeInterceptor, WorkerRuntime, find_runtime
from .sandbox import ContextCachingSandboxedWorkflowRunner, ignores_contexts
from .search_attributes import ensure_search_attributes
from .signing import ApprovalKeys
from .tool_threads import DEFAULT_ACTIVITY_SLOTS
from .tracing import TelemetryInterceptor, Tracing, context_propagation, flush, provider_from_env
from .workflow import AgentWorkflow
from .workflow.stream_polls import StreamPollInterceptor

__all__ = [
    "PASSTHROUGH_MODULES",
    "DurableAgentPlugin",
    "PluginConfigurationError",
    "data_converter",
]

PASSTHROUGH_MODULES = ("durable_agent", "pydantic", "pydantic_core", "structlog", "opentelemetry")
"""Loaded once, outside the sandbox: the agents a workflow runs are the objects its worker
registered (`.hosting`), and re-importing pydantic and structlog in every workflow's
sandbox is slow and buys nothing, as they are deterministic. Only
library modules: a user's own `workflows` or
`activities` module is theirs to pass through."""

log = structlog.get_logger("durable_agent.plugin")


class PluginConfigurationError(UserError):
    """The plugin cannot combine its settings with the user's; the message says what to change."""

    kind = "plugin_configuration"


def data_converter() -> DataConverter:
    """The converter a client gets from the plugin when it had none of its own."""
    return pydantic_data_converter


def _registration(
    entry: AgentSpec | AgentRegistration,
) -> tuple[AgentSpec, AgentRegistration | None]:
    if isinstance(entry, AgentRegistration):
        return entry.agent, entry
    if isinstance(entry, AgentSpec):
        return entry, None
    raise PluginConfigurationError(
        f"DurableAgentPlugin(agents=...) takes Agent or AgentRegistration objects, not "
        f"{type(entry).__name__} ({entry!r}); build agents with AgentBuilder(...).build()"
    )


class DurableAgentPlugin(SimplePlugin):
    def __init__(
        self,
        agents: Sequence[AgentSpec | AgentRegistration] = (),
        *,
        codec: PayloadCodec | None = None,
        external_storage: ExternalStorage | None = None,
        approval_keys: ApprovalKeys | None = None,
        tracing: bool | TracerProvider = False,
        tracer_provider: TracerProvider | None = None,
        quotas: Mapping[str, ModelQuota] | None = None,
        workspace_store: str | None = None,
    ) -> None:
        """`agents` are hosted by every worker (and replayer) this plugin configures; an
        `AgentRegistration(agent, AgentActivityConfig(...))` sets that agent's activity timeouts.

        `codec` encodes every payload when the user's converter has no codec. With it,
        failure messages and stack traces move into an encoded payload too (unless the user
        chose a failure converter), since a tool's or model's error text can quote the
        conversation.

        `external_storage` (Temporal's `ExternalStorage`, see `.storage`) moves large
        payloads out of history when the user's converter has none.

        `approval_keys` (see `.signing`): every worker this plugin configures accepts only
        approvals signed with one of them, and an `AgentClient` on this client signs its
        decisions with the first.

        `tracing` (see `.tracing`): `True` sends each run's OpenTelemetry spans (one trace a
        run) to the global tracer provider, or to `tracer_provider`; a provider may also be
        given as `tracing` itself. Off (the default), nothing is traced and no trace context
        is added to workflow and activity headers.

        `quotas` (see `durable_agent.quotas`): `{"openai:gpt-4.1": ModelQuota(...)}`, the
        limits every run of the worker's task queue keeps to for that `provider:model`, across
        all workers of the queue; configure every worker of a queue the same.

        `workspace_store` (see `durable_agent.environments`): where the workspaces of runs
        live, a URL (`file:///path`, `s3://bucket/prefix`, `memory://`) every worker of
        the queue shares; default `DURABLE_AGENT_WORKSPACE_STORE`, else
        `.durable-agent/workspaces` in the current directory.
        """
        self.workspace_store = workspace_store
        self.quotas = _checked_quotas(quotas or {})
        entries: dict[str, tuple[AgentSpec, AgentRegistration | None]] = {}
        for entry in agents:
            agent, registration = _registration(entry)
            seen = entries.get(agent.name)
            if seen is not None and seen[0] is not agent:
                raise PluginConfigurationError(
                    f"DurableAgentPlugin(agents=...) lists two different agents named "
                    f"{agent.name!r}; give each a unique name with AgentBuilder.name(...)"
                )
            if seen is not None and None not in (seen[1], registration) and seen[1] != registration:
                raise PluginConfigurationError(
                    f"DurableAgentPlugin(agents=...) lists agent {agent.name!r} twice with "
                    "different activity options; list it once"
                )
            if seen is None or registration is not None:
                entries[agent.name] = (agent, registration)
        self._agents = list(entries.values())
        self.codec = codec
        self.external_storage = external_storage
        self.approval_keys = approval_keys
        if isinstance(tracing, TracerProvider):
            tracer_provider, tracing = tracing, True
        self.tracing = Tracing(tracer_provider) if tracing else None
        interceptors: list[Any] = [StreamPollInterceptor()]
        if self.tracing is not None:
            interceptors.append(context_propagation())
        interceptors.append(TelemetryInterceptor(self.tracing))
        super().__init__(
            "durable-agent.DurableAgentPlugin",
            data_converter=self._data_converter,
            workflows=self._workflows,
            workflow_runner=self._workflow_runner,
            interceptors=interceptors,
        )

    @property
    def agents(self) -> list[AgentSpec]:
        return [agent for agent, _ in self._agents]

    @classmethod
    def from_env(
        cls,
        agents: Sequence[AgentSpec | AgentRegistration] = (),
        *,
        environ: Mapping[str, str] | None = None,
    ) -> DurableAgentPlugin:
        """Encrypts payloads when DURABLE_AGENT_ENCRYPTION_KEYS is set and stores large ones
        where DURABLE_AGENT_STORAGE says; raises `EncryptionError` or `StorageConfigError`
        naming a malformed setting. Requires (and makes) signed approvals when
        DURABLE_AGENT_APPROVAL_KEYS is set (`ApprovalKeyError`, an `EncryptionError`, when
        it does not parse). Traces runs over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT or
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (`.tracing.provider_from_env`)."""
        from .encryption import codec_from_env
        from .storage import external_storage_from_env

        env = os.environ if environ is None else environ

        return cls(
            agents,
            codec=codec_from_env(env),
            external_storage=external_storage_from_env(env),
            approval_keys=ApprovalKeys.from_env(env),
            tracing=provider_from_env(env) or False,
        )

    # --- data converter -------------------------------------------------------------------

    def _data_converter(self, existing: DataConverter | None) -> DataConverter:
        """The user's converter with only the parts we need added (see the module docstring).

        Applying it to its own result changes nothing, so a client that is re-created from
        another's config (plugins included) keeps the same converter.
        """
        converter = existing or DataConverter.default
        changes: dict[str, Any] = {}
        if converter.payload_converter_class is DefaultPayloadConverter:
            changes["payload_converter_class"] = PydanticPayloadConverter
        if self.codec is not None and converter.payload_codec is not self.codec:
            if converter.payload_codec is not None:
                raise PluginConfigurationError(
                    "two payload codecs: the data converter already has "
                    f"{type(converter.payload_codec).__name__} and "
                    f"DurableAgentPlugin(codec=...) brings {type(self.codec).__name__}; "
                    "keep one, or chain them in a codec of your own (encode with one, then "
                    "the other) and pass that as the data converter's payload_codec"
                )
            changes["payload_codec"] = self.codec
            if converter.failure_converter_class is DefaultFailureConverter:
                changes["failure_converter_class"] = DefaultFailureConverterWithEncodedAttributes
        if self.external_storage is not None and converter.external_storage is None:
            changes["external_storage"] = self.external_storage
        return dataclasses.replace(converter, **changes) if changes else converter

    # --- sandbox --------------------------------------------------------------------------

    def _workflow_runner(self, existing: WorkflowRunner | None) -> WorkflowRunner:
        """Adds our pass-through modules to a sandbox, keeping its restrictions and runner class.

        Another runner (unsandboxed, or one of the user's) is kept: it already shares
        modules with the worker, which is all the pass-through is for.
        """
        if existing is None:
            return ContextCachingSandboxedWorkflowRunner(
                restrictions=SandboxRestrictions.default.with_passthrough_modules(
                    *PASSTHROUGH_MODULES
                )
            )
        if not isinstance(existing, SandboxedWorkflowRunner):
            return existing
        restrictions = existing.restrictions
        if not (
            restrictions.passthrough_all_modules
            or set(PASSTHROUGH_MODULES) <= set(restrictions.passthrough_modules)
        ):
            restrictions = restrictions.with_passthrough_modules(*PASSTHROUGH_MODULES)
        if type(existing) is SandboxedWorkflowRunner:
            # Temporal's own class (not a subclass of the user's): the caching one in its place.
            return ContextCachingSandboxedWorkflowRunner(
                restrictions=restrictions, runner_class=existing.runner_class
            )
        if restrictions is existing.restrictions:
            return existing
        return dataclasses.replace(existing, restrictions=restrictions)

    # --- workflows, activities, agents ----------------------------------------------------

    def _workflows(self, existing: Sequence[type] | None) -> Sequence[type]:
        workflows = list(existing or [])
        # A quota's keeper runs on the task queue of the workers that configure it.
        ours = (AgentWorkflow, QuotaKeeper) if self.quotas else (AgentWorkflow,)
        workflows.extend(w for w in ours if w not in workflows)
        return workflows

    def _hosted(self, config: WorkerConfig | ReplayerConfig) -> WorkerRuntime:
        """The worker's runtime (made by the first `DurableAgentPlugin` that configures it,
        its interceptor added to the configuration), with this plugin's agents and settings
        added."""
        runtime = find_runtime(config)
        if runtime is None:
            runtime = WorkerRuntime()
            config["interceptors"] = [
                *(config.get("interceptors") or ()),
                RuntimeInterceptor(runtime),
            ]
        hosting = runtime.hosting
        for agent, registration in self._agents:
            try:
                hosting.agents.host(agent, registration.activities if registration else None)
                runtime.listed.append(agent)
            except AgentNameTaken as error:
                raise PluginConfigurationError(
                    f"DurableAgentPlugin on one worker: {error.message}"
                ) from None
        if self.quotas:
            hosting.quotas.update(self.quotas)
        if self.workspace_store is not None:
            if runtime.workspace_store not in (None, self.workspace_store):
                raise PluginConfigurationError(
                    "two DurableAgentPlugins on one worker bring different workspace_store "
                    "URLs; give it to one of them"
                )
            runtime.workspace_store = self.workspace_store
        if self.approval_keys is not None:
            if hosting.approval_keys not in (None, self.approval_keys):
                raise PluginConfigurationError(
                    "two DurableAgentPlugins on one worker bring different approval_keys; "
                    "give them to one of them"
                )
            hosting.approval_keys = self.approval_keys
        return runtime

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """Hosts the agents in the worker's runtime, then adds the workflow, activities and
        sandbox settings.

        A worker cannot change its client's data converter, so a worker-only plugin whose
        converter changes would not be in force is refused here instead of failing later on
        the first payload (or, with `codec=`, writing plaintext to history).
        """
        client = config.get("client")
        if client is not None:
            current = client.data_converter
            wanted = self._data_converter(current)
            if wanted is not current:
                raise PluginConfigurationError(
                    "this worker's client was connected without DurableAgentPlugin's data "
                    "converter (pydantic payloads"
                    + (", the plugin's codec" if self.codec is not None else "")
                    + "); pass the plugin to Client.connect(..., plugins=[...]) rather than "
                    "only to Worker(plugins=[...])"
                )
        joining = find_runtime(config) is not None
        runtime = self._hosted(config)
        before = list(config.get("interceptors") or ())
        if client is not None and client.data_converter.external_storage is not None:
            runtime.hosting.external_storage = True
        activities: list[Callable[..., Any]] = list(config.get("activities") or ())
        names = {activity_name(a) for a in activities}
        activities.extend(a for a in runtime.activities.all() if activity_name(a) not in names)
        if self.quotas:
            activities.extend(a for a in QUOTA_ACTIVITIES if a not in activities)
        config["activities"] = activities
        config = super().configure_worker(config)
        if joining:
            config["interceptors"] = self._joined(before, config.get("interceptors") or ())
        if client is not None:
            config["workflow_runner"] = _answering_contexts(
                config.get("workflow_runner"), client.data_converter
            )
        return config

    def configure_replayer(self, config: ReplayerConfig) -> ReplayerConfig:
        joining = find_runtime(config) is not None
        self._hosted(config)
        before = list(config.get("interceptors") or ())
        config = super().configure_replayer(config)
        if joining:
            config["interceptors"] = self._joined(before, config.get("interceptors") or ())
        config["workflow_runner"] = _answering_contexts(
            config.get("workflow_runner"), config.get("data_converter") or DataConverter.default
        )
        return config

    def _joined(self, before: list[Any], now: Sequence[Any]) -> list[Any]:
        """The interceptors of a worker (or replayer) another `DurableAgentPlugin` (or this
        one, on both the client and the worker) configured first, once this one has joined
        its runtime: `before`, and not again what this plugin appended. The first one's
        interceptors already see every run and activity; this one's would see each twice (a
        run's span emitted twice), and its telemetry without tracing would switch off the
        tracing the first asked for. A plugin that traces where the first does not brings
        its tracing in place of the first's telemetry; two tracings are refused."""
        added = list(now[len(before) :])
        first = next((i for i in before if isinstance(i, TelemetryInterceptor)), None)
        if first is None:
            return [*before, *added]
        if self.tracing is None or first.tracing == self.tracing:
            return before
        if first.tracing is not None:
            raise PluginConfigurationError(
                "two DurableAgentPlugins on one worker trace to different tracer providers; "
                "give tracing to one of them"
            )
        ours = [i for i in added if not isinstance(i, StreamPollInterceptor)]
        at = before.index(first)
        return [*before[:at], *ours, *before[at + 1 :]]

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Makes sure the search attributes `AgentWorkflow` upserts exist before it polls:
        a workflow that upserts an unknown one fails its task over and over."""
        try:
            added = await ensure_search_attributes(worker.client)
        except RPCError as error:
            log.warning(
                "could not check or register the search attributes AgentName, AgentStatus and "
                "PendingApprovals; create them on the server, or agent workflows will fail "
                "their tasks",
                error=str(error),
            )
        else:
            if added:
                log.info("registered search attributes", added=added)
        runtime = find_runtime(worker)
        slots = (
            worker.config(active_config=True).get("max_concurrent_activities")
            or DEFAULT_ACTIVITY_SLOTS
        )
        try:
            async with runtime.running(slots) if runtime else contextlib.nullcontext():
                await super().run_worker(worker, next)
        finally:
            flush(self.tracing.resolve() if self.tracing is not None else None)


def _answering_contexts(runner: WorkflowRunner | None, converter: DataConverter) -> Any:
    """Our sandbox, told whether the converter its instances serve `ignores_contexts`."""
    if not isinstance(runner, ContextCachingSandboxedWorkflowRunner):
        return runner
    context_free = ignores_contexts(converter)
    if runner.context_free is context_free:
        return runner
    return dataclasses.replace(runner, context_free=context_free)


def _checked_quotas(quotas: Mapping[str, ModelQuota]) -> dict[str, ModelQuota]:
    checked = {}
    for key, quota in quotas.items():
        provider, _, model = key.partition(":")
        if not provider or not model:
            raise PluginConfigurationError(
                f"quotas key {key!r} must be PROVIDER:MODEL, e.g. 'openai:gpt-4.1'"
            )
        if not isinstance(quota, ModelQuota):
            raise PluginConfigurationError(
                f"quotas[{key!r}] must be a ModelQuota(requests_per_minute=..., ...), got "
                f"{type(quota).__name__}"
            )
        checked[key] = quota
    return checked
