"""A wrong key or an unknown model reads the same on every provider (issue 38, item 13): the
server's text, then the HTTP status and the fix, from one rule (`models._common.status_error`),
against local servers speaking each provider's real wire protocol."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from durable_agent import ModelHTTPError, ModelRequest, ModelRequestParameters, UserPromptPart
from durable_agent.models import AnthropicModel, OpenAIChatModel, OpenAIResponsesModel
from durable_agent.models.base import Model
from tests.support.anthropic_server import AnthropicErrorReply, FakeAnthropicServer
from tests.support.openai_server import FakeOpenAIServer
from tests.support.responses_server import FakeResponsesServer, ResponsesErrorReply

WRONG_KEY = "sk-wrong-7c2e91"
NO_PARAMS = ModelRequestParameters()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


Make = Callable[[str, str | None], tuple[Model, Any]]
"""(model name, api key or None for the server's own) -> the model and its server."""


@pytest.fixture(params=["chat", "responses", "anthropic"])
def provider(request: pytest.FixtureRequest) -> Iterator[tuple[str, Make]]:
    """Each provider's model against its own local server, which knows one model (`known`)."""
    kind = request.param
    if kind == "chat":
        chat = FakeOpenAIServer(api_key="sk-good", models=["known"]).start()

        def make(name: str, key: str | None) -> tuple[Model, Any]:
            model = OpenAIChatModel(name, base_url=chat.base_url, api_key=key or "sk-good")
            return model, chat

        yield "OPENAI_API_KEY", make
        chat.close()
    elif kind == "responses":
        responses = FakeResponsesServer(api_key="sk-good").start()

        def make(name: str, key: str | None) -> tuple[Model, Any]:
            if name != "known":  # the fake answers any model: script the API's own 404
                responses.enqueue(
                    ResponsesErrorReply(
                        404,
                        f"The model '{name}' does not exist",
                        code="model_not_found",
                    )
                )
            model = OpenAIResponsesModel(
                name, base_url=responses.base_url, api_key=key or "sk-good"
            )
            return model, responses

        yield "OPENAI_API_KEY", make
        responses.close()
    else:
        anthropic = FakeAnthropicServer(api_key="sk-good").start()

        def make(name: str, key: str | None) -> tuple[Model, Any]:
            if name != "known":
                anthropic.enqueue(AnthropicErrorReply.not_found(name))
            model = AnthropicModel(name, base_url=anthropic.base_url, api_key=key or "sk-good")
            return model, anthropic

        yield "ANTHROPIC_API_KEY", make
        anthropic.close()


def hi() -> list[Any]:
    return [ModelRequest(parts=[UserPromptPart(content="hi")])]


async def test_a_wrong_key_says_401_and_which_variable_to_set(provider: tuple[str, Make]) -> None:
    variable, make = provider
    model, _ = make("known", WRONG_KEY)
    with pytest.raises(ModelHTTPError) as caught:
        await model.request(hi(), NO_PARAMS)
    error = caught.value
    assert error.status_code == 401
    assert not error.retryable
    assert "HTTP 401" in error.message
    assert f"the API key was refused: set a valid {variable}" in error.message
    assert WRONG_KEY not in error.message


async def test_an_unknown_model_says_404_and_names_the_model(provider: tuple[str, Make]) -> None:
    _, make = provider
    model, _ = make("gpt-nope", None)
    with pytest.raises(ModelHTTPError) as caught:
        await model.request(hi(), NO_PARAMS)
    error = caught.value
    assert error.status_code == 404
    assert not error.retryable
    assert "gpt-nope" in error.message.partition(" (HTTP")[0]  # the server's own text first
    assert "(HTTP 404: check the model name 'gpt-nope' and the base_url)" in error.message
