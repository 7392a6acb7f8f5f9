"""Shared test doubles: executors that record or suspend, and small scripted agents."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from durable_agent import (
    AgentCheckpoint,
    AgentExecutionNode,
    Continue,
    ModelResponse,
    Suspend,
    TextPart,
    ToolCallPart,
)


class RecordingExecutor:
    """Continues everywhere and keeps every checkpoint it was shown."""

    def __init__(self) -> None:
        self.checkpoints: list[AgentCheckpoint] = []

    async def checkpoint(self, checkpoint: AgentCheckpoint) -> Continue | Suspend:
        self.checkpoints.append(checkpoint)
        return Continue()

    @property
    def nodes(self) -> list[str]:
        return [c.node.value for c in self.checkpoints]


class SuspendOnce(RecordingExecutor):
    """Suspends at the n-th checkpoint (0-based), then continues."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index

    async def checkpoint(self, checkpoint: AgentCheckpoint) -> Continue | Suspend:
        position = len(self.checkpoints)
        self.checkpoints.append(checkpoint)
        if position == self.index:
            return Suspend(reason=f"test suspend at {checkpoint.node.value}")
        return Continue()


class SuspendAtNodes(RecordingExecutor):
    def __init__(self, nodes: Sequence[AgentExecutionNode]) -> None:
        super().__init__()
        self.suspend_nodes = set(nodes)

    async def checkpoint(self, checkpoint: AgentCheckpoint) -> Continue | Suspend:
        self.checkpoints.append(checkpoint)
        if checkpoint.node in self.suspend_nodes:
            return Suspend(reason="asked")
        return Continue()


def call(name: str, call_id: str, /, **arguments: Any) -> ToolCallPart:
    return ToolCallPart(id=call_id, name=name, arguments=arguments)


def tool_response(*calls: ToolCallPart) -> ModelResponse:
    return ModelResponse(parts=list(calls))


def text_response(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text=text)])


class CallLog:
    """Counts tool invocations so tests can prove nothing ran twice."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def record(self, name: str, **arguments: Any) -> None:
        self.calls.append((name, arguments))

    @property
    def counts(self) -> Counter[str]:
        return Counter(name for name, _ in self.calls)


def normalized(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """Messages without run-specific ids, timestamps and timings, for comparing two runs."""
    out = []
    for message in messages:
        data = message.model_dump(mode="json")
        for key in ("run_id", "conversation_id", "timestamp"):
            data.pop(key, None)
        for part in data.get("parts", []):
            part.pop("metadata", None)
        out.append(data)
    return out
