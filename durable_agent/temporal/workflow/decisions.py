"""Human decisions on Temporal: approvals and deferred results, waited for and recorded.

`decided` holds every decision the run ever accepted (carried across continue-as-new: the
first decision of a call stands), `decisions` / `results` those not yet handed to the loop.
Which decisions are valid is the run controller's rule (`approval_problem`,
`deferred_problem`, shared with the in-process driver) and `decision_problem`'s
(approvers, signatures); this module applies them to signals and updates alike.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ...contract.decisions import DeferredToolResult, ToolApprovalDecision
    from ...contract.state import AgentRunState
    from ..authorization import decision_problem
    from ..queries import ApprovalRefusal
    from ..signing import ApprovalKeys
    from ..wire import ApprovalSignal, Continuation, DeferredResultSignal
    from .gates import Gate, Refusal
    from .live import LiveRun
    from .port import WorkflowPort

__all__ = ["APPROVAL_EXPIRED", "DROPPED_APPROVAL", "KEPT_REFUSALS", "HumanDecisions"]

APPROVAL_EXPIRED = "approval expired"
KEPT_REFUSALS = 5
"""Refused approval signals a run keeps to show (its details, its parent)."""
DROPPED_APPROVAL = "durable-agent.approval-signal-dropped"
"""Patch-marker prefix recording that an `approval` signal was refused by the authorization
check (see `HumanDecisions.signal_authorization`)."""
_NONE: frozenset[str] = frozenset()


class HumanDecisions:
    """The decisions humans sent this run, and the wait for them."""

    def __init__(
        self,
        live: LiveRun,
        port: WorkflowPort,
        *,
        status: Callable[[], str],
        publish: Callable[[], None],
        keys: ApprovalKeys | None,
    ) -> None:
        self._live = live
        self._port = port
        self._status = status
        self._publish = publish
        self._keys = keys
        self.decisions: dict[str, ToolApprovalDecision] = {}
        self.decided: dict[str, ToolApprovalDecision] = {}
        """Every decision this run has accepted, kept for audit and to refuse a second one."""
        self.results: dict[str, DeferredToolResult] = {}
        self.delivered: frozenset[str] = _NONE
        """Deferred calls given a result (a set made for each run would be 216 bytes of
        every cached one, few of which ever get a deferred result)."""
        self.waiting_since: datetime | None = None
        """`now()` when the run last began waiting for humans (state, not a command)."""
        self._approval_signals = 0
        self.refused_total = 0
        self.refusals: list[ApprovalRefusal] = []
        """The approval signals this run refused (the latest `KEPT_REFUSALS`): a signal
        cannot answer its sender, so the run's details, its stream and its parent do."""

    def restore(self, continuation: Continuation) -> None:
        self.decided = dict(continuation.decided)
        self.delivered = frozenset(continuation.delivered)

    # -- approvals ---------------------------------------------------------------------------

    def check_approval(self, request: ApprovalSignal, as_signal: bool) -> Refusal | None:
        if problem := self._approval_problem(request):
            return Refusal("invalid_approval", problem)
        if as_signal:
            problem = self.signal_authorization(request)
        else:
            problem = self.authorization_problem(request)
        return Refusal("unauthorized_approval", problem) if problem else None

    def _approval_problem(self, signal: ApprovalSignal) -> str | None:
        controller = self._live.controller
        if controller is None:
            return f"run is {self._status()}, not waiting for an approval"
        state = self._live.state
        problem = controller.approval_problem(
            state, signal.tool_call_id, decided=self.decided, status=self._status()
        )
        if problem is None and signal.approved and state is not None:
            problem = controller.override_problem(
                state, signal.tool_call_id, signal.override_arguments
            )
        return problem

    def authorization_problem(self, signal: ApprovalSignal) -> str | None:
        """Whether the sender may make this decision: the tool's approvers and, when this
        worker has approval keys, a valid signature. Asked once the call is known to be
        pending; reads state and the worker's keys only."""
        state = self._live.state
        agent = self._live.agent
        assert agent is not None
        assert state is not None
        tool = next(
            a.tool_name
            for a in state.pending_approval_tool_returns
            if a.tool_call_id == signal.tool_call_id
        )
        identity = self._port.identity()
        return decision_problem(
            agent,
            tool,
            signal,
            workflow_id=identity.workflow_id,
            keys=self._keys,
            now=self._port.now(),
        )

    def signal_authorization(self, signal: ApprovalSignal) -> str | None:
        """`authorization_problem` for a signal, whose verdict must replay unchanged.

        A signal cannot be refused, only dropped, and whether it is dropped depends on this
        worker's keys and the agent's approvers, which history does not hold. So a drop is
        recorded as a patch marker (one per signal that gets this far): a replay, on a
        worker with other keys or none, drops exactly the signals that were dropped.
        """
        self._approval_signals += 1
        marker = f"{DROPPED_APPROVAL}-{self._approval_signals}"
        if self._port.is_replaying():
            return "dropped when it arrived" if self._port.patched(marker) else None
        problem = self.authorization_problem(signal)
        if problem is not None:
            self._port.patched(marker)
        return problem

    def refused(self, signal: ApprovalSignal, refusal: Refusal) -> None:
        """An `approval` signal this run dropped: on its stream and in its details."""
        self.remember_refusal(
            ApprovalRefusal(
                tool_call_id=signal.tool_call_id,
                reason=refusal.message,
                decided_by=signal.decided_by,
            )
        )
        self._publish()

    def remember_refusal(self, refused: ApprovalRefusal) -> None:
        """Keeps a refusal (this run's own, or a descendant's) for its status and details
        (not its stream: readers of earlier releases know no such record)."""
        self.refusals = [*self.refusals[-(KEPT_REFUSALS - 1) :], refused]
        self.refused_total += 1

    def record_approval(self, signal: ApprovalSignal) -> None:
        decision = signal.decision()
        if not decision.approved and not decision.reason:
            decision = decision.model_copy(update={"reason": "denied"})
        self.decisions[signal.tool_call_id] = decision
        self.decided[signal.tool_call_id] = decision
        self._announce_decision(signal.tool_call_id, decision)
        self._port.logger.info(
            "approval recorded",
            extra={
                "tool_call_id": signal.tool_call_id,
                "approved": signal.approved,
                "decided_by": signal.decided_by,
            },
        )
        self._publish()

    def _announce_decision(self, tool_call_id: str, decision: ToolApprovalDecision) -> None:
        loop = self._live.loop
        if loop is None:
            return
        pending = loop.state.pending_approval_tool_returns
        name = next((a.tool_name for a in pending if a.tool_call_id == tool_call_id), "")
        loop.announce_decision(tool_call_id, name, decision)

    @functools.cached_property
    def approval_gate(self) -> Gate[ApprovalSignal]:
        """Made on the run's first approval (a signal, an update or its validator), not
        while the run waits for it: a cached run keeps what it made for as long as it waits."""
        check, record = self.check_approval, self.record_approval
        return Gate("approval", ApprovalSignal, check, record, self._port, refused=self.refused)

    # -- deferred results --------------------------------------------------------------------

    @functools.cached_property
    def result_gate(self) -> Gate[DeferredResultSignal]:
        """Made on the run's first deferred result, which most runs never get: a cached run
        keeps what it made for as long as it waits."""
        check, record = self.check_result, self.record_result
        return Gate("deferred_result", DeferredResultSignal, check, record, self._port)

    def check_result(self, request: DeferredResultSignal, as_signal: bool) -> Refusal | None:
        controller = self._live.controller
        if controller is None:
            problem: str | None = f"run is {self._status()}, not waiting for a deferred result"
        else:
            problem = controller.deferred_problem(
                self._live.state,
                request.tool_call_id,
                delivered=self.delivered,
                status=self._status(),
            )
        return Refusal("invalid_deferred_result", problem) if problem else None

    def record_result(self, signal: DeferredResultSignal) -> None:
        self.delivered = self.delivered | {signal.tool_call_id}
        self.results[signal.tool_call_id] = DeferredToolResult(
            tool_call_id=signal.tool_call_id, status=signal.status, response=signal.response
        )
        loop = self._live.loop
        if loop is not None:
            deferred = loop.state.deferred_tool_returns
            call_id = signal.tool_call_id
            name = next((d.tool_name for d in deferred if d.tool_call_id == call_id), "")
            loop.announce_result(signal.tool_call_id, name, signal.status)
        self._publish()

    # -- the wait ----------------------------------------------------------------------------

    def all_decided(self) -> bool:
        state = self._live.state
        assert state is not None
        return all(
            a.tool_call_id in self.decisions for a in state.pending_approval_tool_returns
        ) and all(d.tool_call_id in self.results for d in state.deferred_tool_returns)

    def wait(self, timeout_seconds: float | None) -> Awaitable[None]:
        """Until every pending call of the run's state is decided; after `timeout_seconds`
        the undecided approvals are denied as expired (deferred calls keep waiting).
        Without a timeout, the SDK's wait itself: a coroutine of ours around it would be
        one more a run keeps for as long as it waits."""
        self.waiting_since = self._port.now()
        self._publish()
        if not timeout_seconds:
            return self._port.wait(self.all_decided)
        return self._wait_expiring(timedelta(seconds=timeout_seconds))

    async def _wait_expiring(self, timeout: timedelta) -> None:
        try:
            await self._port.wait(self.all_decided, timeout)
        except TimeoutError:
            state = self._live.state
            assert state is not None
            for approval in state.pending_approval_tool_returns:
                if approval.tool_call_id not in self.decisions:
                    expired = ToolApprovalDecision.deny(APPROVAL_EXPIRED, decided_by="system")
                    self.decisions[approval.tool_call_id] = expired
                    self._announce_decision(approval.tool_call_id, expired)
            self._publish()
            await self._port.wait(self.all_decided)

    def take(
        self, state: AgentRunState
    ) -> tuple[dict[str, ToolApprovalDecision], list[DeferredToolResult]]:
        """The decisions for `state`'s pending calls, handed to the loop (and forgotten)."""
        approvals = {
            a.tool_call_id: self.decisions[a.tool_call_id]
            for a in state.pending_approval_tool_returns
        }
        results = [self.results[d.tool_call_id] for d in state.deferred_tool_returns]
        self.decisions.clear()
        self.results.clear()
        return approvals, results
