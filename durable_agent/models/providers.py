"""The model providers, in one table: adding a provider is its module and one row here.

A row maps what stands before the colon of a model's name (`anthropic:claude-sonnet-4-5`,
see `model_from_name`) to where its class lives: the module's absolute name and the class's.
The module is imported only when the class is first asked for (its SDK is an extra): by
`model_from_name`, and by `durable_agent.models.<ClassName>`. Everything else about a
provider its class answers itself: `Model.provider` (the class's own name for itself, e.g.
`openai` for both OpenAI classes) keys its prices, its quotas (`provider:model`) and its
spans' `gen_ai.provider.name`.

A provider class is built by name as `cls(model_name, stream=...)`, with its key and base URL
from its SDK's usual environment variables; the rest of its constructor is its own.
"""

from __future__ import annotations

import importlib
from typing import Protocol, cast

from .base import Model

__all__ = ["PROVIDERS", "ProviderClass", "class_names", "lazy_class", "provider_class"]

PROVIDERS: dict[str, tuple[str, str]] = {
    "anthropic": ("durable_agent.models.anthropic", "AnthropicModel"),
    "openai": ("durable_agent.models.openai", "OpenAIChatModel"),
    "openai-chat": ("durable_agent.models.openai", "OpenAIChatModel"),
    "openai-responses": ("durable_agent.models.openai", "OpenAIResponsesModel"),
}
"""Name prefix → (module, class). Several prefixes may name one class (`openai` and
`openai-chat` are both chat completions)."""


class ProviderClass(Protocol):
    """What a row's class must be: built from a model name (and whether it streams)."""

    def __call__(self, model_name: str, *, stream: bool = False) -> Model: ...


def provider_class(prefix: str) -> ProviderClass:
    """The class of the provider `prefix` names, imported now; `KeyError` for a prefix the
    table does not hold."""
    module, name = PROVIDERS[prefix]
    return cast(ProviderClass, getattr(importlib.import_module(module), name))


def class_names() -> list[str]:
    """The provider classes' names, once each, in table order: what `durable_agent.models`
    imports lazily."""
    return list(dict.fromkeys(name for _, name in PROVIDERS.values()))


def lazy_class(name: str) -> type[Model] | None:
    """The provider class called `name`, imported now; None when no row names it."""
    for module, class_name in PROVIDERS.values():
        if class_name == name:
            return cast(type[Model], getattr(importlib.import_module(module), name))
    return None
