"""`RunCalls`: how one run's calls to the server are made and how they fail.

A handle's methods say what to ask the run; this module says what becomes of the asking:
a call the server refuses as busy is retried (boundedly), and every other failure, from
the SDK or the server, becomes the one `AgentRunError` whose message names the run and the
way out. Kept apart from `handle` so the mapping is read (and changed) in one place,
whichever method made the call."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio.client import (
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from ..run_errors import AgentRunError, CannotConnect, NoWorker, Rejected, RunClosed, RunNotFound
from ..storage import STORAGE_ENV
from .listing import execution_status

__all__ = ["BUSY_RETRY_DELAYS", "UPDATE_ACTIONS", "RunCalls", "failure_text"]

BUSY_RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0)
"""Waits before each retry of a call the server refused with RESOURCE_EXHAUSTED (e.g. more
than ~10 updates in flight on one workflow): bounded, so a stuck workflow still ends the
call. The SDK has already retried a few times itself before it gives us the refusal."""
UPDATE_ACTIONS = frozenset({"approval", "deferred result", "resume", "steering message", "prompt"})
"""The actions sent as workflow updates (named so in messages)."""

T = TypeVar("T")
log = logging.getLogger("durable_agent.client")


def failure_text(error: WorkflowFailureError) -> str:
    """How a failed run ended, as `type: message` (or the cause's kind)."""
    cause = error.cause
    if isinstance(cause, ApplicationError) and cause.type:
        return f"{cause.type}: {cause.message}"
    kind = type(cause).__name__.removesuffix("Error").lower()
    return f"{kind}: {cause}" if str(cause) else kind


class RunCalls:
    """One run's calls: each given `timeout` seconds, retried while the server is busy,
    their failures told as `AgentRunError`s. `namespace` is named when the run is not found,
    `task_queue` (once known) when no worker answers."""

    def __init__(
        self,
        handle: WorkflowHandle[Any, Any],
        *,
        timeout: float,
        namespace: str,
        task_queue: str | None = None,
    ) -> None:
        self.handle = handle
        self.timeout = timeout
        self.namespace = namespace
        self.task_queue = task_queue

    @property
    def id(self) -> str:
        return self.handle.id

    async def call(self, action: str, operation: Callable[[], Awaitable[T]]) -> T:
        """Runs one call (made afresh for each attempt), mapping failures to AgentRunErrors."""
        for attempt, delay in enumerate((*BUSY_RETRY_DELAYS, None)):
            try:
                return await asyncio.wait_for(operation(), self.timeout)
            except WorkflowUpdateFailedError as error:
                cause = error.cause
                if isinstance(cause, ApplicationError):
                    raise Rejected(
                        self.id, cause.message, cause.type, details=cause.details
                    ) from None
                raise Rejected(self.id, str(cause), None) from None
            except WorkflowQueryFailedError as error:
                raise AgentRunError(
                    f"{action} failed: {error.message}", workflow_id=self.id
                ) from None
            except RuntimeError as error:
                raise self.without_storage(action, error) from None
            except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
                raise self.no_worker(action) from None
            except RPCError as error:
                if error.status != RPCStatusCode.RESOURCE_EXHAUSTED:
                    raise await self.explain(action, error) from None
                if delay is None:
                    raise self.no_worker(action, refusal=error.message) from None
                log.warning(
                    "the server refused the %s for %r (%s); retry %d of %d in %gs",
                    action,
                    self.id,
                    error.message,
                    attempt + 1,
                    len(BUSY_RETRY_DELAYS),
                    delay,
                )
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def without_storage(self, action: str, error: RuntimeError) -> Exception:
        """What to tell a person whose client cannot read the run's external payloads
        (the SDK's TMPRL1105); any other RuntimeError as it is."""
        if "TMPRL1105" not in str(error):
            return error
        return AgentRunError(
            f"{action} failed: run {self.id!r} keeps large payloads in external storage, and "
            f"this client has none: set {STORAGE_ENV} as the worker has it (the embedded dev "
            "stack uses file://<its folder>/.temporal/payloads)",
            workflow_id=self.id,
        )

    async def explain(self, action: str, error: RPCError) -> AgentRunError:
        """The error a person needs for a call the server refused."""
        if error.status == RPCStatusCode.NOT_FOUND and "namespace" in error.message.lower():
            return AgentRunError(
                f"{error.message} Set TEMPORAL_NAMESPACE (--namespace) to an existing one.",
                workflow_id=self.id,
            )
        if error.status == RPCStatusCode.NOT_FOUND:
            return await self._not_found(action)
        if error.status == RPCStatusCode.UNAVAILABLE:
            return CannotConnect(
                f"lost the connection to the Temporal server: {error}", workflow_id=self.id
            )
        if error.status in (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED):
            return self.no_worker(action)
        return AgentRunError(f"{action} failed: {error.message}", workflow_id=self.id)

    async def _not_found(self, action: str) -> AgentRunError:
        """Updates and signals to a closed workflow fail with NOT_FOUND too: tell them apart."""
        missing = RunNotFound(
            f"no workflow with id {self.id!r} in namespace {self.namespace!r}",
            workflow_id=self.id,
        )
        if action == "describe":
            return missing
        try:
            description = await asyncio.wait_for(self.handle.describe(), self.timeout)
        except (RPCError, TimeoutError):
            return missing
        return RunClosed(self.id, execution_status(description.status), action)

    def no_worker(self, action: str, refusal: str | None = None) -> NoWorker:
        queue = f"task queue {self.task_queue!r}" if self.task_queue else "its task queue"
        if refusal is not None:
            why = (
                f"the server kept refusing the {action} for {self.id!r} ({refusal}): earlier "
                "updates are still waiting for a worker"
            )
        else:
            why = f"no worker answered the {action} for {self.id!r} within {self.timeout:g}s"
            if action in UPDATE_ACTIONS:
                why += " (the update may still be applied once a worker picks it up)"
        return NoWorker(
            f"{why}; is a worker running on {queue}? Start one with `durable-agent worker` "
            "or `python worker.py`.",
            workflow_id=self.id,
        )
