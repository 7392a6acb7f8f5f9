"""OpenAI's APIs through the official `openai` SDK (the `openai` extra):
`OpenAIChatModel` (chat completions, and every server that speaks them) and
`OpenAIResponsesModel` (the Responses API, where OpenAI's reasoning models keep their
reasoning between turns)."""

from __future__ import annotations

from .._common import FIX_ERRORS, NO_KEY_PLACEHOLDER, parse_retry_after
from .chat import OpenAIChatModel, map_messages
from .responses import OpenAIResponsesModel

__all__ = [
    "FIX_ERRORS",
    "NO_KEY_PLACEHOLDER",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "map_messages",
    "parse_retry_after",
]
