"""What the providers on official SDKs share, with no SDK imported: settings, retry
headers, error messages that name the fix, the conversation read as turns, and the client
each model builds per event loop from its own process's environment.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import json
import math
import os
import re
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar
from urllib.parse import urlsplit, urlunsplit

from pydantic import ValidationError
from pydantic_core import to_json

from ..contract.errors import AgentError, ModelHTTPError, UnexpectedModelBehavior, UserError
from ..contract.messages import (
    InstructionPart,
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    ThinkingPart,
    ToolReturnPart,
    UserPromptPart,
)
from ..contract.tools import OUTPUT_TOOL_NAME
from .base import Model, ModelSettings

__all__ = [
    "FIX_ERRORS",
    "NO_KEY_PLACEHOLDER",
    "AssistantTurn",
    "SDKModel",
    "ToolAnswer",
    "UserTurn",
    "conversation",
    "json_text",
    "merge_settings",
    "own_thinking",
    "parse_arguments",
    "parse_retry_after",
    "redact_url",
    "retry_text",
    "safe_tool_id",
    "status_error",
    "tool_return_text",
]

FIX_ERRORS = "Fix the errors and try again."
"""Ends every retry prompt, so the model reads it as a correction and not as a new task."""

NO_KEY_PLACEHOLDER = "api-key-not-set"
"""Sent to a custom `base_url` when no key is configured: most local servers ignore it, and
the SDK refuses to build a client without some credential."""

UNANSWERED_OUTPUT_CALL = "Final result processed."
UNANSWERED_CALL = "This tool call was not run."


class SDKClient(Protocol):
    """What the official SDKs' clients share that `SDKModel` uses."""

    def with_options(self, *, max_retries: int) -> Any: ...


C = TypeVar("C", bound=SDKClient)
T = TypeVar("T")


def merge_settings(base: ModelSettings | None, override: ModelSettings | None) -> ModelSettings:
    """The agent's settings win field by field over the model's; `extra` is merged."""
    if base is None:
        return override or ModelSettings()
    if override is None:
        return base
    fields = {
        name: value
        for name in ModelSettings.model_fields
        if name != "extra" and (value := getattr(override, name)) is not None
    }
    return base.model_copy(update={**fields, "extra": {**base.extra, **override.extra}})


def redact_url(url: str | None) -> str | None:
    """Keeps a base URL readable in `repr()` without any user:password it may carry."""
    if not url:
        return url
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))


def json_text(value: Any) -> str:
    return value if isinstance(value, str) else to_json(value, fallback=str).decode()


def retry_text(content: str) -> str:
    return content if content.rstrip().endswith(FIX_ERRORS) else f"{content}\n\n{FIX_ERRORS}"


def tool_return_text(part: ToolReturnPart) -> str:
    text = json_text(part.content)
    if part.is_error:
        return f"{part.error_kind or 'error'}: {text}"
    return text


