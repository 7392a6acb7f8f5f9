"""What runs and their model quota's keeper tell each other (signals, the keeper's input)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from durable_agent.engine.quotas import ModelQuota

__all__ = [
    "GRANT_SIGNAL",
    "KEEPER_WORKFLOW",
    "QUOTA_MEMO",
    "AskKeeper",
    "GrantNotice",
    "KeeperInput",
    "KeeperView",
    "Lease",
    "QuotaAsk",
    "QuotaGrant",
    "QuotaPause",
    "QuotaRelease",
    "QuotaSent",
    "QuotaTicket",
    "QuotaWaitView",
    "ReleaseToKeeper",
    "TellGrants",
    "keeper_id",
]

KEEPER_WORKFLOW = "DurableAgentQuotaKeeper"
GRANT_SIGNAL = "quota_granted"
"""The signal a run hears its grant on."""


def keeper_id(task_queue: str, key: str) -> str:
    """One keeper per key and task queue (a namespace holds one workflow per id)."""
    return f"durable-agent-quota/{task_queue}/{key}"


class QuotaAsk(BaseModel):
    """A run asking to send one model request."""

    ask_id: str
    requester: str
    """The asking run's workflow id, which the grant is signalled to."""
    tokens: int
    """The request's estimated tokens (input plus output)."""
    priority: int = 1
    """Lower goes first: 0 for a session's turn (a person waits), 1 for other runs; a run's
    own priority (`AgentClient.start(priority=...)`) when it has one."""
    lease_seconds: float = 600.0
    """How long the grant counts against concurrency if its run never releases it."""
    quota: ModelQuota | None = None
    """The asking worker's quota for the key (runs that ask with signal-with-start carry it:
    the keeper they start, or find, learns it from the ask itself)."""


class QuotaGrant(BaseModel):
    ask_id: str
    key: str
    not_before: datetime | None = None
    """A slot granted ahead of its opening: the request waits in its activity until then
    rather than for another round of signals once the slot is free (None: go now)."""


class QuotaSent(BaseModel):
    """The model request of grant `ask_id` goes to the provider (each attempt: a retry
    after a worker crash is a request of its own): the keeper counts it from `at`."""

    ask_id: str
    at: datetime | None = None
    """When the activity sent it, on its worker's clock (None, as 0.4.0's activities tell
    it: when the keeper hears of it). Keepers that do not know the field ignore it."""


class QuotaTicket(BaseModel):
    """What a `model_request` activity needs to tell the key's keeper it sends: which
    keeper and which grant."""

    keeper: str
    ask_id: str
    not_before: datetime | None = None
    """The grant's `not_before`: the activity sends no earlier."""


class AskKeeper(BaseModel):
    """A run's ask, sent by a local activity with signal-with-start (the keeper starts if
    it does not run yet)."""

    task_queue: str
    key: str
    ask: QuotaAsk


class ReleaseToKeeper(BaseModel):
    keeper: str
    release: QuotaRelease


class GrantNotice(BaseModel):
    requester: str
    grant: QuotaGrant


class TellGrants(BaseModel):
    """The grants a keeper made in one workflow task, signalled by one local activity."""

    grants: list[GrantNotice]


class QuotaRelease(BaseModel):
    """The request ended; `tokens` is what the provider reported (None: unknown)."""

    ask_id: str
    tokens: int | None = None


class QuotaPause(BaseModel):
    """A provider answered 429: no grant for anyone before `until`."""

    until: datetime
    reason: str = ""


class Lease(BaseModel):
    ask_id: str
    requester: str
    granted_at: float
    tokens: int
    expires_at: float


class KeeperInput(BaseModel):
    key: str
    quota: ModelQuota
    queue: list[QuotaAsk] = Field(default_factory=list)
    leases: list[Lease] = Field(default_factory=list)
    grants: list[tuple[float, int, bool]] = Field(default_factory=list)
    """The window's grants: when (granted, or ended), tokens, whether still in flight."""
    paused_until: float = 0.0


class KeeperView(BaseModel):
    """The keeper's `state` query."""

    key: str
    quota: ModelQuota
    waiting: int
    in_flight: int
    granted_last_minute: int
    tokens_last_minute: int
    paused_until: datetime | None = None


QUOTA_MEMO = "quota_wait"
"""The memo key of a run's current quota wait (a `QuotaWaitView` as JSON, removed once
granted): `durable-agent list` shows it from the visibility store, without a worker."""


class QuotaWaitView(BaseModel):
    """A run's `quota_wait` (its `status` query): the key it waits for, since when."""

    key: str
    since: datetime
    paused_until: datetime | None = None
