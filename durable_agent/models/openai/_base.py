"""What both OpenAI models share: the client, and the SDK's errors turned into ours."""

from __future__ import annotations

import json
from typing import TypeVar

import openai
from openai import AsyncOpenAI, Omit, omit

from ...contract.errors import AgentError, ModelHTTPError, UnexpectedModelBehavior, UserError
from .._common import NO_KEY_PLACEHOLDER, SDKModel, status_error
from ..base import ModelSettings, OutputMode

__all__ = ["OpenAIBase", "given"]

_T = TypeVar("_T")


def given(value: _T | None) -> _T | Omit:
    """`None` in our settings means "use the server's default": leave the field out."""
    return omit if value is None else value


class OpenAIBase(SDKModel[AsyncOpenAI]):
    """An OpenAI model: the key from `OPENAI_API_KEY`, the server from `OPENAI_BASE_URL`
    (unless given), a client per event loop, and the SDK's errors as ours."""

    key_variable = "OPENAI_API_KEY"
    base_url_variable = "OPENAI_BASE_URL"
    what = "a response"
    """What a 200 answer should be, for the message when it is not."""

    def __init__(
        self,
        model_name: str,
        *,
        api_key: str | None,
        base_url: str | None,
        client: AsyncOpenAI | None,
        stream: bool,
        provider: str,
        settings: ModelSettings | None,
        structured_output: OutputMode,
    ) -> None:
        if structured_output not in ("json_schema", "tool"):
            raise UserError(
                f"structured_output must be 'json_schema' or 'tool', got {structured_output!r}"
            )
        self._structured_output: OutputMode = structured_output
        super().__init__(
            model_name,
            api_key=api_key,
            base_url=base_url,
            client=client,
            stream=stream,
            provider=provider,
            settings=settings,
        )

    @property
    def structured_output_mode(self) -> OutputMode:
        return self._structured_output

    def client(self) -> AsyncOpenAI:
        """The SDK client: the caller's, or built on first use from this process's
        environment (per event loop)."""

        def build(api_key: str | None, base_url: str | None) -> AsyncOpenAI:
            if api_key is None and base_url is None:
                raise self._no_key()
            return AsyncOpenAI(
                api_key=api_key or NO_KEY_PLACEHOLDER, base_url=base_url, max_retries=0
            )

        return self._client_for_loop(build)

    def _error(self, error: Exception) -> AgentError | None:
        """One of the SDK's errors (or a body that is not JSON) as ours; None for others."""
        if isinstance(error, openai.APIStatusError):
            return self._openai_status_error(error)
        if isinstance(error, openai.APIConnectionError):
            return self._connection_error(error)
        if isinstance(error, openai.APIResponseValidationError | json.JSONDecodeError):
            return UnexpectedModelBehavior(
                f"{self._model_name}: the server answered 200 with a body that is not "
                f"{self.what}: {error}"
            )
        if isinstance(error, openai.APIError):
            # An `error` event in the stream: the server gave up mid-answer; ask again.
            return ModelHTTPError(
                f"the stream ended with an error: {error.message}",
                status_code=None,
                model_name=self._model_name,
            )
        return None

    def _openai_status_error(self, error: openai.APIStatusError) -> ModelHTTPError:
        body = error.body
        message = error.message
        if isinstance(body, dict) and isinstance(body.get("message"), str):
            message = body["message"]
        headers = error.response.headers
        # OpenAI's explicit hint overrides the status-based guess, as the SDK itself does.
        should_retry = (headers.get("x-should-retry") or "").strip().lower()
        return status_error(
            self._model_name,
            error.status_code,
            message,
            key_variable=self.key_variable,
            body=body,
            headers=headers,
            retryable=should_retry == "true" if should_retry in ("true", "false") else None,
        )
