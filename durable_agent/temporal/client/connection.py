"""`Connection`: one Temporal namespace, as agent runs are started and called on it.

What a handle needs of the client it came from: the connected Temporal client, the timeout
of each call, the approval keys decisions are signed with, and starting a run (a fork, a
retry). `AgentClient` is a `Connection` that hands out `AgentRunHandle`s; a handle holds
its client as a `Connection`, so `handle` needs nothing of `agent_client`, which needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import Priority
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from ...contract.errors import InvalidInput
from ...engine.controller import size_problem
from ...engine.overrides import AgentOverrides
from ..markdown import literal
from ..plugin import DurableAgentPlugin
from ..queues import DEFAULT_TASK_QUEUE
from ..registry import AgentNameTaken, AgentRegistry
from ..run_errors import AgentRunError, AlreadyStarted, CannotConnect
from ..signing import ApprovalKeys
from ..wire import AgentWorkflowInput, AgentWorkflowResult, ResumeFrom
from ..workflow import AgentWorkflow

__all__ = ["DEFAULT_TIMEOUT", "Connection", "RunHandle"]

DEFAULT_TIMEOUT = 10.0
"""Seconds to wait for the server or a worker to answer one call (not for `result()`)."""
SUMMARY_PROMPT_CHARS = 60
INTERNAL_INPUT_FIELDS = frozenset({"agent", "prompt", "continuation", "parent"})
"""`AgentWorkflowInput` fields `start()` does not take as keywords: the first two are its
positional arguments, `continuation` and `parent` are set only by workflows themselves."""

RunHandle = WorkflowHandle[AgentWorkflow, AgentWorkflowResult]
"""Temporal's handle on one agent run, which an `AgentRunHandle` wraps."""


class Connection:
    """An `AgentClient` as its handles see it: its arguments are `AgentClient`'s."""

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

    @property
    def namespace(self) -> str:
        return self.client.namespace

    def run_handle(self, workflow_id: str, run_id: str | None = None) -> RunHandle:
        """Temporal's handle on a run (without `run_id`: the workflow id's latest run)."""
        return self.client.get_workflow_handle_for(AgentWorkflow.run, workflow_id, run_id=run_id)

    async def start_run(
        self,
        agent: str,
        prompt: str,
        *,
        workflow_id: str | None = None,
        task_queue: str | None = None,
        model: str | None = None,
        **input_fields: Any,
    ) -> tuple[RunHandle, str]:
        """`AgentClient.start`, answering Temporal's handle on the run and its task queue."""
        if model is not None:
            overrides = AgentOverrides.model_validate(input_fields.get("overrides") or {})
            input_fields["overrides"] = overrides.model_copy(update={"model": model})
        workflow_input = AgentWorkflowInput(
            agent=agent, prompt=prompt, **_input_fields(input_fields)
        )
        if problem := workflow_input.problem() or size_problem(prompt, "prompt"):
            raise InvalidInput(problem)  # a prompt over the payload limit cannot even start
        _check_overrides(self.client, workflow_input)
        workflow_id = workflow_id or f"agent-{agent}-{uuid.uuid4().hex[:8]}"
        queue = task_queue or self.task_queue
        try:
            handle = await asyncio.wait_for(
                self.client.start_workflow(
                    AgentWorkflow.run,
                    workflow_input,
                    id=workflow_id,
                    task_queue=queue,
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
        return handle, queue


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
