"""The test environment's client and handles: a run's `result()` fails as soon as the
worker fails one of its workflow tasks, and decisions go as signals on a server without
updates.

A workflow task that raises (a bug in workflow code, a non-deterministic change) is
retried by Temporal until the code is fixed, so a test awaiting the run's result would
hang until its timeout, with the reason only in a log. In the test environment the
worker's failure is the run's: `result()` raises `WorkerError` with the worker's
traceback, for the run and for its sub-agents (whose workflow ids start with the run's).

`AgentRunHandle` sends approvals, deferred results, resumes and steering as updates (the
run validates them and answers). Temporal's time-skipping test server has supported
updates only in recent releases; on one without them, the environment's handles send the
equivalent signal instead (the workflow declares one per update, and both go through one
gate). Production clients never take either path: only the test environment's own
`AgentClient` makes these handles.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pydantic import BaseModel

from ..temporal.client import AgentClient, AgentRunHandle
from ..temporal.run_errors import Rejected
from ..temporal.wire import AgentWorkflowResult, UpdateAccepted
from ..temporal.workflow import AgentWorkflow

__all__ = [
    "SIGNAL_FOR_UPDATE",
    "TestAgentClient",
    "TestRunHandle",
    "WorkerError",
    "WorkerErrors",
]

SIGNAL_FOR_UPDATE: dict[str, Any] = {
    "submit_approval": AgentWorkflow.approval,
    "submit_deferred_result": AgentWorkflow.deferred_result,
    "resume_run": AgentWorkflow.resume,
    "steer_run": AgentWorkflow.steer,
}
"""The signal the workflow declares for each update a handle sends (by the update's name)."""

WORKFLOW_TASK_FAILURE = "Failed activation on workflow"
"""How temporalio's log record of a workflow task that raised begins (the record carries
the run's `temporal_workflow` details; `tests/test_testing_env.py` pins both)."""


class WorkerError(AssertionError):
    """The test environment's worker failed a workflow task of `workflow_id` (the message
    holds the worker's traceback): the run cannot go on until the code is fixed."""

    def __init__(self, workflow_id: str, detail: str) -> None:
        super().__init__(f"the worker failed a workflow task of {workflow_id!r}:\n{detail}")
        self.workflow_id = workflow_id
        self.detail = detail


class WorkerErrors(logging.Handler):
    """Collects the workflow task failures temporalio logs while the environment runs
    (workflow tasks run on the worker's threads: waiters are woken on `loop`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(logging.WARNING)
        self.errors: list[WorkerError] = []
        self._loop = loop
        self._changed = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        details = getattr(record, "temporal_workflow", None)
        if not isinstance(details, dict) or not record.getMessage().startswith(
            WORKFLOW_TASK_FAILURE
        ):
            return
        workflow_id = str(details.get("workflow_id", "?"))
        detail = logging.Formatter().formatException(record.exc_info) if record.exc_info else ""
        self.errors.append(WorkerError(workflow_id, detail or record.getMessage()))
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._changed.set)

    def of(self, workflow_id: str) -> WorkerError | None:
        """The first failure of the run `workflow_id` or of one of its sub-agents."""
        for error in self.errors:
            if error.workflow_id == workflow_id or error.workflow_id.startswith(f"{workflow_id}--"):
                return error
        return None

    async def first_of(self, workflow_id: str) -> WorkerError:
        while True:
            found = self.of(workflow_id)
            if found is not None:
                return found
            self._changed.clear()
            await self._changed.wait()


class TestRunHandle(AgentRunHandle):
    """An `AgentRunHandle` of the test environment (see the module's docstring)."""

    __test__ = False  # not a pytest test class

    def __init__(self, agents: TestAgentClient, *args: Any, **kwargs: Any) -> None:
        super().__init__(agents, *args, **kwargs)
        self._errors = agents.worker_errors
        self._signals = not agents.updates

    async def result(self) -> AgentWorkflowResult:
        """`AgentRunHandle.result()`, or `WorkerError` once the worker failed a workflow
        task of this run or of one of its sub-agents."""
        failed = self._errors.of(self.id)
        if failed is not None:
            raise failed
        waiting = asyncio.ensure_future(super().result())
        watching = asyncio.ensure_future(self._errors.first_of(self.id))
        try:
            await asyncio.wait({waiting, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waiting, watching):
                if not task.done():
                    task.cancel()
        if waiting.done() and not waiting.cancelled():
            return waiting.result()
        raise watching.result()

    async def send_prompt(self, prompt: str) -> AgentWorkflowResult:
        if self._signals:
            raise self._needs_updates("prompt")
        return await super().send_prompt(prompt)

    def _needs_updates(self, action: str) -> Rejected:
        return Rejected(
            self.id,
            f"the {action} needs a workflow update, which this test server does not "
            "support; use AgentTestEnvironment(time_skipping=False)",
            "updates_unsupported",
        )

    async def _update(self, action: str, update: Any, request: BaseModel) -> UpdateAccepted:
        if not self._signals:
            return await super()._update(action, update, request)
        name = getattr(update, "__name__", str(update))
        signal = SIGNAL_FOR_UPDATE.get(name)
        if signal is None:
            raise self._needs_updates(action)
        await self._act(action, lambda: self.handle.signal(signal, request))
        return UpdateAccepted(message=f"{action} sent as a signal", status="unknown")


class TestAgentClient(AgentClient):
    """The test environment's `AgentClient`: its handles are `TestRunHandle`s. `updates`
    says whether the server takes workflow updates (else decisions go as signals)."""

    __test__ = False  # not a pytest test class

    def __init__(
        self, *args: Any, worker_errors: WorkerErrors, updates: bool = True, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.worker_errors = worker_errors
        self.updates = updates

    async def start(self, agent: str, prompt: str, **kwargs: Any) -> AgentRunHandle:
        started = await super().start(agent, prompt, **kwargs)
        return TestRunHandle(self, started.handle, task_queue=started._task_queue)

    def get(self, workflow_id: str, run_id: str | None = None) -> AgentRunHandle:
        return TestRunHandle(self, self.run_handle(workflow_id, run_id))
