"""Scripted models for tests, examples and benchmarks. No network."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ..contract.errors import UnexpectedModelBehavior
from ..contract.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    UserPromptPart,
)
from ..contract.usage import Usage
from .base import DeltaSink, Model, ModelDelta, ModelRequestParameters

__all__ = ["TestModel"]


def _new_input_words(messages: Sequence[ModelMessage]) -> int:
    """Words sent since the last response: a cheap, deterministic stand-in for token counts."""
    count = 0
    for message in reversed(messages):
        if message.kind == "response":
            break
        if isinstance(message, ModelRequest):
            for part in message.parts:
                text = (
                    part.text
                    if isinstance(part, UserPromptPart)
                    else str(getattr(part, "content", ""))
                )
                count += len(text.split())
    return count


class TestModel(Model):
    """Answers from a script.

    The script position is the number of responses already in the conversation, so the
    model keeps no state of its own: a run resumed in another process (or activity worker)
    gets the same next response. It never calls tools unless a scripted response does.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        *,
        text: str | None = None,
        responses: Sequence[ModelResponse] | None = None,
        name: str = "test",
    ) -> None:
        if (text is None) == (responses is None):
            raise ValueError("TestModel needs exactly one of text= or responses=")
        self._text = text
        self._responses = list(responses or [])
        self._name = name
        self.request_count = 0
        self._count_cache: tuple[object, int, int] = (None, 0, 0)
        """How many requests this instance served (for tests that count model calls)."""
        self._chunk: int | None = None
        self._delay = 0.0

    def _responses_in(self, messages: list[ModelMessage]) -> int:
        """Counts responses, incrementally when the loop hands over the same growing list."""
        last, seen, count = self._count_cache
        if seen == 0 or seen > len(messages) or messages[seen - 1] is not last:
            seen, count = 0, 0
        count += sum(1 for m in messages[seen:] if m.kind == "response")
        self._count_cache = (messages[-1] if messages else None, len(messages), count)
        return count

    @classmethod
    def with_text(cls, text: str) -> TestModel:
        return cls(text=text)

    @classmethod
    def with_responses(cls, responses: Sequence[ModelResponse]) -> TestModel:
        return cls(responses=responses)

    def streamed(self, chunk: int = 4, delay: float = 0.0) -> TestModel:
        """A copy that streams (`streams` is True): `request_stream` hands each text and
        thinking part over in `chunk`-character deltas, `delay` seconds apart, then returns
        the same response `request` would. Plain `TestModel`s do not stream, so runs that do
        not ask for it behave as before."""
        if chunk < 1:
            raise ValueError(f"chunk must be at least 1 character, got {chunk}")
        copy = TestModel(
            text=self._text,
            responses=None if self._text is not None else self._responses,
            name=self._name,
        )
        copy._chunk = chunk
        copy._delay = delay
        return copy

    @property
    def model_name(self) -> str:
        return self._name

    @property
    def streams(self) -> bool:
        return self._chunk is not None

    async def request_stream(
        self, messages: list[ModelMessage], params: ModelRequestParameters, on_delta: DeltaSink
    ) -> ModelResponse:
        response = await self.request(messages, params)
        chunk = self._chunk
        if chunk is None:
            return response
        for part in response.parts:
            if not isinstance(part, TextPart | ThinkingPart):
                continue
            kind = "thinking" if isinstance(part, ThinkingPart) else "text"
            for start in range(0, len(part.text), chunk):
                if self._delay:
                    await asyncio.sleep(self._delay)
                on_delta(ModelDelta(kind=kind, text=part.text[start : start + chunk]))
        return response

    async def request(
        self, messages: list[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        self.request_count += 1
        position = self._responses_in(messages)
        if self._text is not None:
            parts: list[TextPart | ToolCallPart] = [TextPart(text=self._text)]
        else:
            if position >= len(self._responses):
                raise UnexpectedModelBehavior(
                    f"TestModel script exhausted: request {position + 1} asked for, but only "
                    f"{len(self._responses)} response(s) were scripted; add responses to "
                    "TestModel.with_responses([...])"
                )
            scripted = self._responses[position]
            parts = []
            for index, part in enumerate(scripted.parts):
                if isinstance(part, ToolCallPart) and not part.id:
                    part = part.model_copy(update={"id": f"call_{position}_{index}"})
                parts.append(part)  # type: ignore[arg-type]
        response_words = sum(len(p.text.split()) if isinstance(p, TextPart) else 1 for p in parts)
        input_words = _new_input_words(messages)
        return ModelResponse(
            parts=parts,
            model_name=self._name,
            usage=Usage(
                requests=1,
                input_tokens=input_words,
                output_tokens=response_words,
                total_tokens=input_words + response_words,
            ),
        )
