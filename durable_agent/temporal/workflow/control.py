"""Steering a run from outside: resume, suspend and steer.

These change how the loop goes on, not what it decided: a resume lets a suspended boundary
continue, a suspend asks the next boundary to stop, a steering message joins the model's
next request. Each check is the one its signal and its update share (see `gates`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ...contract.state import RunStatus
    from ...engine.controller import steering_problem
    from ..executor import TemporalExecutor
    from ..wire import AWAITING_PROMPT, ResumeSignal, SteerSignal, SuspendSignal
    from .gates import Gate, Refusal
    from .live import LiveRun
    from .port import WorkflowPort

__all__ = ["RunControl"]

_ENDED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
_STEERABLE = (RunStatus.RUNNING.value, RunStatus.WAITING.value)


class RunControl:
    def __init__(
        self,
        live: LiveRun,
        executor: TemporalExecutor,
        port: WorkflowPort,
        *,
        status: Callable[[], str],
        waits_for_decisions: Callable[[], bool],
    ) -> None:
        self._live = live
        self._executor = executor
        self._port = port
        self._status = status
        self._waits_for_decisions = waits_for_decisions

    # Gates made on a run's first request of their kind, which most runs never get: a cached
    # run keeps what it made for as long as it waits.

    @functools.cached_property
    def resume_gate(self) -> Gate[ResumeSignal]:
        return Gate(
            "resume", ResumeSignal, self.check_resume, self.resume, self._port, optional=True
        )

    @functools.cached_property
    def steer_gate(self) -> Gate[SteerSignal]:
        return Gate("steer", SteerSignal, self.check_steer, self.steer, self._port)

    def check_resume(self, request: ResumeSignal, as_signal: bool) -> Refusal | None:
        if self._executor.is_suspended:
            return None
        status = self._status()
        if as_signal:
            return Refusal("not_suspended", f"run is {status}, not suspended")
        hint = " (it waits for approvals: send them instead)" if self._waits_for_decisions() else ""
        return Refusal("not_suspended", f"run is not suspended (status: {status}){hint}")

    def resume(self, request: ResumeSignal) -> None:
        self._executor.request_resume(request.reason)

    def suspend(self, request: SuspendSignal) -> None:
        """Pauses at the next boundary; dropped (logged) for a run that has ended."""
        state = self._live.state
        if state is not None and state.status in _ENDED:
            self._port.logger.warning("suspend signal ignored: run is %s", state.status.value)
            return
        self._executor.request_pause(request.reason)

    def check_steer(self, request: SteerSignal, as_signal: bool) -> Refusal | None:
        """Only a run whose loop can still read it may be steered: running, or waiting for
        a human or a resume (the message then waits for the run to go on)."""
        status = self._status()
        if self._live.state is None or status not in _STEERABLE:
            if status == AWAITING_PROMPT:
                problem = "the session waits for its next prompt; send it with send_prompt"
            else:
                problem = f"run is {status}; only a running or waiting run can be steered"
            return Refusal("invalid_steering", problem)
        invalid = steering_problem(request.message)
        return Refusal("invalid_steering", invalid) if invalid else None

    def steer(self, request: SteerSignal) -> None:
        loop = self._live.loop
        assert loop is not None, "steering is checked by check_steer first"
        loop.steer(request.message)
        self._port.logger.info("steering message queued", extra={"chars": len(request.message)})
