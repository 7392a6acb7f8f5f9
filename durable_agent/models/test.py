"""Scripted models for tests, examples and benchmarks. No network."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import UnexpectedModelBehavior
from ..messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from ..usage import Usage
from .base import Model, ModelRequestParameters

__all__ = ["TestModel"]


def _words(messages: Sequence[ModelMessage]) -> int:
    count = 0
    for message in messages:
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
        """How many requests this instance served (for tests that count model calls)."""

    @classmethod
    def with_text(cls, text: str) -> TestModel:
        return cls(text=text)

    @classmethod
    def with_responses(cls, responses: Sequence[ModelResponse]) -> TestModel:
        return cls(responses=responses)

    @property
    def model_name(self) -> str:
        return self._name

    async def request(
        self, messages: list[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        self.request_count += 1
        position = sum(1 for m in messages if isinstance(m, ModelResponse))
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
        input_words = _words(messages)
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
