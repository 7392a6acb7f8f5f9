"""Agents on the new providers for tests that run real worker processes
(`--agents tests.provider_agents`): the model's server and key come from the worker's
environment (`ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`), as in production."""

from __future__ import annotations

from durable_agent import AgentBuilder
from durable_agent.models.anthropic import AnthropicModel
from durable_agent.temporal.registry import AgentActivityConfig, AgentRegistration
from tests.temporal_support import fast_activity

__all__ = ["AGENTS"]

stream_agent = (
    AgentBuilder(AnthropicModel("claude-sonnet-4-5", stream=True))
    .name("anthropic-stream-demo")
    .build()
)

AGENTS = [
    AgentRegistration(
        stream_agent,
        AgentActivityConfig(
            model_request=fast_activity(start_to_close=60, heartbeat=2, maximum_interval=1)
        ),
    )
]
