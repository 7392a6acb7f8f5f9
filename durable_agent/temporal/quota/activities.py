"""The activity side of quotas: starting a key's keeper, and pausing a key on a 429."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import structlog
from pydantic import BaseModel
from temporalio import activity
from temporalio.client import Client

from durable_agent.contract.errors import ModelHTTPError
from durable_agent.engine.quotas import ModelQuota

from .wire import KEEPER_WORKFLOW, KeeperInput, QuotaPause, QuotaSent, QuotaTicket, keeper_id

__all__ = ["EnsureKeeper", "ensure_quota_keeper", "pause_key", "tell_sent"]

log = structlog.get_logger("durable_agent.quota")


class EnsureKeeper(BaseModel):
    task_queue: str
    key: str
    quota: ModelQuota


@activity.defn(name="ensure_quota_keeper")
async def ensure_quota_keeper(input: EnsureKeeper) -> None:
    """Starts the key's keeper unless it runs, and gives it this worker's quota (signal
    with start: one call whichever it is). A run asks once per key."""
    await activity.client().start_workflow(
        KEEPER_WORKFLOW,
        KeeperInput(key=input.key, quota=input.quota),
        id=keeper_id(input.task_queue, input.key),
        task_queue=input.task_queue,
        start_signal="configure",
        start_signal_args=[input.quota],
        static_summary=f"model quota {input.key}",
    )


async def tell_sent(client: Client, ticket: QuotaTicket) -> None:
    """Tells the keeper the granted request goes out now, stamped with this worker's clock
    (best effort: a keeper that does not hear it counts the request from its grant)."""
    try:
        await client.get_workflow_handle(ticket.keeper).signal(
            "sent", QuotaSent(ask_id=ticket.ask_id, at=datetime.now(UTC))
        )
    except Exception as failure:
        log.warning("could not tell the quota keeper", keeper=ticket.keeper, error=str(failure))


async def pause_key(client: Client, task_queue: str, key: str, error: ModelHTTPError) -> None:
    """A provider refused a request (429): every run of the key waits out its Retry-After
    (or a short default), not only the one that was told."""
    seconds = error.retry_after if error.retry_after is not None else 5.0
    until = datetime.now(UTC) + timedelta(seconds=seconds)
    log.warning("model quota paused by a 429", key=key, seconds=seconds)
    try:
        await client.get_workflow_handle(keeper_id(task_queue, key)).signal(
            "pause", QuotaPause(until=until, reason=str(error)[:200])
        )
    except Exception as failure:  # the refusal itself is what the activity reports
        log.warning("could not pause the quota", key=key, error=str(failure))
