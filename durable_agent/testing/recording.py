"""What a run's history records of its model: each response, in order, with the step it
answered and the tool results the request sent.

A response is the result of a completed `model_request` activity, written packed
(`durable_agent.temporal.compaction.format`: no stamps, no zero usage counters) and read
here as the workflow reads it: decoded as a `ModelResponse` through the client's data
converter (its codec and external storage), stamps left for the loop that replays it to
set. The tool results a request sent are the tool returns and retry prompts among the
request's new messages; a tool return is packed as the id of its call (`{"cached": id}`),
resolved from that call's `tool_call` activity result where the history has one (a call
denied by a person returns from workflow code: its id is known, its content not).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter

from ..contract.messages import ModelResponse
from ..temporal.compaction.format import unpack_tool_outcome
from ..temporal.plugin import data_converter

__all__ = ["RecordedStep", "RecordedToolResult", "recorded_steps"]

UNKNOWN: Any = object()
"""A tool result whose content the history does not hold."""


@dataclass(frozen=True)
class RecordedToolResult:
    """A tool result a recorded request sent: its call's id, and its tool's name and
    content where the history holds them."""

    tool_call_id: str
    name: str | None = None
    content: Any = UNKNOWN


@dataclass
class RecordedStep:
    """One model request of the recorded run: the step it answered (1-based, as the
    activity's summary `model_request · step N` names it), the response, and the tool
    results it sent (None where the request's shape does not tell them)."""

    step: int
    response: ModelResponse
    tool_results: list[RecordedToolResult] | None = field(default=None)


async def recorded_steps(
    histories: Sequence[WorkflowHistory], converter: DataConverter | None = None
) -> list[RecordedStep]:
    """Every model response of the chain, oldest first (see the module docstring)."""
    converter = converter or data_converter()
    steps: list[RecordedStep] = []
    for history in histories:
        steps += await _steps_of(history, converter)
    return steps


async def _value(converter: DataConverter, payloads: Sequence[Payload]) -> Any:
    if not payloads:
        return None
    [value] = await converter.decode(list(payloads)[:1])
    return value


async def _steps_of(history: WorkflowHistory, converter: DataConverter) -> list[RecordedStep]:
    scheduled: dict[int, tuple[str, Any]] = {}
    returns: dict[str, RecordedToolResult] = {}
    steps: list[RecordedStep] = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            name = attributes.activity_type.name
            if name in ("model_request", "tool_call"):
                scheduled[event.event_id] = (name, attributes.input.payloads)
            continue
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            continue
        completed = event.activity_task_completed_event_attributes
        found = scheduled.get(completed.scheduled_event_id)
        if found is None:
            continue
        name, inputs = found
        activity_input = await _value(converter, inputs)
        result = await _value(converter, completed.result.payloads)
        if name == "tool_call":
            recorded = _tool_result(activity_input, result)
            if recorded is not None:
                returns[recorded.tool_call_id] = recorded
            continue
        response = ModelResponse.model_validate(result)
        steps.append(
            RecordedStep(
                step=_step(activity_input) + 1,
                response=response,
                tool_results=_sent(activity_input, returns),
            )
        )
    return steps


def _step(activity_input: Any) -> int:
    if not isinstance(activity_input, dict):
        return 0
    whole = activity_input.get("input")
    if isinstance(whole, dict):  # requests of release 0.2 and before
        return int(whole.get("run_step") or 0)
    return int(activity_input.get("run_step") or 0)


def _tool_result(activity_input: Any, result: Any) -> RecordedToolResult | None:
    call = (activity_input or {}).get("input", {}).get("call", {})
    call_id, name = call.get("id"), call.get("name")
    if not isinstance(call_id, str) or not isinstance(name, str):
        return None
    outcome = unpack_tool_outcome(result, call_id, name)
    tool_return = getattr(outcome, "tool_return", None)
    if tool_return is None:
        return RecordedToolResult(call_id, name)
    return RecordedToolResult(call_id, name, tool_return.content)


def _sent(
    activity_input: Any, returns: dict[str, RecordedToolResult]
) -> list[RecordedToolResult] | None:
    """The tool results among the request's new messages (None for a request of an
    earlier release, which sent its messages whole)."""
    if not isinstance(activity_input, dict) or "input" in activity_input:
        return None
    sent: list[RecordedToolResult] = []
    for message in activity_input.get("messages") or []:
        if not isinstance(message, dict) or message.get("kind") != "request":
            continue
        for part in message.get("parts") or []:
            if not isinstance(part, dict):
                continue
            if "cached" in part:
                call_id = str(part["cached"])
                sent.append(returns.get(call_id, RecordedToolResult(call_id)))
            elif part.get("kind") in ("tool_return", "retry_prompt"):
                name = part.get("name") or part.get("tool_name")
                sent.append(
                    RecordedToolResult(str(part.get("tool_call_id")), name, part.get("content"))
                )
    return sent
