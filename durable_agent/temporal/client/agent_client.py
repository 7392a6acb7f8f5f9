"""`AgentClient`: starting, finding and listing agent runs on one namespace."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from durable_agent import (
    RunStatus,
)

from ..encryption import EncryptionError
from ..plugin import DurableAgentPlugin
from ..queues import DEFAULT_TASK_QUEUE
from ..run_errors import AgentRunError, CannotConnect
from ..storage import StorageConfigError
from .connection import DEFAULT_TIMEOUT, Connection
from .handle import AgentRunHandle
from .listing import ListedRun, _listed, list_query, memo_cost, memo_quota_wait

__all__ = ["AgentClient"]


class AgentClient(Connection):
    """Agent runs on one Temporal namespace; `client` must use `DurableAgentPlugin`.

    `task_queue` is where `start()` sends runs (the workers' queue); `timeout` bounds each
    query, update and signal, so a run without a worker raises `NoWorker` instead of hanging.
    `approval_keys` sign every approval and denial (see `.signing`); by default they are
    those of the client's `DurableAgentPlugin`, if any.
    """

    @classmethod
    async def connect(
        cls,
        address: str | None = None,
        namespace: str | None = None,
        *,
        task_queue: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        environ: Mapping[str, str] | None = None,
    ) -> AgentClient:
        """Connects with `DurableAgentPlugin.from_env()` (payload encryption when
        DURABLE_AGENT_ENCRYPTION_KEYS is set, external payloads where DURABLE_AGENT_STORAGE
        says); unset arguments come from TEMPORAL_ADDRESS
        (localhost:7233), TEMPORAL_NAMESPACE (default) and TEMPORAL_TASK_QUEUE. `environ`
        replaces `os.environ` for all of these."""
        env = os.environ if environ is None else environ
        address = address or env.get("TEMPORAL_ADDRESS", "localhost:7233")
        namespace = namespace or env.get("TEMPORAL_NAMESPACE", "default")
        task_queue = task_queue or env.get("TEMPORAL_TASK_QUEUE", DEFAULT_TASK_QUEUE)
        try:
            plugin = DurableAgentPlugin.from_env(environ=env)
        except (EncryptionError, StorageConfigError) as error:
            raise AgentRunError(str(error)) from None
        try:
            client = await asyncio.wait_for(
                Client.connect(address, namespace=namespace, plugins=[plugin]), timeout
            )
        except (RuntimeError, ValueError, TimeoutError, RPCError) as error:
            detail = f": {error}" if str(error) else f" (no answer within {timeout:g}s)"
            raise CannotConnect(
                f"cannot connect to the Temporal server at {address}{detail}\n"
                "Is it running? Start a local one with a worker: `python worker.py --dev` "
                "(or `durable-agent worker --dev`), or point TEMPORAL_ADDRESS (--address) at "
                "your server."
            ) from None
        return cls(client, task_queue=task_queue, timeout=timeout)

    async def start(
        self,
        agent: str,
        prompt: str,
        *,
        workflow_id: str | None = None,
        task_queue: str | None = None,
        model: str | None = None,
        **input_fields: Any,
    ) -> AgentRunHandle:
        """Starts an `AgentWorkflow` run of `agent` (a name registered on the workers).

        `input_fields` are the other fields of `AgentWorkflowInput` (`suspend_at`,
        `approval_timeout_seconds`, `conversation_id`, `message_history`, `metadata`, ...);
        an unknown one raises TypeError, one out of range `InvalidInput` (before anything is
        started). The workflow id defaults to `agent-NAME-XXXXXXXX`. `model` runs it on
        another of the agent's `allowed_models`, by name: where the client was connected
        with the agent (`DurableAgentPlugin(agents=[...])`) an unknown name raises
        `InvalidInput` here, and on the worker it fails the run at once, before any model
        request.
        """
        handle, queue = await self.start_run(
            agent,
            prompt,
            workflow_id=workflow_id,
            task_queue=task_queue,
            model=model,
            **input_fields,
        )
        return AgentRunHandle(self, handle, task_queue=queue)

    def get(self, workflow_id: str, run_id: str | None = None) -> AgentRunHandle:
        """A handle on an existing run; nothing is sent until its first call, which checks
        that the workflow exists and is an agent run. Without `run_id` it follows the
        workflow id's latest run (across continue-as-new)."""
        return AgentRunHandle(self, self.run_handle(workflow_id, run_id))

    async def list(
        self,
        status: RunStatus | str | None = None,
        agent: str | None = None,
        limit: int | None = None,
        *,
        forked_from: str | None = None,
        include_subagents: bool = False,
    ) -> AsyncIterator[ListedRun]:
        """Agent runs, newest first, from the `AgentStatus`/`AgentName` search attributes.

        `status="waiting"` lists the runs waiting for a human (approval, deferred result or
        resume); `forked_from="w1"` the forks and retries of w1 (`ForkedFrom`). Sub-agents'
        runs (child workflows) are left out unless `include_subagents`: their parents list
        them (`status().subagents`). Visibility lags the runs by up to a second or so."""
        query = list_query(status, agent, forked_from, top_level=not include_subagents)
        try:
            async for execution in self.client.list_workflows(query, limit=limit):
                cost, waits = await memo_cost(execution), await memo_quota_wait(execution)
                yield _listed(execution, cost, waits)
        except RPCError as error:
            raise self._list_error(error) from None

    def _list_error(self, error: RPCError) -> AgentRunError:
        if error.status == RPCStatusCode.UNAVAILABLE:
            return CannotConnect(f"lost the connection to the Temporal server: {error.message}")
        hint = ""
        if "AgentStatus" in error.message or "AgentName" in error.message:
            hint = (
                "; register the search attributes AgentName, AgentStatus (Keyword) and "
                "PendingApprovals (Int) on the server (`python worker.py --dev` and "
                "`durable-agent worker` do)"
            )
        return AgentRunError(f"listing failed: {error.message}{hint}")
