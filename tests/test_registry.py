"""A worker's `AgentRegistry` and the agents it builds for runs with overrides (issue 37).

The cache of overridden agents is the worker's own (its runtime's registry), read and
written at once by its workflow threads and its activities: these tests hammer it from
threads and check that each overrides is built into one agent, that it stays bounded, and
that an agent registered again is never answered with one built from the agent it replaced.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from durable_agent import AgentBuilder, AgentOverrides, TestModel
from durable_agent.contract.errors import InvalidInput, UnknownAgentError
from durable_agent.engine.spec import AgentSpec
from durable_agent.temporal import AgentRegistry
from durable_agent.temporal.registry import OVERRIDDEN_AGENTS_KEPT

THREADS = 8
ROUNDS = 400


def _agent(name: str = "writer") -> AgentSpec:
    return AgentBuilder(TestModel.with_text("hi")).name(name).build()


def _overrides(i: int) -> AgentOverrides:
    return AgentOverrides(instructions=f"Variant {i}.")


def test_an_agent_without_overrides_is_the_registered_one() -> None:
    registry = AgentRegistry()
    agent = registry.register(_agent())
    assert registry.agent_for("writer", None) is agent
    assert registry.agent_for("writer", AgentOverrides()) is agent
    with pytest.raises(UnknownAgentError):
        registry.agent_for("nobody", _overrides(1))
    with pytest.raises(InvalidInput):
        registry.agent_for("writer", AgentOverrides(model="not-allowed"))


def test_threads_asking_for_the_same_overrides_get_one_agent() -> None:
    registry = AgentRegistry()
    registry.register(_agent())
    start = threading.Barrier(THREADS)

    def ask(_: int) -> list[AgentSpec]:
        start.wait()
        return [registry.agent_for("writer", _overrides(i % 4)) for i in range(ROUNDS)]

    with ThreadPoolExecutor(THREADS) as pool:
        answers = [agent for batch in pool.map(ask, range(THREADS)) for agent in batch]
    assert len({id(agent) for agent in answers}) == 4
    assert {agent.instructions for agent in answers} == {f"Variant {i}." for i in range(4)}


def test_threads_filling_and_evicting_the_cache_keep_it_bounded_and_right() -> None:
    """More distinct overrides than are kept, from many threads at once: every answer is the
    agent for the overrides asked, and the cache never holds more than it keeps."""
    registry = AgentRegistry()
    registry.register(_agent())
    registry.register(_agent("reviewer"))
    start = threading.Barrier(THREADS)
    wrong: list[str] = []

    def ask(thread: int) -> None:
        start.wait()
        for i in range(ROUNDS):
            variant = (thread * ROUNDS + i) % (OVERRIDDEN_AGENTS_KEPT * 3)
            name = "writer" if i % 2 else "reviewer"
            agent = registry.agent_for(name, _overrides(variant))
            if agent.name != name or agent.instructions != f"Variant {variant}.":
                wrong.append(f"{name} {variant}: {agent.name} {agent.instructions}")

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(ask, range(THREADS)))
    assert wrong == []
    kept = registry._overridden
    assert set(kept) == {"writer", "reviewer"}
    assert all(len(agents) <= OVERRIDDEN_AGENTS_KEPT for agents in kept.values())


def test_an_agent_registered_again_is_not_answered_with_its_predecessors_builds() -> None:
    registry = AgentRegistry()
    registry.register(_agent())
    first = registry.agent_for("writer", _overrides(1))
    replacement = registry.register(_agent(), replace=True)
    second = registry.agent_for("writer", _overrides(1))
    assert second is not first
    assert second.model is replacement.model
    assert registry.agent_for("writer", _overrides(1)) is second
