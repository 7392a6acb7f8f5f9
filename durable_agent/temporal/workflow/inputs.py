"""The workflow's input, read where a bad one fails the run instead of its workflow task.

Temporal decodes a run's arguments before any workflow code runs; had `AgentWorkflow.run`
declared `AgentWorkflowInput`, a malformed input (`{"agent": 5}`, a bare string, none at
all) would fail decoding in every workflow task, retried for ever, the run stuck in
`starting`. So the run takes plain JSON and validates it here: a bad input becomes an
`invalid_input` failure naming the field.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ...contract._fields import settled
    from ..wire import AgentWorkflowInput

__all__ = ["RawInput", "read_input"]

RawInput = Any
"""What `AgentWorkflow.run` accepts: an `AgentWorkflowInput` (clients send one), decoded as
plain JSON whatever a hand-written start sent, then checked by `read_input`. Not a union of
the model and a dict: the payload converter would validate that union itself, and refuse
a bare string the same way it refuses a malformed model today."""

_PLACEHOLDER_AGENT = "(invalid input)"


def read_input(raw: Any) -> tuple[AgentWorkflowInput, str | None]:
    """The input and None, or a stand-in input and why the real one cannot run."""
    if isinstance(raw, AgentWorkflowInput):
        return raw, None
    if isinstance(raw, BaseModel):
        raw = raw.model_dump(mode="json")
    if raw is None:
        problem = (
            "the workflow was started without an input; give a JSON object such as "
            '{"agent": "weather", "prompt": "..."}'
        )
        return AgentWorkflowInput(agent=_PLACEHOLDER_AGENT), problem
    if not isinstance(raw, dict):
        problem = (
            f"the workflow input must be a JSON object such as "
            f'{{"agent": "weather", "prompt": "..."}}, got {type(raw).__name__} {_clip(raw)}'
        )
        return AgentWorkflowInput(agent=_PLACEHOLDER_AGENT), problem
    try:
        # Kept for the run's life: with its class's shared fields set (`settled`).
        return settled(AgentWorkflowInput.model_validate(raw)), None
    except ValidationError as error:
        agent = raw.get("agent")
        stand_in = AgentWorkflowInput(agent=agent if isinstance(agent, str) else _PLACEHOLDER_AGENT)
        return stand_in, "invalid workflow input: " + _fields(error)


def _fields(error: ValidationError) -> str:
    """Each bad field by its path, what is wrong with it and what was given."""
    problems = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(input)"
        problems.append(f"{where}: {item['msg']} (got {_clip(item.get('input'))})")
    return "; ".join(problems)


def _clip(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
