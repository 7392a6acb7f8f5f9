"""One `WorkerRuntime` per worker: everything a worker keeps while it runs.

Two workers in one process (two task queues, or a test's worker beside an application's)
must not share agents, caches, thread pools, MCP server processes or approval keys, so
none of these live in module globals. `DurableAgentPlugin` makes one runtime for each
worker (or replayer) it configures, and every other `DurableAgentPlugin` on that worker
adds its agents to the same one (`runtime_of` finds it in the worker's configuration).

- Activities reach it as methods of `NodeActivities`, bound to it when the plugin adds
  them to the worker.
- Workflow code reaches only its `Hosting` (agents and settings), through the one seam
  `.hosting` describes; a `RuntimeInterceptor` opens that seam for its worker.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Any

from temporalio.worker import (
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from ..engine.spec import AgentSpec
from ..environments import EnvironmentHost
from .activities import NodeActivities
from .compaction.caches import PayloadCaches
from .hosting import HOSTING_EXTERN, Hosting
from .registry import AgentRegistry
from .tool_threads import ToolThreads
from .toolsets import ToolsetPool

__all__ = ["RuntimeInterceptor", "WorkerRuntime", "find_runtime", "runtime_of"]


class WorkerRuntime:
    """One worker's agents and settings (`hosting`) with the state its activities keep:
    payload caches, the threads sync tools run on, its open MCP toolsets, and its
    environments (the workspace store and the trees it materialized, made at first use)."""

    def __init__(self) -> None:
        self.hosting = Hosting()
        self.caches = PayloadCaches()
        self.tool_threads = ToolThreads()
        self.toolsets = ToolsetPool()
        self.workspace_store: str | None = None
        """The workspace store's URL (`DurableAgentPlugin(workspace_store=...)`; None: from
        `DURABLE_AGENT_WORKSPACE_STORE`, else `.durable-agent/workspaces`)."""
        self._environments: EnvironmentHost | None = None
        self.activities = NodeActivities(
            self.hosting, self.caches, self.tool_threads, self.toolsets, self.environments
        )
        self.listed: list[AgentSpec] = []
        """The agents the worker's plugins list, whose toolsets are checked at its start
        (an agent added to `agents` otherwise has its toolsets opened on first use)."""
        self._running = False

    @property
    def agents(self) -> AgentRegistry:
        return self.hosting.agents

    def environments(self) -> EnvironmentHost:
        """The worker's environment providers, made when a run with a workspace first
        needs them (a worker whose runs have none never opens a store)."""
        if self._environments is None:
            self._environments = EnvironmentHost(self.workspace_store)
        return self._environments

    @contextlib.asynccontextmanager
    async def running(self, slots: int) -> AsyncIterator[None]:
        """While its worker polls: the `listed` agents' toolsets listed first (a
        misconfigured MCP server raises `ToolsetStartupError` before the worker takes any
        task), toolsets kept open, a thread for each of its `slots` activity slots; all
        closed when it stops. A second plugin on the worker enters it again, changing
        nothing."""
        if self._running:
            yield
            return
        self._running = True
        try:
            await self.toolsets.check(self.listed)
            self.tool_threads.reserve(slots)
            try:
                yield
            finally:
                self.tool_threads.release(slots)
        finally:
            await self.toolsets.close()
            if self._environments is not None:
                self._environments.close()
                self._environments = None
            self._running = False


class RuntimeInterceptor(Interceptor):
    """Marks a worker's configuration as holding `runtime`, and hands the workflows of that
    worker its `Hosting` through the sandbox's extern functions."""

    def __init__(self, runtime: WorkerRuntime) -> None:
        self.runtime = runtime

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        hosted = self.runtime.hosting
        input.unsafe_extern_functions[HOSTING_EXTERN] = lambda: hosted
        return None


def runtime_of(worker_or_config: Any) -> WorkerRuntime:
    """The runtime of a worker or replayer (or of its configuration); `LookupError` if no
    `DurableAgentPlugin` configured it."""
    runtime = find_runtime(worker_or_config)
    if runtime is None:
        raise LookupError(
            f"{type(worker_or_config).__name__} was not configured by DurableAgentPlugin, so "
            "it has no WorkerRuntime; pass the plugin to Client.connect(..., plugins=[...])"
        )
    return runtime


def find_runtime(worker_or_config: Any) -> WorkerRuntime | None:
    """`runtime_of`, or None."""
    config = worker_or_config
    if hasattr(config, "config"):
        config = config.config(active_config=True)
    interceptors: Iterable[object] = config.get("interceptors") or ()
    for interceptor in interceptors:
        if isinstance(interceptor, RuntimeInterceptor):
            return interceptor.runtime
    return None
