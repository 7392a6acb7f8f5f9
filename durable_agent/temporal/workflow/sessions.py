"""Session runs: after a turn, wait for the next prompt and go on with the conversation.

A session counts the turns started (`turn`) and answered (`answered`); a `send_prompt`
update waits for its own turn's answer in `answers`. Between turns the session may continue
as new (`between_turns` then tells the successor to wait for a prompt, not drive again).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ...contract.environment import ENVIRONMENT_REF
    from ...contract.records import AwaitingPromptData, SessionEndedData
    from ...contract.state import AgentRunState
    from ...engine.controller import RunController, prompt_problem
    from ..wire import (
        MAX_APPROVAL_TIMEOUT_SECONDS,
        AgentWorkflowInput,
        AgentWorkflowResult,
        SessionCarry,
        SessionView,
    )
    from .live import LiveRun
    from .port import WorkflowPort

__all__ = ["Session", "finished", "result_of"]


def result_of(state: AgentRunState) -> AgentWorkflowResult:
    return AgentWorkflowResult(
        output=state.output,
        structured_output=state.structured_output,
        status=state.status.value,
        run_id=state.run_id,
        conversation_id=state.conversation_id,
        usage=state.usage,
        run_step=state.run_step,
        environment_ref=_environment_ref(state),
    )


def _environment_ref(state: AgentRunState) -> str | None:
    ref = state.metadata.get(ENVIRONMENT_REF)
    return ref if isinstance(ref, str) else None


async def finished(state: AgentRunState) -> AgentRunState:
    """The drive of a session that has no turn to run yet: it goes straight to waiting."""
    return state


class Session:
    """A session run's turns, prompts and answers (inert for a run that is not a session)."""

    def __init__(self, input: AgentWorkflowInput, live: LiveRun, port: WorkflowPort) -> None:
        self._input = input
        self._live = live
        self._port = port
        self.enabled = input.session
        carried = input.continuation.session if input.continuation else None
        opening = bool(input.prompt.strip() or input.resume_from)
        self.turn = carried.turn if carried else int(input.session and opening)
        """The turns started so far (the one its input starts, then each prompt's)."""
        self.answered = carried.answered if carried else 0
        self.answers: dict[int, AgentWorkflowResult] = {}
        """Finished turns' results, until the `send_prompt` that asked for them takes them."""
        self.prompts: list[str] = []
        self.prompt_updates = 0
        """`send_prompt` updates waiting for their turn's answer."""
        self.awaiting_prompt = bool(
            input.session and (carried.between_turns if carried else not opening)
        )
        """Set from the start when the run begins by waiting for a prompt, so a prompt that
        arrives with its first workflow task is taken."""
        self.between_turns = False
        self.ending = False
        self.idle_since: datetime | None = port.now() if self.awaiting_prompt else None

    # -- turns -----------------------------------------------------------------------------

    def answer(self, state: AgentRunState) -> bool:
        """Hands a finished turn's result to the `send_prompt` waiting for it. True if this
        turn had not been answered yet."""
        if self.turn <= self.answered:
            return False
        self.answered = self.turn
        self.answers[self.turn] = result_of(state)
        return True

    def ends_now(self, publish: Callable[[], None]) -> bool:
        """True (announced on the stream) if `end_session` came during the last turn."""
        if not self.ending:
            return False
        self._live.announce(None, SessionEndedData(reason="end_session", turns=self.answered))
        publish()
        return True

    async def next_prompt(self, publish: Callable[[], None]) -> str | None:
        """Waits for the next prompt; None: the session ends (`end_session`, or idle for
        `idle_timeout_seconds`), announced on the stream."""
        self.awaiting_prompt = True
        self.idle_since = self._port.now()
        self._live.announce(None, AwaitingPromptData(turns=self.answered))
        publish()
        idle = self._input.idle_timeout_seconds
        reason = "end_session"
        try:
            await self._port.wait(
                lambda: bool(self.prompts) or self.ending,
                timedelta(seconds=idle) if idle else None,
            )
        except TimeoutError:
            self.ending = True
            reason = "idle_timeout"
        finally:
            self.awaiting_prompt = False
        if not self.prompts:
            self._live.announce(None, SessionEndedData(reason=reason, turns=self.answered))
            publish()
            return None
        self.turn += 1
        return self.prompts.pop(0)

    def start_turn(
        self, controller: RunController, prompt: str, state: AgentRunState
    ) -> Coroutine[Any, Any, AgentRunState]:
        """The next turn's drive, with the whole conversation so far (and the workspace as
        the last turn left it)."""
        metadata = dict(self._input.metadata)
        environment = _environment_ref(state)
        if environment is not None:
            metadata[ENVIRONMENT_REF] = environment
        following = controller.new_state(
            prompt,
            message_history=state.message_history,
            conversation_id=state.conversation_id,
            metadata=metadata,
        )
        return controller.start(following, stream_start=self._live.seq)

    # -- send_prompt -------------------------------------------------------------------------

    def prompt_problem(self, prompt: str, status: str) -> str | None:
        if not self.enabled:
            return "this run is not a session; start one with session=true to send prompts"
        if self.ending:
            return "the session is ending (end_session was sent); start a new one"
        if self.between_turns:
            return "the session is continuing as new; send the prompt again in a moment"
        if not self.awaiting_prompt or self.prompts:
            return (
                f"the session is busy with turn {self.turn} (status: {status}); wait "
                "for its answer, or steer it"
            )
        return prompt_problem(prompt)

    @property
    def problem_kind(self) -> str:
        return "session_continuing" if self.between_turns else "invalid_prompt"

    async def answer_for(
        self, prompt: str, failed: Callable[[], str | None]
    ) -> tuple[int, AgentWorkflowResult | None]:
        """Queues a prompt and waits for its turn's answer (None: the run failed first)."""
        turn = self.turn + 1
        self.prompts.append(prompt)
        self.prompt_updates += 1
        try:
            await self._port.wait(lambda: turn in self.answers or failed() is not None)
        finally:
            self.prompt_updates -= 1
        return turn, self.answers.pop(turn, None)

    def end(self) -> bool:
        """`end_session`: False for a run that is not a session (the signal is dropped)."""
        if not self.enabled:
            self._port.logger.warning("end_session signal ignored: this run is not a session")
            return False
        self.ending = True
        return True

    # -- what it carries and shows -------------------------------------------------------------

    def carry(self) -> SessionCarry | None:
        if not self.enabled:
            return None
        return SessionCarry(
            turn=self.turn, answered=self.answered, between_turns=self.between_turns
        )

    def view(self) -> SessionView | None:
        if not self.enabled:
            return None
        idle = self._input.idle_timeout_seconds
        if idle is not None and not 0 < idle <= MAX_APPROVAL_TIMEOUT_SECONDS:
            idle = None  # the run failed with invalid_input; nothing expires
        since = self.idle_since if self.awaiting_prompt else None
        return SessionView(
            turns=self.answered,
            awaiting_prompt=self.awaiting_prompt,
            ending=self.ending,
            idle_since=since,
            idle_expires_at=since + timedelta(seconds=idle) if since and idle else None,
        )
