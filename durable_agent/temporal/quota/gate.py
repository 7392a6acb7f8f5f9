"""A run's side of its model quota: ask the key's keeper, wait for the grant, release.

The wait is `workflow.wait_condition` on a signal: durable, and no worker slot is held
while a run waits its turn. A run asks and releases with a local activity each
(`ask_quota_keeper` starts the keeper if it does not run, and carries the worker's quota);
runs recorded before `ASK_DIRECT_PATCH` started the keeper with one local activity per key
(`ensure_quota_keeper`) and sent signal commands.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from durable_agent.engine.quotas import ModelQuota

    from ..outbox import Outbox
    from ..wire import AgentWorkflowInput
    from .activities import EnsureKeeper
    from .wire import (
        QUOTA_MEMO,
        AskKeeper,
        QuotaAsk,
        QuotaGrant,
        QuotaRelease,
        QuotaWaitView,
        ReleaseToKeeper,
        keeper_id,
    )

__all__ = ["ASK_DIRECT_PATCH", "QUOTA_MEMO_PATCH", "QUOTA_PATCH", "QuotaGate", "quota_priority"]

QUOTA_PATCH = "durable-agent-model-quotas"
"""Runs recorded before quotas send no quota signals when replayed."""
QUOTA_MEMO_PATCH = "durable-agent-quota-wait-memo"
"""Runs recorded before the memo write none when replayed."""
ASK_DIRECT_PATCH = "durable-agent.quota-asked-directly"
"""Marks a run that asks and releases with local activities (`ask_quota_keeper`,
`release_to_quota_keeper`); runs recorded before send signal commands."""
TELL_TIMEOUT = timedelta(seconds=30)


def quota_priority(input: AgentWorkflowInput) -> int:
    """Where a run's requests queue for a quota, lower first: its own priority (1 to 5,
    default 3, as Temporal's task priorities) and, at each, a session's turns (a person
    waits) before runs started without `session`."""
    return (input.priority or DEFAULT_PRIORITY) * 2 + (0 if input.session else 1)


DEFAULT_PRIORITY = 3


class QuotaGate:
    def __init__(self, publish: Callable[[], None], priority: Callable[[], int]) -> None:
        self._publish = publish
        self._priority = priority
        self._granted: dict[str, QuotaGrant] = {}
        self._ensured: dict[str, None] = {}
        """Keepers ensured, for runs from before `ASK_DIRECT_PATCH` (a dict: an empty
        set is 216 bytes of every cached run)."""
        self._outbox = Outbox()
        self.waiting: QuotaWaitView | None = None
        """What the run waits for now (the `status` query's `quota_wait`)."""

    def on_grant(self, *inputs: Any) -> None:
        """The keeper's `quota_granted` signal."""
        if len(inputs) == 1:
            try:
                grant = QuotaGrant.model_validate(inputs[0])
                self._granted.setdefault(grant.ask_id, grant)
                return
            except ValidationError:
                pass
        workflow.logger.warning("quota_granted signal ignored: malformed input %r", inputs)

    async def acquire(self, key: str, quota: ModelQuota, tokens: int) -> QuotaGrant | None:
        """Waits for the key's grant (the ask id to release, and when the request may
        leave), or None for a run recorded before quotas (it asks nobody)."""
        if not workflow.patched(QUOTA_PATCH):
            return None
        info = workflow.info()
        ask_id = str(workflow.uuid4())
        ask = QuotaAsk(
            ask_id=ask_id, requester=info.workflow_id, tokens=tokens, priority=self._priority()
        )
        if workflow.patched(ASK_DIRECT_PATCH):
            await workflow.execute_local_activity(
                "ask_quota_keeper",
                AskKeeper(
                    task_queue=info.task_queue, key=key, ask=ask.model_copy(update={"quota": quota})
                ),
                start_to_close_timeout=TELL_TIMEOUT,
                summary=f"ask quota {key}",
            )
        else:
            if key not in self._ensured:
                await workflow.execute_local_activity(
                    "ensure_quota_keeper",
                    EnsureKeeper(task_queue=info.task_queue, key=key, quota=quota),
                    start_to_close_timeout=TELL_TIMEOUT,
                )
                self._ensured[key] = None
            self._send(info.task_queue, key, "ask", ask)
        if ask_id not in self._granted:
            self.waiting = QuotaWaitView(key=key, since=workflow.now())
            memo = workflow.patched(QUOTA_MEMO_PATCH)
            if memo:
                workflow.upsert_memo({QUOTA_MEMO: self.waiting.model_dump(mode="json")})
            self._publish()
            await workflow.wait_condition(lambda: ask_id in self._granted)
            self.waiting = None
            if memo:
                workflow.upsert_memo({QUOTA_MEMO: None})
            self._publish()
        return self._granted.pop(ask_id)

    @property
    def outbox(self) -> Outbox:
        """The signals this run sends keepers (drained before the run ends)."""
        return self._outbox

    async def release(self, key: str, ask_id: str, tokens: int | None) -> None:
        """The request answered: the keeper hears it before the run goes on."""
        release = QuotaRelease(ask_id=ask_id, tokens=tokens)
        keeper = keeper_id(workflow.info().task_queue, key)
        if workflow.patched(ASK_DIRECT_PATCH):
            await workflow.execute_local_activity(
                "release_to_quota_keeper",
                ReleaseToKeeper(keeper=keeper, release=release),
                start_to_close_timeout=TELL_TIMEOUT,
                summary=f"release quota {key}",
            )
        else:
            self._outbox.send(keeper, "release", release)

    def give_back(self, key: str, ask_id: str) -> None:
        """The request failed or the run is cancelled: a signal command, which needs no
        await (a cancelled run cannot wait for a local activity), sent before it ends."""
        self._send(workflow.info().task_queue, key, "release", QuotaRelease(ask_id=ask_id))

    def _send(self, task_queue: str, key: str, signal: str, body: object) -> None:
        self._outbox.send(keeper_id(task_queue, key), signal, body)
