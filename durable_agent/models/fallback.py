"""`FallbackModel`: the next model answers when one fails with a retryable error.

In-process the chain is tried in order within one request. On Temporal each member is a
`model_request` activity of its own, with its own retry policy: the workflow moves to the
next member only once a member's activity has failed for good with an error a retry could
have fixed (429, 5xx, a lost connection, a timeout), so every attempt is in history and a
model that answered is never asked again. The activity pins its member (`pinned`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Iterator

import structlog

from ..contract.errors import AgentError, UserError
from ..contract.messages import ModelMessage, ModelResponse
from .base import DeltaSink, Model, ModelRequestParameters, OutputMode

__all__ = ["FALLBACK_INDEX", "FallbackModel", "model_label"]

FALLBACK_INDEX = "fallback_index"
"""`ModelResponse.metadata` key: which member of the chain answered (0 for the first)."""

log = structlog.get_logger("durable_agent.models.fallback")

_pinned: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "durable_agent_fallback_pinned", default=None
)


def model_label(model: Model) -> str:
    """`provider:model`, as prices and quotas key a model (the name alone without one)."""
    return f"{model.provider}:{model.model_name}" if model.provider else model.model_name


class FallbackModel(Model):
    """`FallbackModel(first, *others)`: `first` answers unless it fails with a retryable
    error (`ModelHTTPError` of a 429, a 5xx, Anthropic's 529, a lost connection); then the
    next one is asked, and so on. An error no retry can fix (a 400, a bad key) is raised at
    once: another model would not fix the request. The response says who answered: its
    `model_name` and `provider_name` are the member's, and `metadata["fallback_index"]` its
    place in the chain. The output mode is the first model's; each provider honours it."""

    def __init__(self, first: Model, *others: Model) -> None:
        models = (first, *others)
        for model in models:
            if not isinstance(model, Model):
                raise UserError(f"FallbackModel takes models, got {type(model).__name__}")
            if isinstance(model, FallbackModel):
                raise UserError("FallbackModel members cannot be FallbackModels: list them")
        self.models: tuple[Model, ...] = models

    @property
    def model_name(self) -> str:
        return "fallback:" + ",".join(model.model_name for model in self.models)

    @property
    def provider(self) -> str | None:
        return self.models[0].provider

    @property
    def structured_output_mode(self) -> OutputMode:
        return self.models[0].structured_output_mode

    @property
    def streams(self) -> bool:
        return any(model.streams for model in self.models)

    def __repr__(self) -> str:
        return f"FallbackModel({', '.join(map(repr, self.models))})"

    @staticmethod
    def falls_back(error: BaseException) -> bool:
        """Whether the next model should answer after `error`: one a retry could fix."""
        return isinstance(error, AgentError) and error.retryable

    @staticmethod
    @contextlib.contextmanager
    def pinned(index: int) -> Iterator[None]:
        """Within this block (this task), a request of any `FallbackModel` asks only its
        member `index`, and raises that member's error: the Temporal activity of one member
        uses it, so the workflow decides when to move on."""
        token = _pinned.set(index)
        try:
            yield
        finally:
            _pinned.reset(token)

    def _members(self) -> list[tuple[int, Model]]:
        index = _pinned.get()
        if index is None:
            return list(enumerate(self.models))
        if not 0 <= index < len(self.models):
            raise UserError(
                f"{self.model_name} has {len(self.models)} models; there is none at {index}"
            )
        return [(index, self.models[index])]

    async def request(
        self, messages: list[ModelMessage], params: ModelRequestParameters
    ) -> ModelResponse:
        return await self.answer(lambda model: model.request(messages, params))

    async def request_stream(
        self, messages: list[ModelMessage], params: ModelRequestParameters, on_delta: DeltaSink
    ) -> ModelResponse:
        return await self.answer(
            lambda model: (
                model.request_stream(messages, params, on_delta)
                if model.streams
                else model.request(messages, params)
            )
        )

    async def answer(self, ask: Callable[[Model], Awaitable[ModelResponse]]) -> ModelResponse:
        """`ask(member)` along the chain (or of the pinned member) until one answers; the
        response says who did. Each member is asked by itself, so the engine's `chat` span
        and price of each attempt are that member's (`chat claude-sonnet-4-5`, then
        `chat gpt-5`), never the chain's name."""
        members = self._members()
        for position, (index, model) in enumerate(members):
            try:
                response = await ask(model)
            except Exception as error:
                if position + 1 == len(members) or not self.falls_back(error):
                    raise
                log.warning(
                    "model failed; the next one answers",
                    model=model.model_name,
                    provider=model.provider,
                    error=str(error),
                    next=members[position + 1][1].model_name,
                )
                continue
            return response.model_copy(
                update={
                    "provider_name": response.provider_name or model.provider,
                    "metadata": {**response.metadata, FALLBACK_INDEX: index},
                }
            )
        raise AssertionError("unreachable: a FallbackModel has at least one model")
