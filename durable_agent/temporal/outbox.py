"""Signals a workflow sends other workflows without waiting for them to arrive.

Sending one is a command; awaiting it would hold up the sender's own work for a round trip.
Each send is a task kept until it ends (asyncio keeps only weak references to tasks), its
failure logged rather than left unobserved (the target has ended: nothing waits for the
signal any more) and handed to `on_failure` when the sender must undo something. An
`ordered` outbox sends each signal only after the one before it, for reports whose order
matters.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from temporalio import workflow

__all__ = ["DRAIN_PATCH", "Outbox", "all_sent"]

DRAIN_PATCH = "durable-agent.signals-sent-before-the-end"
"""Marks a run that waited for its outgoing signals before it ended (`all_sent`)."""


class Outbox:
    def __init__(self, *, ordered: bool = False) -> None:
        self._ordered = ordered
        self._pending: dict[asyncio.Task[None], None] = {}
        """Signals in flight (a dict as a set: empty, 64 bytes of a cached run, not 216)."""
        self._last: asyncio.Task[None] | None = None

    def send(
        self,
        workflow_id: str,
        signal: str,
        arg: object,
        *,
        on_failure: Callable[[Exception], None] | None = None,
    ) -> None:
        previous = self._last if self._ordered else None

        async def deliver() -> None:
            if previous is not None:
                await previous
            try:
                await workflow.get_external_workflow_handle(workflow_id).signal(signal, arg)
            except Exception as error:
                workflow.logger.warning(
                    "%s signal to %s not delivered: %s", signal, workflow_id, error
                )
                if on_failure is not None:
                    on_failure(error)

        task = asyncio.create_task(deliver())
        self._pending[task] = None
        task.add_done_callback(self._sent)
        self._last = task

    def _sent(self, task: asyncio.Task[None]) -> None:
        del self._pending[task]

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    async def drained(self) -> None:
        """Returns once every signal sent so far was delivered or given up."""
        if self._pending:
            await asyncio.gather(*self._pending)


async def all_sent(*outboxes: Outbox) -> None:
    """Before a run ends (completes, fails or continues as new), the signals it sent other
    workflows go out: sent in its last workflow task (a model quota's grant released as the
    run's last request answered), they would be dropped with it, and the grant held until
    its lease expired. Runs recorded before ended without waiting (a patch marks the ones
    that wait, only when something is pending)."""
    if any(outbox.pending for outbox in outboxes) and workflow.patched(DRAIN_PATCH):
        await asyncio.gather(*(outbox.drained() for outbox in outboxes))
