"""What a resumed or forked run may change: the model, its settings, the instructions.

Time travel is most useful when the second try differs from the first: the same run from
step 12 with a stronger model, a lower temperature or clearer instructions. Overrides are
plain data, so they travel with a Temporal fork (`AgentWorkflowInput.overrides`) to every
activity that needs them, and `Agent.with_overrides` turns them into the agent that runs.
A model is named, never sent: it must be one of the agent's `allowed_models`, so a fork
cannot point a run at a model (or an endpoint, or a key) its owner did not configure.
"""

from __future__ import annotations

from pydantic import BaseModel

from ..contract._fields import omit_none
from ..contract.messages import InstructionPart, ModelMessage, ModelRequest
from ..contract.state import AgentRunState
from ..models.base import ModelSettings

__all__ = ["AgentOverrides", "merge_settings", "with_instructions"]


class AgentOverrides(BaseModel):
    """Changes for a resumed or forked run; a field left None keeps the agent's own."""

    model: str | None = omit_none()
    """A name in the agent's `allowed_models` (`AgentBuilder.allowed_models`)."""
    model_settings: ModelSettings | None = omit_none()
    """Laid over the agent's settings: the fields set here replace the agent's."""
    instructions: str | None = omit_none()
    """Replace the agent's instructions, in the conversation so far too (the model reads
    them from the history's instruction parts), from the resumed boundary on."""

    @property
    def empty(self) -> bool:
        return self.model is None and self.model_settings is None and self.instructions is None


def merge_settings(
    base: ModelSettings | None, override: ModelSettings | None
) -> ModelSettings | None:
    """The agent's settings with the fields `override` sets replaced (`extra` merged)."""
    if override is None:
        return base
    if base is None:
        return override
    changes = override.model_dump(exclude_unset=True)
    if "extra" in changes:
        changes["extra"] = {**base.extra, **override.extra}
    return base.model_copy(update=changes)


def with_instructions(state: AgentRunState, instructions: str) -> AgentRunState:
    """A copy of `state` whose conversation carries `instructions` instead of the ones it
    was started with: every instruction part is replaced (messages are copied, never
    changed), and a conversation without one gets it at the front of its first request
    (unless the run's first request is still to be prepared: that renders them itself)."""
    replaced = False
    history: list[ModelMessage] = []
    for message in state.message_history:
        if isinstance(message, ModelRequest) and any(
            isinstance(part, InstructionPart) for part in message.parts
        ):
            parts = [
                InstructionPart(content=instructions) if isinstance(part, InstructionPart) else part
                for part in message.parts
            ]
            message = message.model_copy(update={"parts": parts})
            replaced = True
        history.append(message)
    if not replaced and state.pending_prompt is None:
        for position, message in enumerate(history):
            if isinstance(message, ModelRequest):
                parts = [InstructionPart(content=instructions), *message.parts]
                history[position] = message.model_copy(update={"parts": parts})
                break
    copy = state.snapshot()
    copy.message_history = history
    return copy