def parse_arguments(raw: str) -> Any:
    """A JSON object as a dict; anything else stays the raw string.

    Keeping bad JSON as the string lets the tool node's `arguments_dict()` fail on it, which
    sends the model a retry prompt with the parse error instead of failing the run.
    """
    if not raw.strip():
        return {}
    try:
        decoded = json.loads(raw)
    except json.JSONDecodeError:
        return raw
    return decoded if isinstance(decoded, dict) else raw


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    return value.strip() if value else None


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds the server asks us to wait: `retry-after-ms`, else `retry-after` (seconds or
    an HTTP date). `None` when absent or unreadable, so Temporal's own backoff applies."""
    millis = _header(headers, "retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return value
    seconds = _header(headers, "retry-after")
    if seconds is None:
        return None
    try:
        value = float(seconds)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(seconds)
        except (TypeError, ValueError):
            return None
        return max(when.timestamp() - (time.time() if now is None else now), 0.0)
    return value if math.isfinite(value) and value >= 0 else None


def status_error(
    model: str,
    status: int | None,
    message: str,
    *,
    key_variable: str,
    body: Any = None,
    headers: Mapping[str, str] | None = None,
    retryable: bool | None = None,
) -> ModelHTTPError:
    """The provider's error as ours. 408, 409, 429, 5xx (Anthropic's 529 "overloaded"
    included) are retryable (unless `retryable` says otherwise, as OpenAI's x-should-retry
    may) and keep the server's Retry-After and text; the other 4xx fail the run, so their
    message is all the user gets: the server's text, then the status and the fix it needs
    (`... (HTTP 401: the API key was refused: set a valid OPENAI_API_KEY ...)`). One rule
    for every provider, so a wrong key reads the same whichever model met it."""
    hint = {
        400: "the provider refused the request as invalid: fix what it names (model settings, "
        "tool schemas or the conversation) and run again",
        401: f"the API key was refused: set a valid {key_variable} in the environment of the "
        "process that runs model requests (the worker), or pass api_key=...",
        403: "the API key may not use this model or endpoint: check its permissions",
        404: f"check the model name {model!r} and the base_url",
        413: "the request is too large: shorten the conversation (a history processor) or "
        "the tool results",
    }.get(status or 0)
    error = ModelHTTPError(
        message,
        status_code=status,
        model_name=model,
        body=body,
        retry_after=parse_retry_after(headers) if headers is not None else None,
    )
    if retryable is not None:
        error.retryable = retryable
    if not error.retryable and status is not None:
        error.message = (
            f"{message} (HTTP {status}: {hint})" if hint else f"{message} (HTTP {status})"
        )
        error.args = (error.message,)
    return error


_TOOL_ID_INVALID = re.compile(r"[^a-zA-Z0-9_-]")


def safe_tool_id(call_id: str) -> str:
    """A tool call id in the `^[a-zA-Z0-9_-]+$` form some APIs insist on (Anthropic's):
    unchanged when it is already, else cleaned and made unique again by a short hash of
    the original, the same every time, so a call and its result keep matching."""
    if call_id and not _TOOL_ID_INVALID.search(call_id) and len(call_id) <= 64:
        return call_id
    digest = hashlib.sha256(call_id.encode()).hexdigest()[:8]
    return f"{_TOOL_ID_INVALID.sub('_', call_id)[:55]}_{digest}"


def own_thinking(part: ThinkingPart, provider: str) -> bool:
    """Thinking `provider`'s API can take back: its own, signed (a thinking block or an
    encrypted reasoning item). Another provider's thinking is not passed off as its own."""
    return part.provider_name == provider and bool(part.signature)


# -- the conversation as turns -----------------------------------------------------------------


@dataclass
class ToolAnswer:
    """What answers one tool call: its return, its retry prompt, or a note."""

    call_id: str
    name: str
    text: str
    is_error: bool = False


@dataclass
class UserTurn:
    """A request as a turn: the answers to the previous turn's calls (first, as the APIs
    require), then its other parts in order, each a system text or a user text."""

    answers: list[ToolAnswer] = field(default_factory=list)
    items: list[tuple[Literal["system", "user"], str]] = field(default_factory=list)

    @property
    def system(self) -> list[str]:
        return [text for role, text in self.items if role == "system"]

    @property
    def texts(self) -> list[str]:
        return [text for role, text in self.items if role == "user"]


@dataclass
class AssistantTurn:
    response: ModelResponse


def conversation(messages: Sequence[ModelMessage]) -> list[UserTurn | AssistantTurn]:
    """Our history as turns, each tool call answered exactly once.

    APIs with tool calls insist that the turn after a call answers it before anything
    else. Our requests are ordered for people (instructions, returns, prompt), so answers
    are moved to the front, and a call nothing answered (the output tool of a finished run,
    calls left behind by a final answer) is answered here: by the pending retry prompt
    when there is one, since it is about that very turn, otherwise by a short note.
    """
    turns: list[UserTurn | AssistantTurn] = []
    open_calls: dict[str, str] = {}

    def notes() -> list[ToolAnswer]:
        answers = [
            ToolAnswer(i, n, UNANSWERED_OUTPUT_CALL if n == OUTPUT_TOOL_NAME else UNANSWERED_CALL)
            for i, n in open_calls.items()
        ]
        open_calls.clear()
        return answers

    for message in messages:
        if isinstance(message, ModelResponse):
            if open_calls:
                turns.append(UserTurn(answers=notes()))
            turns.append(AssistantTurn(message))
            open_calls.update((c.id, c.name) for c in message.tool_calls)
            continue
        turn = UserTurn()
        loose: list[tuple[int, str]] = []  # (position in items, retry text)
        for part in message.parts:
            if isinstance(part, InstructionPart | SystemPromptPart):
                turn.items.append(("system", part.content))
            elif isinstance(part, UserPromptPart):
                turn.items.append(("user", part.text))
            elif isinstance(part, ToolReturnPart):
                text = tool_return_text(part)
                if open_calls.pop(part.tool_call_id, None) is not None:
                    turn.answers.append(
                        ToolAnswer(part.tool_call_id, part.name, text, part.is_error)
                    )
                else:  # answers no call the API knows of; keep the information anyway
                    turn.items.append(
                        ("user", f"Tool {part.name} (call {part.tool_call_id}) returned: {text}")
                    )
            elif isinstance(part, RetryPromptPart):
                call_id = part.tool_call_id
                if call_id is not None and call_id in open_calls:
                    name = open_calls.pop(call_id)
                    turn.answers.append(ToolAnswer(call_id, name, retry_text(part.content), True))
                else:
                    loose.append((len(turn.items), retry_text(part.content)))
                    turn.items.append(("user", retry_text(part.content)))
        if open_calls and loose:
            # The first loose retry prompt answers the calls it is about instead.
            position, text = loose[0]
            turn.answers.extend(ToolAnswer(i, n, text, True) for i, n in open_calls.items())
            open_calls.clear()
            del turn.items[position]
        turn.answers.extend(notes())
        turns.append(turn)
    return turns


# -- the SDK client --------------------------------------------------------------------------


class SDKModel(Model, Generic[C]):
    """A model on an official SDK. Only the model name and settings are configuration that
    travels; the key is read where the request is made (`key_variable` in that process's
    environment unless `api_key` was given), so a Temporal worker uses its own and the key
    never reaches workflow history, activity inputs, logs, `repr()` or a pickle. The SDK's
    own retries are off: under Temporal the activity retry policy owns retrying, and a
    second, hidden retry loop would multiply attempts and swallow the server's Retry-After.
    """

    key_variable = ""
    base_url_variable = ""

    def __init__(
        self,
        model_name: str,
        *,
        api_key: str | None,
        base_url: str | None,
        client: C | None,
        stream: bool,
        provider: str,
        settings: ModelSettings | None,
    ) -> None:
        kind = type(self).__name__
        if not model_name:
            raise UserError(f"{kind} needs a model name")
        if not provider:
            raise UserError(f"{kind}(provider=...) must name a provider")
        self._model_name = model_name
        self._api_key = api_key
        self._base_url = base_url
        self._stream = stream
        self._provider = provider
        self.settings = settings
        # A client of the caller's keeps its settings and connection pool, but never its
        # own retry loop, for the reason above.
        self._given_client: C | None = (
            client.with_options(max_retries=0) if client is not None else None
        )
        self._client: C | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def provider(self) -> str:
        return self._provider

    @property
    def streams(self) -> bool:
        return self._stream

    @property
    def base_url(self) -> str | None:
        return self._base_url or os.environ.get(self.base_url_variable) or None

    def _repr_fields(self) -> str:
        return (
            f"model_name={self._model_name!r}, base_url={redact_url(self._base_url)!r}, "
            f"settings={self.settings!r}" + (", stream=True" if self._stream else "")
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._repr_fields()})"

    def __getstate__(self) -> dict[str, Any]:
        """Pickles configuration only: the receiving process supplies its own key and client."""
        state = dict(self.__dict__)
        state.update(_api_key=None, _given_client=None, _client=None, _client_loop=None)
        return state

    def _client_for_loop(self, build: Callable[[str | None, str | None], C]) -> C:
        """The SDK client: the caller's, or one built on first use from this process's
        environment, per event loop (the HTTP connection pool belongs to the loop that opened
        it, and a model reused under a new loop, a second `asyncio.run`, must not touch it).
        `build(api_key, base_url)` makes it."""
        if self._given_client is not None:
            return self._given_client
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            api_key = self._api_key or os.environ.get(self.key_variable) or None
            self._client = build(api_key, self.base_url)
            self._client_loop = loop
        return self._client

    def _no_key(self) -> UserError:
        return UserError(
            f"{type(self).__name__}({self._model_name!r}) has no API key: set "
            f"{self.key_variable} in the environment of the process that runs model requests "
            f"(the worker), or pass api_key=...; for a server without keys set "
            f"{self.base_url_variable} or pass base_url=..."
        )

    def _error(self, error: Exception) -> AgentError | None:
        """One of the SDK's errors as ours; None for an error that is not the SDK's."""
        return None

    async def _guarded(self, call: Awaitable[T]) -> T:
        """Awaits one SDK call, its errors turned into ours."""
        try:
            return await call
        except Exception as error:
            if (mapped := self._error(error)) is not None:
                raise mapped from error
            raise

    async def _drain(self, events: AsyncIterable[Any], take: Callable[[Any], None]) -> None:
        """Hands every event of a stream to `take`: the SDK's errors (a transport error, an
        `error` event) raised as ours, a malformed event as `UnexpectedModelBehavior`."""
        try:
            async for event in events:
                take(event)
        except AgentError:
            raise
        except (AttributeError, TypeError, KeyError, ValidationError) as error:
            raise UnexpectedModelBehavior(
                f"{self._model_name}: a streamed event is malformed: {error}"
            ) from error
        except Exception as error:
            if (mapped := self._error(error)) is not None:
                raise mapped from error
            raise

    def _status_error(
        self, status: int | None, message: str, *, body: Any, headers: Mapping[str, str] | None
    ) -> ModelHTTPError:
        return status_error(
            self._model_name,
            status,
            message,
            key_variable=self.key_variable,
            body=body,
            headers=headers,
        )

    def _connection_error(self, error: BaseException) -> ModelHTTPError:
        """A lost or refused connection: retryable (`status_code` None)."""
        cause = error.__cause__
        detail = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        message = getattr(error, "message", None) or str(error) or type(error).__name__
        return ModelHTTPError(f"{message}{detail}", status_code=None, model_name=self._model_name)

    def _cut_off(self, what: str) -> ModelHTTPError:
        """A stream that ended before its last event (a proxy restarting, a dropped
        connection): retryable, so the activity's retry asks again."""
        return ModelHTTPError(
            f"the stream ended before {what}", status_code=None, model_name=self._model_name
        )
