"""Models named in one string, as configuration and environment variables name them:
`anthropic:claude-sonnet-4-5`, `openai-responses:gpt-5`, `openai:gpt-4o-mini` (chat
completions), and a fallback chain as a comma-separated list of them."""

from __future__ import annotations

from ..contract.errors import UserError
from .base import Model
from .fallback import FallbackModel
from .providers import PROVIDERS, provider_class

__all__ = ["PROVIDER_PREFIXES", "model_from_name"]

PROVIDER_PREFIXES = tuple(PROVIDERS)
"""What may stand before the colon (the keys of `providers.PROVIDERS`, as it was when this
module was imported): `openai` and `openai-chat` are chat completions."""


def model_from_name(name: str, *, stream: bool = False) -> Model:
    """`PROVIDER:MODEL` as a model (`AnthropicModel`, `OpenAIChatModel` or
    `OpenAIResponsesModel`, or the class any other row of `providers.PROVIDERS` names; keys
    and base URLs from their usual environment variables); several, comma-separated, as a
    `FallbackModel` in that order. `stream` makes each a streaming model."""
    specs = [spec.strip() for spec in name.split(",") if spec.strip()]
    if not specs:
        raise UserError("no model named: give PROVIDER:MODEL, e.g. anthropic:claude-sonnet-4-5")
    models = [_one(spec, stream) for spec in specs]
    return models[0] if len(models) == 1 else FallbackModel(*models)


def _one(spec: str, stream: bool) -> Model:
    provider, _, model = spec.partition(":")
    if not model or provider not in PROVIDERS:
        raise UserError(
            f"model {spec!r} is not PROVIDER:MODEL with PROVIDER one of "
            f"{', '.join(PROVIDERS)} (e.g. anthropic:claude-sonnet-4-5, "
            "openai-responses:gpt-5, openai:gpt-4o-mini)"
        )
    return provider_class(provider)(model, stream=stream)
