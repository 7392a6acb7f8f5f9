"""The one seam between the workflow's components and Temporal's workflow API.

Components (sessions, decisions, visibility, the stream, continuation) are plain classes:
they read time, wait, publish search attributes and log through a `WorkflowPort`, so they
can be driven by a test's port without a server. `TemporalPort` is the real one; every
call it makes is replay-safe (`workflow.now()`, `wait_condition`, search attributes are
commands recorded in history, details are not).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate

__all__ = ["RunIdentity", "TemporalPort", "WorkflowPort"]


@dataclass(frozen=True, slots=True)
class RunIdentity:
    """Which workflow run this is: the fields of `workflow.info()` components read."""

    workflow_id: str
    run_id: str
    task_queue: str
    continued_run_id: str | None = None


class WorkflowPort(Protocol):
    """What the workflow's components may ask of the engine."""

    @property
    def logger(self) -> logging.LoggerAdapter[Any] | logging.Logger: ...

    def now(self) -> datetime: ...

    def identity(self) -> RunIdentity: ...

    def continue_as_new_suggested(self) -> bool: ...

    def is_replaying(self) -> bool: ...

    def patched(self, marker: str) -> bool: ...

    def cancel_requested(self) -> bool:
        """Whether someone asked the server to cancel this run."""
        ...

    def wait(
        self, condition: Callable[[], bool], timeout: timedelta | None = None
    ) -> Awaitable[None]:
        """Returns once `condition()` holds; raises TimeoutError after `timeout`."""
        ...

    def upsert(self, updates: Sequence[SearchAttributeUpdate[Any]]) -> None: ...

    def soon(self, callback: Callable[[], None]) -> None:
        """Calls `callback` once what the workflow is doing now has yielded, within the same
        workflow task (before its commands go to the server)."""
        ...

    def set_details(self, details: str) -> None: ...


class TemporalPort:
    """`WorkflowPort` inside a running workflow."""

    @property
    def logger(self) -> logging.LoggerAdapter[Any]:
        return workflow.logger

    def now(self) -> datetime:
        return workflow.now()

    def identity(self) -> RunIdentity:
        info = workflow.info()
        return RunIdentity(
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            task_queue=info.task_queue,
            continued_run_id=info.continued_run_id,
        )

    def continue_as_new_suggested(self) -> bool:
        return workflow.info().is_continue_as_new_suggested()

    def is_replaying(self) -> bool:
        return workflow.unsafe.is_replaying_history_events()

    def patched(self, marker: str) -> bool:
        return workflow.patched(marker)

    def cancel_requested(self) -> bool:
        return workflow.cancellation_reason() is not None

    def wait(
        self, condition: Callable[[], bool], timeout: timedelta | None = None
    ) -> Awaitable[None]:
        # The SDK's coroutine itself, not one of ours around it: a run waiting for days
        # holds every coroutine of its waiting chain.
        return workflow.wait_condition(condition, timeout=timeout)

    def upsert(self, updates: Sequence[SearchAttributeUpdate[Any]]) -> None:
        workflow.upsert_search_attributes(updates)

    def soon(self, callback: Callable[[], None]) -> None:
        # The workflow's own event loop: its ready callbacks run in order, deterministically,
        # and all of them before the activation completes.
        asyncio.get_running_loop().call_soon(callback)

    def set_details(self, details: str) -> None:
        workflow.set_current_details(details)
