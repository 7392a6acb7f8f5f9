"""`AgentClient`: starting, finding and listing agent runs on one namespace."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.common import Priority
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from durable_agent import (
    RunStatus,
)

from ...contract.errors import InvalidInput
from ...engine.overrides import AgentOverrides
from ..encryption import EncryptionError
from ..markdown import literal
from ..plugin import DurableAgentPlugin
from ..queues import DEFAULT_TASK_QUEUE
from ..registry import AgentNameTaken, AgentRegistry
from ..signing import ApprovalKeys
from ..storage import StorageConfigError
from ..wire import AgentWorkflowInput, ResumeFrom
from ..workflow import AgentWorkflow
from .errors import AgentRunError, AlreadyStarted, CannotConnect
from .handle import AgentRunHandle
from .listing import ListedRun, _listed, list_query, memo_cost

if TYPE_CHECKING:
    pass


__all__ = ["DEFAULT_TASK_QUEUE", "DEFAULT_TIMEOUT", "AgentClient"]

DEFAULT_TIMEOUT = 10.0
"""Seconds to wait for the server or a worker to answer one call (not for `result()`)."""
SUMMARY_PROMPT_CHARS = 60
INTERNAL_INPUT_FIELDS = frozenset({"agent", "prompt", "continuation", "parent"})
"""`AgentWorkflowInput` fields `start()` does not take as keywords: the first two are its
positional arguments, `continuation` and `parent` are set only by workflows themselves."""


def _summary(agent: str, prompt: str, source: ResumeFrom | None = None) -> str:
    """The Web UI's one-line summary of a run: its agent and the start of its prompt (for
    a fork, where it came from). The UI renders it as Markdown: what users wrote is
    escaped (`literal`), so a prompt cannot put a link or an element on the page."""
    if source is not None:
        return f"agent {literal(agent)}: fork of {literal(source.describe())}"
    line = " ".join(prompt.split())
    if not line:
        return f"agent {literal(agent)}: session"
    if len(line) > SUMMARY_PROMPT_CHARS:
        line = line[: SUMMARY_PROMPT_CHARS - 1].rstrip() + "…"
    return f"agent {literal(agent)}: {literal(line)}"


def _input_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """Refuses a misspelt keyword: pydantic would drop it silently and the run would start
    without, say, its `suspend_at`."""
    allowed = sorted(set(AgentWorkflowInput.model_fields) - INTERNAL_INPUT_FIELDS)
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        raise TypeError(
            f"start() got unknown AgentWorkflowInput field(s) {', '.join(map(repr, unknown))}; "
            f"the fields are: {', '.join(allowed)}"
        )
    return fields


def _check_overrides(client: Client, workflow_input: AgentWorkflowInput) -> None:
    """Refuses a model the agent does not allow when the client knows the agent (connected
    with `DurableAgentPlugin(agents=[...])`, as a worker's own client is); the worker checks
    it too."""
    overrides = workflow_input.overrides
    if overrides is None or overrides.model is None:
        return
    agents = AgentRegistry()
    for plugin in client.config().get("plugins") or ():
        if isinstance(plugin, DurableAgentPlugin):
            for agent in plugin.agents:
                with contextlib.suppress(AgentNameTaken):
                    agents.host(agent)
    if workflow_input.agent in agents:
        agents.agent_for(workflow_input.agent, overrides)


class AgentClient:
    """Agent runs on one Temporal namespace; `client` must use `DurableAgentPlugin`.

    `task_queue` is where `start()` sends runs (the workers' queue); `timeout` bounds each
    query, update and signal, so a run without a worker raises `NoWorker` instead of hanging.
    `approval_keys` sign every approval and denial (see `.signing`); by default they are
    those of the client's `DurableAgentPlugin`, if any.
    """

    def __init__(
        self,
        client: Client,
        *,
        task_queue: str = DEFAULT_TASK_QUEUE,
        timeout: float = DEFAULT_TIMEOUT,
        approval_keys: ApprovalKeys | None = None,
    ) -> None:
        self.client = client
        self.task_queue = task_queue
        self.timeout = timeout
        if approval_keys is None:
            plugins = client.config().get("plugins") or []
            found = [p.approval_keys for p in plugins if isinstance(p, DurableAgentPlugin)]
            approval_keys = next((keys for keys in found if keys is not None), None)
        self.approval_keys = approval_keys

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

    @property
    def namespace(self) -> str:
        return self.client.namespace

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
        if model is not None:
            overrides = AgentOverrides.model_validate(input_fields.get("overrides") or {})
            input_fields["overrides"] = overrides.model_copy(update={"model": model})
        workflow_input = AgentWorkflowInput(
            agent=agent, prompt=prompt, **_input_fields(input_fields)
        )
        if problem := workflow_input.problem():
            raise InvalidInput(problem)
        _check_overrides(self.client, workflow_input)
        workflow_id = workflow_id or f"agent-{agent}-{uuid.uuid4().hex[:8]}"
        try:
            handle = await asyncio.wait_for(
                self.client.start_workflow(
                    AgentWorkflow.run,
                    workflow_input,
                    id=workflow_id,
                    task_queue=task_queue or self.task_queue,
                    static_summary=_summary(agent, prompt, workflow_input.resume_from),
                    priority=Priority(priority_key=workflow_input.priority)
                    if workflow_input.priority is not None
                    else Priority.default,
                ),
                self.timeout,
            )
        except WorkflowAlreadyStartedError:
            raise AlreadyStarted(
                f"a workflow with id {workflow_id!r} is already running", workflow_id=workflow_id
            ) from None
        except TimeoutError:
            raise CannotConnect(
                f"the Temporal server did not accept the start of {workflow_id!r} within "
                f"{self.timeout:g}s"
            ) from None
        except RPCError as error:
            if error.status == RPCStatusCode.UNAVAILABLE:
                raise CannotConnect(
                    f"lost the connection to the Temporal server: {error}"
                ) from None
            raise AgentRunError(
                f"cannot start the run: {error.message}", workflow_id=workflow_id
            ) from None
        return AgentRunHandle(self, handle, task_queue=task_queue or self.task_queue)

    def get(self, workflow_id: str, run_id: str | None = None) -> AgentRunHandle:
        """A handle on an existing run; nothing is sent until its first call, which checks
        that the workflow exists and is an agent run. Without `run_id` it follows the
        workflow id's latest run (across continue-as-new)."""
        handle = self.client.get_workflow_handle_for(AgentWorkflow.run, workflow_id, run_id=run_id)
        return AgentRunHandle(self, handle)

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
                yield _listed(execution, await memo_cost(execution))
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


# -- one run --------------------------------------------------------------------------------
