"""What people see of a run without asking the loop: status, search attributes, details.

`status()` is the one answer to "what is this run doing" (the `status` query, the
`AgentStatus` search attribute, the refusals of decisions all use it). `publish()` keeps
`AgentStatus` / `PendingApprovals` in step (a command only when they change) and the
Web UI's current details (not a command) up to date.

Runs recorded since `placement.VISIBILITY_PATCH` coalesce their upserts (`begin`, `flush`):
what one stretch of workflow code publishes, up to its next wait, goes out as one upsert of
what holds at its end. A step that passes through a status on its way to the next (the
checkpoint that lists a pending approval, then the wait for it) upserts once, not twice, and
the run's name goes out with its first status. Each command a run records stays in its
worker's cache as long as the run does (the SDK's core keeps a state machine for each), so
a run that waits for days keeps fewer.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate

with workflow.unsafe.imports_passed_through():
    from ...contract.decisions import PendingCall
    from ...contract.environment import ENVIRONMENT_REF
    from ...contract.state import AgentRunState, RunStatus
    from ...contract.usage import Usage
    from ..executor import TemporalExecutor
    from ..markdown import literal
    from ..search_attributes import AGENT_NAME, AGENT_STATUS, FORKED_FROM, PENDING_APPROVALS
    from ..wire import (
        AWAITING_PROMPT,
        AgentStatusView,
        ForkOrigin,
        PendingApprovalView,
        UpdateAccepted,
    )
    from .decisions import HumanDecisions
    from .live import LiveRun
    from .port import WorkflowPort
    from .sessions import Session
    from .subagents import ParentNotifier, SubagentRuns

__all__ = ["Visibility"]

_ENDED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
SHOWN_DECISIONS = 5
"""The latest decisions the Web UI's details list (who decided what, and their remarks)."""
_APPROVAL_EXAMPLE = '{"tool_call_id": "...", "approved": true}'


def _nothing() -> None:
    return None


