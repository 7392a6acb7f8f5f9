"""Which quota keys a worker's agents can ask for, to catch a quota nobody will use.

A quota applies only to requests whose model key (`provider:model`) it names, so a typo in
`--quota openai:gpt4.1=...` leaves every run unlimited without a word. The worker compares
its quotas with the keys its agents' models have (a `FallbackModel`'s members, the
`allowed_models` a run may pick, sub-agents' models) and warns about each one no agent
uses, naming the keys they do use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from durable_agent.engine.quotas import ModelQuota, model_key
from durable_agent.models.base import Model
from durable_agent.models.fallback import FallbackModel

from ..registry import AgentRegistration

__all__ = ["model_keys", "unused_quotas"]


def model_keys(model: Model) -> set[str]:
    """The keys requests of `model` count against: its own, or its members' for a
    `FallbackModel` (each member waits for its own quota)."""
    if isinstance(model, FallbackModel):
        keys: set[str] = set()
        for member in model.models:
            keys |= model_keys(member)
        return keys
    key = model_key(model)
    return {key} if key is not None else set()


def agent_keys(registrations: Iterable[AgentRegistration]) -> set[str]:
    """Every key the hosted agents' runs can ask for (sub-agents are registered too)."""
    keys: set[str] = set()
    for registration in registrations:
        agent = registration.agent
        for model in (agent.model, *agent.allowed_models.values()):
            keys |= model_keys(model)
    return keys


def unused_quotas(
    quotas: Mapping[str, ModelQuota], registrations: Iterable[AgentRegistration]
) -> tuple[list[str], list[str]]:
    """(the quota keys no hosted agent uses, sorted; the keys they do use, sorted)."""
    used = agent_keys(registrations)
    return sorted(key for key in quotas if key not in used), sorted(used)
