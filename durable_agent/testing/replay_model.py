"""`ReplayModel`: a model that answers with the responses a recorded run got, in order.

    model = await ReplayModel.from_run(client, "agent-support-1a2b3c4d")
    changed = AgentBuilder(model).name("support").tool(new_lookup).build()
    result = await changed.run("the customer's question")   # no provider is called

A production run that went wrong becomes a regression test: the changed agent re-runs it
offline, each model request answered with what the provider answered then (usage and cost
included), and the test checks what the new code did with it.

Which response comes next is read off the conversation, as `TestModel` does, so the model
holds no state and works on any worker, after retries and across continue-as-new: the
conversation's last response is found in the recording and the one after it answers (the
first when the conversation holds no recorded response yet). Asked for more than the
recording holds, it raises `ReplayDivergence` naming the step. With `strict=True` it also
raises when the request differs from the recorded one in what the replay can check: the
tool results sent (their call ids, and their content where the history holds it) and the
tools offered (every tool the recorded response calls must be offered).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from temporalio.client import Client
from temporalio.converter import DataConverter

from ..contract.errors import UnexpectedModelBehavior
from ..contract.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    ToolReturnPart,
)
from ..models.base import Model, ModelRequestParameters
from ..temporal.client import AgentClient
from .histories import RunChain, fetch_chain
from .recording import UNKNOWN, RecordedStep, RecordedToolResult, recorded_steps

__all__ = ["ReplayDivergence", "ReplayModel"]


class ReplayDivergence(UnexpectedModelBehavior):
    """The agent asked what the recording cannot answer: more model requests than it
    holds, or (strict) a request that differs from the recorded one. `step` is the model
    request's step (1-based); never retried."""

    kind = "replay_divergence"

    def __init__(self, message: str, step: int) -> None:
        super().__init__(message)
        self.step = step


