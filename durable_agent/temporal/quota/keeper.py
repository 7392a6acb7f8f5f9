"""The keeper of one model key's quota: a workflow that grants model requests in turn.

Every run of a task queue whose worker configures a quota for the key asks this workflow
(`ask` signal) before its request and waits, durably and holding no worker slot, for the
grant (`quota_granted` signalled back); it signals `release` once the request ended. The
keeper grants in priority order whenever the window (`durable_agent.quotas.QuotaWindow`)
has room, pauses everyone on a 429 (`pause`), and continues as new to keep its history
short. Being a workflow, it survives worker and server restarts with its queue intact.

Keepers started since `GRANTS_TOLD_PATCH` tell a workflow task's grants with one local
activity and grant a slot up to `GRANT_AHEAD` seconds before it opens (the request waits in
its activity, `QuotaGrant.not_before`): a window's requests then leave when its slots open,
not a round of signals later.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from durable_agent.engine.quotas import (
        SEND_MARGIN,
        SHORT_SEND_MARGIN,
        ModelQuota,
        QuotaWindow,
    )

    from ..outbox import Outbox
    from .wire import (
        GRANT_SIGNAL,
        KEEPER_WORKFLOW,
        GrantNotice,
        KeeperInput,
        KeeperView,
        Lease,
        QuotaAsk,
        QuotaGrant,
        QuotaPause,
        QuotaRelease,
        QuotaSent,
        TellGrants,
    )

__all__ = ["GRANTS_TOLD_PATCH", "QuotaKeeper"]

SEND_TIME_PATCH = "durable-agent.quota-by-send-time"
"""Marks a keeper that counts an ended request from when it was sent (`QuotaWindow.by_send`):
keepers recorded before count from when it ended until they continue as new."""
GRANTS_TOLD_PATCH = "durable-agent.quota-grants-told-directly"
"""Marks a keeper that tells grants with a local activity, grants ahead and keeps the short
margin; keepers recorded before signal each grant, grant when the slot is open and keep
`SEND_MARGIN` until they continue as new."""
GRANT_AHEAD = 2.0
"""How long before its slot opens a request may be granted: a grant's way to its run and
the run's to its activity take well under this, even on a busy worker."""
EVENTS_BEFORE_CONTINUING = 2_000


