"""Running a worker: the pieces `durable-agent worker` and `python worker.py` are made of.

`register_module` registers the agents a module defines, `plugin` builds the worker's
`DurableAgentPlugin` from the environment (encryption, external storage, signed approvals),
and `run_worker` connects, checks the agents' MCP servers and polls until told to stop.
The command line, the embedded dev server and the inbox around it live in
`durable_agent.cli.worker` and `durable_agent.cli.dev`.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, NoReturn

import structlog
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import Worker, WorkerDeploymentConfig

from ..contract.errors import UserError
from ..engine.quotas import ModelQuota
from ..engine.spec import AgentSpec
from .encryption import EncryptionCodec, EncryptionError
from .plugin import DurableAgentPlugin
from .quota.keys import unused_quotas
from .registry import AgentNameTaken, AgentRegistration, AgentRegistry
from .roles import Role, role_queue
from .runtime import runtime_of
from .storage import STORAGE_ENV, StorageConfigError
from .toolsets import ToolsetStartupError
from .tracing import OTLP_ENDPOINT_ENVS, TracingConfigError

__all__ = ["WorkerStartError", "exit_process", "plugin", "register_module", "run_worker"]

log = structlog.get_logger("durable_agent.worker")


class WorkerStartError(UserError):
    """The worker cannot start as configured; the message says what to change. `usage` is
    set when the command line itself is wrong (a module that does not import)."""

    kind = "worker_start"

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


def register_module(target: AgentRegistry, module_name: str) -> list[str]:
    """Registers the agents a module defines (its `AGENTS`, which may hold
    `AgentRegistration`s to give an agent its activity options, or else every `Agent` at
    its top level), each with its sub-agents; returns their names."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise WorkerStartError(
            f"--agents {module_name}: cannot import it ({error})", usage=True
        ) from error
    agents: list[AgentSpec | AgentRegistration] | None = getattr(module, "AGENTS", None)
    if agents is None:
        agents = [value for value in vars(module).values() if isinstance(value, AgentSpec)]
    if not agents:
        raise WorkerStartError(
            f"--agents {module_name}: the module defines no Agent; build one with "
            "AgentBuilder(...).build() at module level or list them in AGENTS",
            usage=True,
        )
    names = []
    for entry in agents:
        if isinstance(entry, AgentRegistration):
            agent, options = entry.agent, entry.activities
        elif isinstance(entry, AgentSpec):
            agent, options = entry, None
        else:
            raise WorkerStartError(
                f"--agents {module_name}: AGENTS holds {type(entry).__name__} ({entry!r}); "
                "list Agent or AgentRegistration objects",
                usage=True,
            )
        try:
            target.host(agent, options)
        except AgentNameTaken as error:
            raise WorkerStartError(f"--agents {module_name}: {error.message}") from None
        names.append(agent.name)
    return names


def plugin(
    quotas: Mapping[str, ModelQuota] | None = None, agents: AgentRegistry | None = None
) -> DurableAgentPlugin:
    """Encrypts payloads when DURABLE_AGENT_ENCRYPTION_KEYS is set (see `.encryption`) and
    stores large ones where DURABLE_AGENT_STORAGE says (see `.storage`); requires signed
    approvals when DURABLE_AGENT_APPROVAL_KEYS is set (see `.signing`); traces over OTLP when
    OTEL_EXPORTER_OTLP_ENDPOINT is set (see `.tracing`). A setting that does not parse stops
    the worker with a message naming it."""
    try:
        built = DurableAgentPlugin.from_env(list(agents or ()))
    except (EncryptionError, StorageConfigError, TracingConfigError) as error:
        raise WorkerStartError(str(error)) from None
    if quotas:
        built.quotas = dict(quotas)
        log.info(
            "model quotas on",
            quotas={k: q.model_dump(exclude_none=True) for k, q in quotas.items()},
        )
        unused, used = unused_quotas(quotas, agents or ())
        for key in unused:
            log.warning(
                f"model quota {key!r} applies to no hosted agent: no agent's model has that "
                f"key (they use: {', '.join(used) or 'none with a provider'}); check its "
                "spelling, keys are PROVIDER:MODEL as the model names them",
                key=key,
                agents_use=used,
            )
    if built.tracing is not None:
        endpoint = next((os.environ[n] for n in OTLP_ENDPOINT_ENVS if os.environ.get(n)), None)
        log.info("tracing on: spans and metrics go over OTLP", endpoint=endpoint)
    if built.external_storage is not None:
        log.info("external payload storage on", storage=os.environ.get(STORAGE_ENV))
    codec = built.codec
    if isinstance(codec, EncryptionCodec):
        log.info("payload encryption on", active_key=codec.active, key_ids=codec.key_ids)
    keys = built.approval_keys
    if keys is not None:
        log.info("signed approvals required", signing_key=keys.active, key_ids=keys.key_ids)
    return built