class ReplayModel(Model):
    """Answers model requests with the responses of a recorded run (see the module)."""

    def __init__(
        self,
        steps: Sequence[RecordedStep | ModelResponse],
        *,
        strict: bool = False,
        source: str = "recording",
    ) -> None:
        self.steps = [
            s if isinstance(s, RecordedStep) else RecordedStep(i + 1, s)
            for i, s in enumerate(steps)
        ]
        self.strict = strict
        self.source = source
        self.request_count = 0
        """How many requests this instance answered (for tests that count them)."""

    @classmethod
    async def from_run(
        cls,
        client: Client | AgentClient,
        workflow_id: str,
        *,
        run_id: str | None = None,
        strict: bool = False,
    ) -> ReplayModel:
        """The responses of `workflow_id`'s whole chain (up to `run_id`, default its latest
        run), read through the client's data converter: its codec decrypts, its external
        storage fetches what was stored outside history."""
        temporal = client.client if isinstance(client, AgentClient) else client
        histories = await fetch_chain(temporal, workflow_id, run_id)
        steps = await recorded_steps(histories, temporal.data_converter)
        return cls(steps, strict=strict, source=f"run {workflow_id!r}")

    @classmethod
    async def from_history_async(
        cls,
        source: str | os.PathLike[str] | Mapping[str, Any],
        *,
        strict: bool = False,
        data_converter: DataConverter | None = None,
    ) -> ReplayModel:
        """`from_history` from a running event loop."""
        chain = RunChain.read(source)
        steps = await recorded_steps(chain.histories, data_converter)
        return cls(steps, strict=strict, source=f"history {chain.workflow_id!r}")

    @classmethod
    def from_history(
        cls,
        source: str | os.PathLike[str] | Mapping[str, Any],
        *,
        strict: bool = False,
        data_converter: DataConverter | None = None,
    ) -> ReplayModel:
        """The responses of an exported file (`durable-agent export`), a plain history's
        JSON, or either's text or dict; `HistoryFileError` for anything else. The file's
        payloads are plain (export decodes them); `data_converter` reads a history whose
        payloads are still encoded."""
        import asyncio
        import concurrent.futures

        def read() -> ReplayModel:
            return asyncio.run(
                cls.from_history_async(source, strict=strict, data_converter=data_converter)
            )

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return read()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a loop runs here already
            return pool.submit(read).result()

    @property
    def model_name(self) -> str:
        return "replay"

    @property
    def responses(self) -> list[ModelResponse]:
        return [step.response for step in self.steps]

    async def request(
        self, messages: list[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        index = self._position(messages)
        if index >= len(self.steps):
            step = self.steps[-1].step + index - len(self.steps) + 1 if self.steps else index + 1
            raise ReplayDivergence(
                f"the agent asked for model request {index + 1} (step {step}), but the "
                f"{self.source} recorded {len(self.steps)}",
                step,
            )
        recorded = self.steps[index]
        if self.strict:
            self._check(recorded, messages, params)
        self.request_count += 1
        return recorded.response.model_copy(
            update={"run_id": None, "conversation_id": None, "timestamp": None}
        )

    def _position(self, messages: list[ModelMessage]) -> int:
        """The index of the response to give: the one after the conversation's last
        recorded response (the candidate whose earlier responses match the most)."""
        seen = [_shape(m) for m in messages if isinstance(m, ModelResponse)]
        if not seen:
            return 0
        recorded = [_shape(step.response) for step in self.steps]
        best, best_length = None, -1
        for index, shape in enumerate(recorded):
            if shape != seen[-1]:
                continue
            length = 0
            while (
                length < len(seen)
                and length <= index
                and recorded[index - length] == seen[len(seen) - 1 - length]
            ):
                length += 1
            if length > best_length:
                best, best_length = index, length
        return 0 if best is None else best + 1

    def _check(
        self, recorded: RecordedStep, messages: list[ModelMessage], params: ModelRequestParameters
    ) -> None:
        offered = {tool.name for tool in params.function_tools}
        if params.output_tool is not None:
            offered.add(params.output_tool.name)
        for call in recorded.response.tool_calls:
            if call.name not in offered:
                raise ReplayDivergence(
                    f"step {recorded.step}: the recorded response calls tool {call.name!r}, "
                    f"which the agent no longer offers (it offers: "
                    f"{', '.join(sorted(offered)) or 'no tools'})",
                    recorded.step,
                )
        if recorded.tool_results is None:
            return
        sent = _results_sent(messages)
        expected = recorded.tool_results
        if [r.tool_call_id for r in sent] != [r.tool_call_id for r in expected] or any(
            _differs(e, s) for e, s in zip(expected, sent, strict=True)
        ):
            raise ReplayDivergence(
                f"step {recorded.step}: the tool results sent differ from the recording "
                f"(recorded: {_describe(expected)}; sent: {_describe(sent)})",
                recorded.step,
            )


def _shape(response: ModelResponse) -> str:
    return json.dumps([part.model_dump(mode="json") for part in response.parts], sort_keys=True)


def _results_sent(messages: list[ModelMessage]) -> list[RecordedToolResult]:
    """The tool returns and retry prompts after the conversation's last response."""
    sent: list[RecordedToolResult] = []
    for message in reversed(messages):
        if isinstance(message, ModelResponse):
            break
        if not isinstance(message, ModelRequest):
            continue
        parts = []
        for part in message.parts:
            if isinstance(part, ToolReturnPart):
                parts.append(RecordedToolResult(part.tool_call_id, part.name, part.content))
            elif isinstance(part, RetryPromptPart):
                parts.append(
                    RecordedToolResult(str(part.tool_call_id), part.tool_name, part.content)
                )
        sent[:0] = parts
    return sent


def _differs(expected: RecordedToolResult, sent: RecordedToolResult) -> bool:
    if expected.name is not None and sent.name is not None and expected.name != sent.name:
        return True
    if expected.content is UNKNOWN:
        return False
    return _canonical(expected.content) != _canonical(sent.content)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _describe(results: list[RecordedToolResult]) -> str:
    if not results:
        return "none"
    shown = []
    for result in results:
        content = "?" if result.content is UNKNOWN else _canonical(result.content)
        if len(content) > 60:
            content = content[:57] + "..."
        shown.append(f"{result.name or '?'}[{result.tool_call_id}]={content}")
    return ", ".join(shown)
