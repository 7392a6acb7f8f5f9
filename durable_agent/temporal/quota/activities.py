"""The activity side of quotas: asking a key's keeper (and starting it), telling runs their
grants and the keeper their releases, waiting for a slot granted ahead, and pausing a key on
a 429.

Runs and keepers tell each other through local activities rather than workflow signal
commands: a signal command is confirmed by a workflow task of the sender's own, and on a busy
server those confirmations, not the keeper's arithmetic, set how fast a window's grants go
out.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import structlog
from pydantic import BaseModel
from temporalio import activity
from temporalio.client import Client
from temporalio.common import Priority
from temporalio.service import RPCError, RPCStatusCode

from durable_agent.contract.errors import ModelHTTPError
from durable_agent.engine.quotas import ModelQuota

from .wire import (
    GRANT_SIGNAL,
    KEEPER_WORKFLOW,
    AskKeeper,
    KeeperInput,
    QuotaPause,
    QuotaSent,
    QuotaTicket,
    ReleaseToKeeper,
    TellGrants,
    keeper_id,
)

__all__ = [
    "QUOTA_ACTIVITIES",
    "EnsureKeeper",
    "ask_quota_keeper",
    "ensure_quota_keeper",
    "pause_key",
    "release_to_quota_keeper",
    "tell_quota_grants",
    "tell_sent",
    "wait_for_slot",
]

KEEPER_PRIORITY = Priority(priority_key=1)
"""A keeper's workflow tasks go before the runs' when a queue is backlogged: every run of the
key waits on them."""

log = structlog.get_logger("durable_agent.quota")


class EnsureKeeper(BaseModel):
    task_queue: str
    key: str
    quota: ModelQuota


@activity.defn(name="ensure_quota_keeper")
async def ensure_quota_keeper(input: EnsureKeeper) -> None:
    """Starts the key's keeper unless it runs, and gives it this worker's quota (signal
    with start: one call whichever it is). A run asks once per key."""
    await _signal_with_start(input.task_queue, input.key, input.quota, "configure", input.quota)


async def _signal_with_start(
    task_queue: str,
    key: str,
    quota: ModelQuota,
    signal: str,
    arg: object,
    priority: Priority = Priority.default,
) -> None:
    """Signals the key's keeper, starting it with `quota` if it does not run."""
    await activity.client().start_workflow(
        KEEPER_WORKFLOW,
        KeeperInput(key=key, quota=quota),
        id=keeper_id(task_queue, key),
        task_queue=task_queue,
        start_signal=signal,
        start_signal_args=[arg],
        static_summary=f"model quota {key}",
        priority=priority,
    )


@activity.defn(name="ask_quota_keeper")
async def ask_quota_keeper(input: AskKeeper) -> None:
    """One run's ask, and the keeper started with the asker's quota if it does not run
    (signal with start: one call whichever it is)."""
    quota = input.ask.quota
    assert quota is not None, "a run asks with its quota"
    await _signal_with_start(
        input.task_queue, input.key, quota, "ask", input.ask, priority=KEEPER_PRIORITY
    )


@activity.defn(name="release_to_quota_keeper")
async def release_to_quota_keeper(input: ReleaseToKeeper) -> None:
    await activity.client().get_workflow_handle(input.keeper).signal("release", input.release)


@activity.defn(name="tell_quota_grants")
async def tell_quota_grants(input: TellGrants) -> list[str]:
    """Signals each grant to its run, all at once; the ask ids whose run has ended (the
    keeper frees those grants again). Any other failure fails the activity, which retries:
    a run told twice keeps the first."""
    client = activity.client()

    async def tell(requester: str, signal: object) -> bool:
        try:
            await client.get_workflow_handle(requester).signal(GRANT_SIGNAL, signal)
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return True

    told = await asyncio.gather(*(tell(n.requester, n.grant) for n in input.grants))
    return [n.grant.ask_id for n, ok in zip(input.grants, told, strict=True) if not ok]


QUOTA_ACTIVITIES = (
    ensure_quota_keeper,
    ask_quota_keeper,
    release_to_quota_keeper,
    tell_quota_grants,
)
"""What a worker with a quota registers beside the agents' activities."""


async def wait_for_slot(ticket: QuotaTicket) -> None:
    """A slot granted ahead: the request leaves when it opens (on this worker's clock; the
    keeper's margin covers the skew)."""
    if ticket.not_before is not None:
        delay = (ticket.not_before - datetime.now(UTC)).total_seconds()
        if delay > 0:
            await asyncio.sleep(delay)


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
