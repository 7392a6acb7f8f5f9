"""Agents by name, with the activity options their nodes run under.

The worker fills the registry before it starts; workflows and activities look agents up by
the name in `AgentWorkflowInput.agent`. The registry module is passed through the workflow
sandbox, so the workflow reads the same registrations the activities use.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, Field

from durable_agent import Agent, UnknownAgentError

__all__ = [
    "ActivityConfig",
    "AgentActivityConfig",
    "AgentRegistration",
    "AgentRegistry",
    "registry",
]


class ActivityConfig(BaseModel):
    """Timeouts and retries for one kind of activity.

    Heartbeats let a cancelled or abandoned call be noticed within `heartbeat_seconds`
    instead of only when `start_to_close_seconds` runs out.
    """

    start_to_close_seconds: float = 120.0
    schedule_to_close_seconds: float | None = None
    heartbeat_seconds: float | None = 30.0
    initial_interval_seconds: float = 1.0
    backoff_coefficient: float = 2.0
    maximum_interval_seconds: float = 60.0
    maximum_attempts: int = 5

    def start_to_close(self) -> timedelta:
        return timedelta(seconds=self.start_to_close_seconds)


class AgentActivityConfig(BaseModel):
    """Per-node and per-tool activity options for one agent."""

    prepare_model_request: ActivityConfig = Field(
        default_factory=lambda: ActivityConfig(start_to_close_seconds=30, heartbeat_seconds=None)
    )
    model_request: ActivityConfig = Field(default_factory=ActivityConfig)
    tool_call: ActivityConfig = Field(default_factory=ActivityConfig)
    validate_output: ActivityConfig = Field(
        default_factory=lambda: ActivityConfig(start_to_close_seconds=30, heartbeat_seconds=None)
    )
    tools: dict[str, ActivityConfig] = Field(default_factory=dict)
    max_concurrent_tool_activities: int = 16
    """At most this many tool activities in flight per step; more calls wait their turn."""
    continue_as_new_after_steps: int | None = None
    """Continue as new after this many model requests in one run, besides whenever Temporal
    suggests it (history near its size or event limits)."""
    max_tool_result_bytes: int = 256_000
    """Tool results larger than this (as JSON) are truncated or fail (`oversized_tool_result`)."""
    oversized_tool_result: Literal["truncate", "fail"] = "truncate"

    def for_tool(self, name: str) -> ActivityConfig:
        return self.tools.get(name, self.tool_call)


@dataclass(frozen=True)
class AgentRegistration:
    agent: Agent
    activities: AgentActivityConfig = field(default_factory=AgentActivityConfig)


class AgentRegistry:
    def __init__(self) -> None:
        self._agents: dict[str, AgentRegistration] = {}

    def register(
        self, agent: Agent, activities: AgentActivityConfig | None = None, *, replace: bool = False
    ) -> Agent:
        """Registers `agent` under `agent.name`; names must be unique unless `replace`."""
        if agent.name in self._agents and not replace:
            raise ValueError(
                f"an agent named {agent.name!r} is already registered; give each agent a unique "
                "name with AgentBuilder.name(...)"
            )
        self._agents[agent.name] = AgentRegistration(agent, activities or AgentActivityConfig())
        return agent

    def get(self, name: str) -> AgentRegistration:
        try:
            return self._agents[name]
        except KeyError:
            known = ", ".join(sorted(self._agents)) or "none"
            raise UnknownAgentError(
                f"no agent named {name!r} is registered on this worker (registered: {known}); "
                "start the worker with --agents your.module to register it"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._agents)

    def __contains__(self, name: object) -> bool:
        return name in self._agents

    def __iter__(self) -> Iterator[AgentRegistration]:
        return iter(self._agents.values())

    def clear(self) -> None:
        self._agents.clear()


registry = AgentRegistry()
"""The process-wide registry the worker, workflows and activities share."""
