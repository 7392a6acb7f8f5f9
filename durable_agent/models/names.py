"""Models named in one string, as configuration and environment variables name them:
`anthropic:claude-sonnet-4-5`, `openai-responses:gpt-5`, `openai:gpt-4o-mini` (chat
completions), and a fallback chain as a comma-separated list of them."""

from __future__ import annotations

from ..contract.errors import UserError
from .base import Model
from .fallback import FallbackModel

__all__ = ["PROVIDER_PREFIXES", "model_from_name"]

PROVIDER_PREFIXES = ("anthropic", "openai", "openai-chat", "openai-responses")
"""What may stand before the colon: `openai` and `openai-chat` are chat completions."""


def model_from_name(name: str, *, stream: bool = False) -> Model:
    """`PROVIDER:MODEL` as a model (`AnthropicModel`, `OpenAIChatModel` or
    `OpenAIResponsesModel`, keys and base URLs from their usual environment variables);
    several, comma-separated, as a `FallbackModel` in that order. `stream` makes each a
    streaming model."""
    specs = [spec.strip() for spec in name.split(",") if spec.strip()]
    if not specs:
        raise UserError("no model named: give PROVIDER:MODEL, e.g. anthropic:claude-sonnet-4-5")
    models = [_one(spec, stream) for spec in specs]
    return models[0] if len(models) == 1 else FallbackModel(*models)


def _one(spec: str, stream: bool) -> Model:
    provider, _, model = spec.partition(":")
    if not model or provider not in PROVIDER_PREFIXES:
        raise UserError(
            f"model {spec!r} is not PROVIDER:MODEL with PROVIDER one of "
            f"{', '.join(PROVIDER_PREFIXES)} (e.g. anthropic:claude-sonnet-4-5, "
            "openai-responses:gpt-5, openai:gpt-4o-mini)"
        )
    if provider == "anthropic":
        from .anthropic import AnthropicModel

        return AnthropicModel(model, stream=stream)
    if provider == "openai-responses":
        from .openai import OpenAIResponsesModel

        return OpenAIResponsesModel(model, stream=stream)
    from .openai import OpenAIChatModel

    return OpenAIChatModel(model, stream=stream)