class Visibility:
    """The run's status as queries, search attributes and the Web UI show it."""

    def __init__(
        self,
        live: LiveRun,
        executor: TemporalExecutor,
        session: Session,
        decisions: HumanDecisions,
        port: WorkflowPort,
        subagents: SubagentRuns | None = None,
    ) -> None:
        """`subagents`: the run's sub-agent calls (None: a run that starts none)."""
        self._live = live
        self._subagents = subagents if subagents is not None else SubagentRuns(port, _nothing)
        parent = live.input.parent
        self._parent = (
            ParentNotifier(parent, port, live.input.agent) if parent is not None else None
        )
        self._executor = executor
        self._session = session
        self._decisions = decisions
        self._port = port
        self._published: tuple[str, int] | None = None
        self._batched = False
        self._due: tuple[str, int] | None = None
        """What the next `flush` upserts (batched runs)."""
        self._carried: list[SearchAttributeUpdate[Any]] = []
        self._flush_asked = False

    def begin(self, *, batched: bool) -> None:
        """At the run's start: its name (and a fork's origin) as search attributes, at
        once, or, in a `batched` run, with its first upsert; from then on a batched run
        coalesces its upserts (`flush`)."""
        input = self._live.input
        first: list[SearchAttributeUpdate[Any]] = []
        if input.continuation is None:
            first.append(AGENT_NAME.value_set(input.agent))
            if input.resume_from is not None:
                first.append(FORKED_FROM.value_set(input.resume_from.workflow_id))
        self._batched = batched
        self._carried = first
        if first:
            self._ask_flush()

    def status(self) -> str:
        if self._live.error is not None:
            return RunStatus.FAILED.value
        if self._session.awaiting_prompt:
            return AWAITING_PROMPT
        state = self._live.state
        if state is None:
            return RunStatus.STARTING.value
        if self._executor.is_suspended:
            return RunStatus.WAITING.value
        if state.status is RunStatus.RUNNING and self._subagents.waiting():
            return RunStatus.WAITING.value
        return state.status.value

    def publish(self) -> None:
        status = self.status()
        ended = status in _ENDED
        # A run that ended waits for nobody, whatever calls its last state still lists.
        pending = [] if ended else [p for p in self.pending_approvals() if not p.decided]
        if self._parent is not None:
            decisions = self._decisions
            refused = decisions.refusals
            self._parent.changed(status, pending, self.usage(), refused, decisions.refused_total)
        self._due = (status, len(pending))
        self._ask_flush()
        self._port.set_details(self._details(status, pending))

    def _ask_flush(self) -> None:
        """A run that is not batched upserts at once; a batched one once the code that
        published yields (`WorkflowPort.soon`)."""
        if not self._batched:
            self.flush()
        elif not self._flush_asked:
            self._flush_asked = True
            self._port.soon(self.flush)

    def flush(self) -> None:
        """The upsert of what the run published last, if that changed, with what `begin`
        carries. The workflow also calls it before it ends or continues as new, so a batched
        run's last status is upserted while it can still issue commands."""
        self._flush_asked = False
        key = self._due
        updates, self._carried = self._carried, []
        if key is not None and key != self._published:
            self._published = key
            status, pending = key
            updates += [AGENT_STATUS.value_set(status), PENDING_APPROVALS.value_set(pending)]
        if updates:
            self._port.upsert(updates)

    def _details(self, status: str, pending: list[PendingApprovalView]) -> str:
        """The Web UI's current details. Everything a user or a model wrote goes through
        `literal`: the UI renders Markdown and HTML."""
        node = self._executor.node.value if self._executor.node else "-"
        state = self._live.state
        step = state.run_step if state else 0
        lines = [
            f"**Agent** {literal(self._live.input.agent)} · **status** {status} · "
            f"**node** {node} · **step** {step}"
        ]
        if self._executor.suspended_reason:
            reason = literal(self._executor.suspended_reason)
            lines.append(f"\n**Suspended:** {reason} (send the resume signal)")
        if pending:
            lines.append("\n**Pending approvals**\n")
            lines.extend(
                f"- call {literal(p.tool_call_id)} · tool {literal(p.tool_name)} · arguments "
                f"{literal(json.dumps(p.arguments, default=str))}"
                for p in pending
            )
            lines.append(f"\nSend the approval signal with input `{_APPROVAL_EXAMPLE}`")
        decided = list(self._decisions.decided.items())[-SHOWN_DECISIONS:]
        if decided:
            lines.append("\n**Decisions**\n")
            lines.extend(
                f"- call {literal(call_id)} · {literal(decision.describe())}"
                for call_id, decision in decided
            )
        if self._decisions.refusals:
            lines.append("\n**Refused approval signals**\n")
            lines.extend(
                f"- call {literal(r.tool_call_id)}"
                + (f" in {literal(r.workflow_id)}" if r.workflow_id else "")
                + f" · {literal(r.reason)}"
                for r in self._decisions.refusals
            )
        if self._live.error:
            lines.append(f"\n**Failed:** {literal(self._live.error)}")
        return "\n".join(lines)

    # -- pending calls -------------------------------------------------------------------------

    def undecided(self) -> list[PendingApprovalView]:
        """The run's approvals, each marked `decided` once a decision for it arrived."""
        state = self._live.state
        decisions = self._decisions.decisions
        return [
            self._pending(a, a.decision is not None or a.tool_call_id in decisions, approval=True)
            for a in (state.pending_approval_tool_returns if state else [])
        ]

    def pending_approvals(self) -> list[PendingApprovalView]:
        """This run's approvals, then its sub-agents' (each naming the workflow that
        holds it and the agent that made it): one list for the people who decide them."""
        return self.undecided() + self._subagents.pending()

    def _deferred(self) -> list[PendingApprovalView]:
        state = self._live.state
        results = self._decisions.results
        return [
            self._pending(d, d.tool_call_id in results, approval=False)
            for d in (state.deferred_tool_returns if state else [])
        ]

    def _pending(self, call: PendingCall, decided: bool, *, approval: bool) -> PendingApprovalView:
        return PendingApprovalView(
            tool_call_id=call.tool_call_id,
            tool_name=call.tool_name,
            arguments=call.arguments,
            reason=call.reason,
            decided=decided,
            **self._wait_view(call.tool_name, approval=approval),
        )

    def _wait_view(self, tool_name: str, *, approval: bool) -> dict[str, Any]:
        """When a pending call began waiting, when it expires, who may decide it and whether
        its arguments may be replaced: for the inbox, from the run's own state."""
        since = self._decisions.waiting_since
        timeout = self._live.input.approval_timeout_seconds
        agent = self._live.agent
        allowed = agent.approvers_of(tool_name) if agent is not None and approval else None
        state = self._live.state
        listings = state.toolset_listings if state is not None else []
        validated = (agent is not None and tool_name in agent.tools) or any(
            tool.name == tool_name for listing in listings for tool in listing.tools
        )
        return {
            "waiting_since": since,
            "expires_at": since + timedelta(seconds=timeout)
            if since is not None and timeout and approval
            else None,
            "approvers": sorted(allowed) if allowed is not None else None,
            "overridable": approval and validated,
        }

    def accepted(self, message: str, *, resumes: bool = False) -> UpdateAccepted:
        """An accepted update's answer; `status` is what the run does next: an accepted
        resume, or the last missing decision, sets it running again."""
        status = self.status()
        state = self._live.state
        if status == RunStatus.WAITING.value and (
            resumes
            or (
                state is not None
                and state.status is RunStatus.WAITING
                and not self._executor.is_suspended
                and self._decisions.all_decided()
            )
        ):
            status = RunStatus.RUNNING.value
        return UpdateAccepted(message=message, status=status)

    # -- the status query ------------------------------------------------------------------------

    def usage(self) -> Usage:
        """The run's usage as it stands, its sub-agents' at any depth included while they
        still work (their parent adds it for good when their calls return)."""
        state = self._live.state
        own = state.usage if state is not None else Usage()
        return own.add(self._subagents.unapplied_usage(state))

    def view(self, *, continued_as_new: int, forked_from: ForkOrigin | None) -> AgentStatusView:
        state = self._live.state
        executor = self._executor
        return AgentStatusView(
            agent=self._live.input.agent,
            status=self.status(),
            node=executor.node.value if executor.node else None,
            run_step=state.run_step if state else 0,
            run_id=state.run_id if state else None,
            conversation_id=state.conversation_id if state else None,
            suspend_reason=executor.suspended_reason,
            pending_approvals=self.pending_approvals(),
            deferred_calls=self._deferred(),
            usage=self.usage(),
            output=state.output if state else None,
            error=self._live.error,
            checkpoint_count=executor.checkpoint_count,
            continued_as_new=continued_as_new,
            steering=list(state.pending_steering) if state else [],
            forked_from=forked_from,
            session=self._session.view(),
            subagents=self._subagents.views(),
            model=self._live.answered_by(),
            refused_decisions=list(self._decisions.refusals),
            environment_ref=_environment_ref(state),
        )


def _environment_ref(state: AgentRunState | None) -> str | None:
    ref = state.metadata.get(ENVIRONMENT_REF) if state is not None else None
    return ref if isinstance(ref, str) else None