async def run_worker(
    address: str,
    namespace: str,
    task_queue: str,
    *,
    stop: asyncio.Event,
    agents: AgentRegistry | None = None,
    ready: asyncio.Event | None = None,
    graceful_shutdown_seconds: float = 30.0,
    workflows: Sequence[type] = (),
    activities: Sequence[Callable[..., Any]] = (),
    quotas: Mapping[str, ModelQuota] | None = None,
    role: Role = "all",
    max_concurrent_activities: int | None = None,
    deployment: tuple[str, str] | None = None,
) -> None:
    """Hosts `agents`, and an application's own `workflows` and `activities` beside them,
    until `stop`. In-flight activities then get `graceful_shutdown_seconds` to finish
    before they are cancelled (a cancelled tool call is retried on another worker)."""
    hosted = plugin(quotas, agents)
    try:
        client = await Client.connect(address, namespace=namespace, plugins=[hosted])
    except RuntimeError as error:
        raise WorkerStartError(
            f"cannot reach the Temporal server at {address} (namespace {namespace}): {error}\n"
            "start one with `python worker.py --dev` or "
            "`docker compose -f docker-compose.temporal.yml up -d`, or set TEMPORAL_ADDRESS"
        ) from error
    polled = role_queue(task_queue, role)
    limits: dict[str, Any] = {"max_concurrent_activities": max_concurrent_activities}
    if deployment is not None:
        limits["deployment_config"] = deployment_config(*deployment)
    worker = Worker(
        client,
        task_queue=polled,
        workflows=list(workflows),
        activities=list(activities),
        graceful_shutdown_timeout=timedelta(seconds=graceful_shutdown_seconds),
        **{k: v for k, v in limits.items() if v is not None},
    )
    runtime = runtime_of(worker)
    runtime.hosting.role_split = role == "workflows"
    # Every hosted agent's MCP servers start, and are listed, before the worker polls: a
    # misconfigured one stops the worker here with the reason. They stay open for it.
    try:
        await runtime.toolsets.check(runtime.listed)
    except ToolsetStartupError as error:
        await runtime.toolsets.close()
        raise WorkerStartError(error.message) from None
    async with worker:
        log.info(
            "worker started",
            address=address,
            namespace=namespace,
            task_queue=polled,
            role=role,
            agents=runtime.agents.names(),
        )
        if ready is not None:
            ready.set()
        await stop.wait()
        log.info("worker stopping: finishing in-flight tasks")
    log.info("worker stopped")


def deployment_config(deployment_name: str, build_id: str) -> WorkerDeploymentConfig:
    """This worker as version `build_id` of Worker Deployment `deployment_name`: the server
    sends new runs to the deployment's current version, and (auto-upgrade) moves runs
    already waiting onto it at their next task, once it is made current
    (`temporal worker deployment set-current-version`). Rolling back is making the
    earlier version current again. The replay tests keep a run upgradable (see
    docs/upgrades.md)."""
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(deployment_name=deployment_name, build_id=build_id),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
    )


def exit_process(code: int) -> NoReturn:
    """Leaves without interpreter finalization: the SDK's native threads can abort it after
    a clean shutdown (temporalio/sdk-python#300), and supervisors must see the real code."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