@workflow.defn(name=KEEPER_WORKFLOW)
class QuotaKeeper:
    @workflow.init
    def __init__(self, input: KeeperInput) -> None:
        self.key = input.key
        by_send = workflow.patched(SEND_TIME_PATCH)
        self.direct = workflow.patched(GRANTS_TOLD_PATCH)
        self.ahead = GRANT_AHEAD if self.direct else 0.0
        self.window = QuotaWindow.restore(
            input.quota,
            input.grants,
            len(input.leases),
            input.paused_until,
            by_send=by_send,
            margin=SHORT_SEND_MARGIN if self.direct else SEND_MARGIN,
        )
        self.queue: list[QuotaAsk] = list(input.queue)
        self.leases: dict[str, Lease] = {lease.ask_id: lease for lease in input.leases}
        self.changed = False
        self.events = 0
        self._outbox = Outbox()
        self._told: list[GrantNotice] = []

    @workflow.run
    async def run(self, input: KeeperInput) -> None:
        while True:
            # Cleared before granting: a signal heard while the grants are told (a local
            # activity) is looked at in the next round, not lost.
            self.changed = False
            now = workflow.now().timestamp()
            self._expire(now)
            wait = self._grant(now)
            await self._tell_grants()
            if self.events >= EVENTS_BEFORE_CONTINUING or (
                workflow.info().is_continue_as_new_suggested()
            ):
                await workflow.wait_condition(workflow.all_handlers_finished)
                await self._outbox.drained()
                workflow.continue_as_new(self._carried())
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(lambda: self.changed, timeout=wait)

    def _grant(self, now: float) -> float | None:
        """Grants the queue's head while the window has room (or will within `ahead`); how
        long until it may (None: only a release or a new ask changes anything)."""
        self.queue.sort(key=lambda ask: ask.priority)  # stable: first come, first served
        while self.queue:
            ask = self.queue[0]
            wait = self.window.wait(now, ask.tokens)
            if wait is None or wait > self.ahead:
                return None if wait is None else wait - self.ahead
            self.queue.pop(0)
            at = now + wait
            self.window.grant(at, ask.tokens)
            self.leases[ask.ask_id] = Lease(
                ask_id=ask.ask_id,
                requester=ask.requester,
                granted_at=at,
                tokens=ask.tokens,
                expires_at=at + ask.lease_seconds,
            )
            not_before = datetime.fromtimestamp(at, UTC) if wait > 0 else None
            self._tell(ask, QuotaGrant(ask_id=ask.ask_id, key=self.key, not_before=not_before))
        return None

    def _tell(self, ask: QuotaAsk, grant: QuotaGrant) -> None:
        if self.direct:
            self._told.append(GrantNotice(requester=ask.requester, grant=grant))
            return
        # A run that ended meanwhile frees its grant again.
        self._outbox.send(
            ask.requester,
            GRANT_SIGNAL,
            grant,
            on_failure=lambda _: self._release(QuotaRelease(ask_id=ask.ask_id)),
        )

    async def _tell_grants(self) -> None:
        """This round's grants, in one local activity; the grants of runs that have ended
        are free again."""
        if not self._told:
            return
        told, self._told = TellGrants(grants=self._told), []
        ended = await workflow.execute_local_activity(
            "tell_quota_grants",
            told,
            result_type=list[str],
            start_to_close_timeout=timedelta(seconds=30),
            summary=f"{len(told.grants)} grants",
        )
        for ask_id in ended:
            self._release(QuotaRelease(ask_id=ask_id))

    def _expire(self, now: float) -> None:
        for lease in [lease for lease in self.leases.values() if lease.expires_at <= now]:
            workflow.logger.warning("quota lease %s expired unreleased", lease.ask_id)
            self._release(QuotaRelease(ask_id=lease.ask_id))

    def _release(self, release: QuotaRelease) -> None:
        lease = self.leases.pop(release.ask_id, None)
        if lease is not None:
            now = workflow.now().timestamp()
            self.window.settle(now, lease.granted_at, lease.tokens, release.tokens)
        self._touch()

    def _touch(self) -> None:
        self.changed = True
        self.events += 1

    def _carried(self) -> KeeperInput:
        return KeeperInput(
            key=self.key,
            quota=self.window.quota,
            queue=self.queue,
            leases=list(self.leases.values()),
            grants=self.window.snapshot(),
            paused_until=self.window.paused_until,
        )

    # -- signals and the query ---------------------------------------------------------------

    @workflow.signal
    def ask(self, ask: QuotaAsk) -> None:
        if ask.quota is not None:
            self.configure(ask.quota)
        if ask.ask_id not in self.leases and all(q.ask_id != ask.ask_id for q in self.queue):
            self.queue.append(ask)
        self._touch()

    @workflow.signal
    def release(self, release: QuotaRelease) -> None:
        self._release(release)

    @workflow.signal
    def sent(self, sent: QuotaSent) -> None:
        """A granted request went to the provider: it counts from when its activity sent
        it, not from when this keeper's task ran, which on a busy keeper is seconds later
        (its grant counted meanwhile)."""
        lease = self.leases.get(sent.ask_id)
        if lease is None or not self.window.by_send:
            return
        now = workflow.now().timestamp()
        reported = None if sent.at is None else sent.at.timestamp()
        lease.granted_at = self.window.sent(lease.granted_at, lease.tokens, now, reported)
        self._touch()

    @workflow.signal
    def pause(self, pause: QuotaPause) -> None:
        self.window.pause(pause.until.timestamp())
        workflow.logger.warning("quota %s paused until %s: %s", self.key, pause.until, pause.reason)
        self._touch()

    @workflow.signal
    def configure(self, quota: ModelQuota) -> None:
        """The workers' configuration (sent by each worker's first run of the key)."""
        if quota != self.window.quota:
            self.window.quota = quota
            self._touch()

    @workflow.query
    def state(self) -> KeeperView:
        now = workflow.now().timestamp()
        recent = [g for g in self.window.grants if g.open or g.at > now - 60]
        paused = self.window.paused_until
        return KeeperView(
            key=self.key,
            quota=self.window.quota,
            waiting=len(self.queue),
            in_flight=len(self.leases),
            granted_last_minute=len(recent),
            tokens_last_minute=sum(g.tokens for g in recent),
            paused_until=datetime.fromtimestamp(paused, UTC) if paused > now else None,
        )
