"""History processors: what of a long conversation the model sees, and what a long run
carries across continue-as-new.

A processor is a plain function from the message history to the messages to keep. The
agent applies its processors, in order, before every model request (the stored history
is left whole), and on Temporal to the conversation a run carries into its continuation.
Processors run inside the workflow, so they must be deterministic: no clock, no I/O, no
randomness. Whatever they return must keep tool calls and their returns together; the
agent checks that and names the processor that broke it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..contract.errors import UserError
from ..contract.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    ToolCallPart,
    ToolReturnPart,
)

__all__ = [
    "HistoryProcessor",
    "apply_history_processors",
    "drop_old_tool_returns",
    "keep_last_messages",
]

HistoryProcessor = Callable[[list[ModelMessage]], list[ModelMessage]]


def keep_last_messages(count: int) -> HistoryProcessor:
    """Keeps the first request (instructions and the task) and about the last `count`
    messages, starting the kept tail at a model response so no tool return loses its call.
    """
    if count < 1:
        raise UserError(f"keep_last_messages needs a count of at least 1, got {count}")

    def keep(messages: list[ModelMessage]) -> list[ModelMessage]:
        if len(messages) <= count + 1:
            return messages
        start = len(messages) - count
        while start < len(messages) and not isinstance(messages[start], ModelResponse):
            start += 1
        return [messages[0], *messages[start:]]

    keep.__name__ = f"keep_last_messages({count})"
    return keep


def drop_old_tool_returns(
    keep_last: int = 2, *, placeholder: str | None = None
) -> HistoryProcessor:
    """Replaces the bodies of tool returns older than the last `keep_last` requests with a
    short note: the model keeps the shape of what it did without re-reading every result."""
    if keep_last < 0:
        raise UserError(f"drop_old_tool_returns needs keep_last >= 0, got {keep_last}")

    def drop(messages: list[ModelMessage]) -> list[ModelMessage]:
        requests = [i for i, m in enumerate(messages) if isinstance(m, ModelRequest)]
        recent = set(requests[-keep_last:]) if keep_last else set()
        out: list[ModelMessage] = []
        for index, message in enumerate(messages):
            if not isinstance(message, ModelRequest) or index in recent:
                out.append(message)
                continue
            parts = [
                part.model_copy(update={"content": placeholder or _dropped(part), "metadata": {}})
                if isinstance(part, ToolReturnPart) and not _is_dropped(part)
                else part
                for part in message.parts
            ]
            out.append(message.model_copy(update={"parts": parts}))
        return out

    drop.__name__ = f"drop_old_tool_returns({keep_last})"
    return drop


_DROPPED = "[tool result dropped from the history: "


def _dropped(part: ToolReturnPart) -> str:
    return f"{_DROPPED}{len(str(part.content))} characters]"


def _is_dropped(part: ToolReturnPart) -> bool:
    return isinstance(part.content, str) and part.content.startswith(_DROPPED)


def apply_history_processors(
    processors: Sequence[HistoryProcessor], messages: list[ModelMessage]
) -> list[ModelMessage]:
    """The messages after every processor, checked: non-empty, and no tool return
    whose call was dropped."""
    for processor in processors:
        processed = processor(list(messages))
        _check(processor, processed)
        messages = processed
    return messages


def _check(processor: HistoryProcessor, messages: list[ModelMessage]) -> None:
    name = getattr(processor, "__name__", repr(processor))
    if not messages:
        raise UserError(f"history processor {name} returned no messages; keep at least one")
    calls: set[str] = set()
    for message in messages:
        if isinstance(message, ModelResponse):
            calls.update(p.id for p in message.parts if isinstance(p, ToolCallPart))
            continue
        for part in message.parts:
            if not isinstance(part, ToolReturnPart | RetryPromptPart):
                continue
            if part.tool_call_id and part.tool_call_id not in calls:
                raise UserError(
                    f"history processor {name} kept the return of tool call "
                    f"{part.tool_call_id!r} but dropped the call; keep tool calls and their "
                    "returns together (start a kept tail at a model response)"
                )
