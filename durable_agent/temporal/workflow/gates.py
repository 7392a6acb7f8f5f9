"""One path for a signal and its update: parse, check, then record.

Humans reach a run by signal (fire and forget) or by update (answered, validated before it
enters history). Both go through the same `Gate`: the same check and the same record, so a
rule cannot differ between them. What differs is only what a refusal does: an update's
validator raises it (the request never enters history), a signal, which cannot be refused,
is logged and dropped (raising would fail the workflow task over and over).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio.exceptions import ApplicationError

from .port import WorkflowPort

__all__ = ["Gate", "Refusal", "parse_signal"]

RequestT = TypeVar("RequestT", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is refused: `kind` is the update's error type."""

    kind: str
    message: str


def parse_signal(
    model: type[RequestT],
    name: str,
    inputs: tuple[Any, ...],
    port: WorkflowPort,
    *,
    optional: bool = False,
) -> RequestT | None:
    """A signal's input as `model`, or None (logged) when it is malformed."""
    if not inputs and optional:
        return model()
    if len(inputs) != 1 or (inputs[0] is None and not optional):
        port.logger.warning(
            "%s signal ignored: expected one JSON object as input, got %d input(s)",
            name,
            len(inputs),
        )
        return None
    try:
        return model.model_validate(inputs[0] if inputs[0] is not None else {})
    except ValidationError as error:
        port.logger.warning("%s signal ignored: malformed input: %s", name, error)
        return None


class Gate(Generic[RequestT]):
    """A request kind's one path. `check(request, as_signal)` says why it is refused
    (`as_signal` for the few checks whose verdict a signal must record to replay, and for
    the log wording); `record(request)` applies it."""

    def __init__(
        self,
        signal_name: str,
        model: type[RequestT],
        check: Callable[[RequestT, bool], Refusal | None],
        record: Callable[[RequestT], None],
        port: WorkflowPort,
        *,
        optional: bool = False,
        refused: Callable[[RequestT, Refusal], None] | None = None,
    ) -> None:
        self.signal_name = signal_name
        self._refused = refused
        self.model = model
        self._check = check
        self._record = record
        self._port = port
        self._optional = optional

    def signal(self, inputs: tuple[Any, ...]) -> bool:
        """Handles the signal's raw inputs; True if it was recorded."""
        request = parse_signal(
            self.model, self.signal_name, inputs, self._port, optional=self._optional
        )
        if request is None:
            return False
        refusal = self._check(request, True)
        if refusal is not None:
            self._port.logger.warning("%s signal ignored: %s", self.signal_name, refusal.message)
            if self._refused is not None:
                self._refused(request, refusal)
            return False
        self._record(request)
        return True

    def validate(self, request: RequestT) -> None:
        """The update's validator: raises the refusal, so nothing enters history."""
        refusal = self._check(request, False)
        if refusal is not None:
            raise ApplicationError(refusal.message, type=refusal.kind, non_retryable=True)

    def record(self, request: RequestT) -> None:
        """The update's handler (its validator passed)."""
        self._record(request)
