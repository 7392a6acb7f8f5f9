"""Agents for the quota tests, on a chat-completions server the test runs
(`OPENAI_BASE_URL`): `quoted` answers in one request."""

from __future__ import annotations

from durable_agent import AgentBuilder
from durable_agent.models.openai import OpenAIChatModel

quoted = (
    AgentBuilder(OpenAIChatModel("gpt-4o-mini", api_key="sk-test"))
    .name("quoted")
    .instructions("Answer in one word.")
    .build()
)

AGENTS = [quoted]
