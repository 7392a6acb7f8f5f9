"""How a streaming `model_request` activity gets its deltas to the workflow.

The workflow numbers every record of a run, so deltas cannot go onto the Workflow Stream
from the activity directly: they travel to the workflow as `model_deltas` signals, and the
workflow publishes them as `model_delta` records in the loop's numbering. Each signal costs
history, so deltas are batched: the first one goes at once (a UI shows the model starting
to write without waiting), later ones are collected for `interval` after each send. The
publisher is flushed before the activity returns, so every delta lands in history before
the activity's completion, and the `model_response` record follows them.

Batches are numbered per attempt and re-sent with the same number after a failed send, so
a signal the server took twice is dropped by the workflow, never published twice.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from typing import Any

import structlog
from temporalio.client import WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from durable_agent.models.base import ModelDelta

from .wire import ModelDeltaBatch

__all__ = ["DELTAS_SIGNAL", "DeltaPublisher"]

DELTAS_SIGNAL = "model_deltas"
SEND_RETRY_DELAYS = (0.1, 0.5, 1.0)
"""Waits before re-sending a batch the server did not take; after the last, the batch is
given up (its text still arrives whole in the `model_response` record)."""
GONE = frozenset({RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION})
"""The run has closed (or was reset): nobody will publish these deltas."""

log = structlog.get_logger("durable_agent.deltas")


class DeltaPublisher:
    """Collects one attempt's deltas and signals them to `handle`'s run in batches.

    Use as an async context manager around the model request; `add` is the delta sink.
    """

    def __init__(
        self, handle: WorkflowHandle[Any, Any], *, run_step: int, attempt: int, interval: float
    ) -> None:
        self.handle = handle
        self.run_step = run_step
        self.attempt = attempt
        self.interval = interval
        self.sent = 0
        """Batches the server took."""
        self._buffer: list[ModelDelta] = []
        self._pending: ModelDeltaBatch | None = None
        self._next = 0
        self._ready = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._gone = False

    def add(self, delta: ModelDelta) -> None:
        if not self._gone:
            self._buffer.append(delta)
            self._ready.set()

    async def __aenter__(self) -> DeltaPublisher:
        self._task = asyncio.create_task(self._flusher())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if exc is None:
            # What the model wrote since the last send lands before the response does.
            await self.flush()

    async def flush(self) -> None:
        """Sends everything collected so far (a batch left by a failed send first)."""
        while self._pending is not None or self._buffer:
            await self._send_next()

    async def _flusher(self) -> None:
        """One batch per wake-up, then a pause: deltas that arrive while a batch is being
        sent wait for the next one instead of going out in a batch of their own."""
        while True:
            await self._ready.wait()
            self._ready.clear()
            await self._send_next()
            await asyncio.sleep(self.interval)

    async def _send_next(self) -> None:
        async with self._lock:
            if self._pending is None:
                if not self._buffer:
                    return
                deltas, self._buffer = _joined(self._buffer), []
                self._pending = ModelDeltaBatch(
                    run_step=self.run_step, attempt=self.attempt, batch=self._next, deltas=deltas
                )
                self._next += 1
            batch = self._pending
            if not self._gone:
                await self._signal(batch)
            self._pending = None

    async def _signal(self, batch: ModelDeltaBatch) -> None:
        for delay in (*SEND_RETRY_DELAYS, None):
            try:
                await self.handle.signal(DELTAS_SIGNAL, batch)
                self.sent += 1
                return
            except RPCError as error:
                if error.status in GONE:
                    self._gone = True
                    self._buffer.clear()
                    return
                if delay is None:
                    log.warning(
                        "model deltas not delivered; the response will carry the text",
                        batch=batch.batch,
                        error=error.message,
                    )
                    return
                await asyncio.sleep(delay)


def _joined(deltas: list[ModelDelta]) -> list[ModelDelta]:
    """Consecutive deltas of one kind as one: a smaller signal for the same text."""
    out: list[ModelDelta] = []
    for delta in deltas:
        if out and out[-1].kind == delta.kind:
            out[-1] = ModelDelta(kind=delta.kind, text=out[-1].text + delta.text)
        else:
            out.append(delta)
    return out
