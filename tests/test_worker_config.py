"""A worker's configuration mistakes are said, not silently applied (issue 38, item 14).

`--quota KEY=rpm:6,rpm:7` used 7; a quota for a key no hosted agent's model has (a typo)
limited nothing without a word; `worker.py --no-examples` with no `--agents` polled the
shared queue hosting no agent, failing every run it took with `unknown_agent`.
"""

from __future__ import annotations

import pytest
import structlog

from durable_agent import AgentBuilder
from durable_agent.cli.worker import Application
from durable_agent.cli.worker import main as worker_main
from durable_agent.contract.errors import UserError
from durable_agent.engine.quotas import ModelQuota, parse_quota
from durable_agent.models import FallbackModel
from durable_agent.models.openai import OpenAIChatModel
from durable_agent.temporal import worker as library
from durable_agent.temporal.registry import AgentRegistry


@pytest.fixture(autouse=True)
def nowhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing listens on port 1: a worker that got as far as connecting fails at once."""
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
    monkeypatch.delenv("TEMPORAL_TASK_QUEUE", raising=False)


def test_a_limit_given_twice_in_one_quota_is_refused() -> None:
    with pytest.raises(UserError) as refused:
        parse_quota("openai:gpt-4.1=rpm:6,rpm:7")
    assert refused.value.message == (
        "--quota 'openai:gpt-4.1=rpm:6,rpm:7': rpm is given twice (6 and 7); give each limit once"
    )
    assert parse_quota("openai:gpt-4.1=rpm:6,tpm:7")[1] == ModelQuota(
        requests_per_minute=6, tokens_per_minute=7
    )


def test_the_worker_exits_2_on_a_limit_given_twice(capsys: pytest.CaptureFixture[str]) -> None:
    code = worker_main(["--quota", "openai:gpt-4.1=rpm:6,rpm:7"])
    assert code == 2
    assert "rpm is given twice (6 and 7); give each limit once" in capsys.readouterr().err


def _hosting(*models: object) -> AgentRegistry:
    registry = AgentRegistry()
    for index, model in enumerate(models):
        registry.host(AgentBuilder(model).name(f"agent{index}").build())  # type: ignore[arg-type]
    return registry


def _warnings(quotas: dict[str, ModelQuota], registry: AgentRegistry) -> list[dict[str, object]]:
    with structlog.testing.capture_logs() as logs:
        library.plugin(quotas, registry)
    return [entry for entry in logs if entry["log_level"] == "warning"]


def test_a_quota_no_hosted_agent_uses_is_warned_about_naming_the_keys_in_use() -> None:
    gpt = OpenAIChatModel("gpt-4.1", api_key="sk-test")
    mini = OpenAIChatModel("gpt-4o-mini", api_key="sk-test")
    registry = _hosting(gpt, FallbackModel(OpenAIChatModel("o3", api_key="sk-test"), mini))
    quota = ModelQuota(requests_per_minute=60)
    warned = _warnings({"openai:gpt4.1": quota, "openai:gpt-4.1": quota}, registry)
    assert [w["key"] for w in warned] == ["openai:gpt4.1"]
    assert warned[0]["agents_use"] == ["openai:gpt-4.1", "openai:gpt-4o-mini", "openai:o3"]
    assert warned[0]["event"].startswith(
        "model quota 'openai:gpt4.1' applies to no hosted agent: no agent's model has that key "
        "(they use: openai:gpt-4.1, openai:gpt-4o-mini, openai:o3); check its spelling"
    )
    members = {"openai:o3": quota, "openai:gpt-4o-mini": quota}
    assert _warnings(members, registry) == [], "a fallback's members are used"


def test_a_worker_without_agents_is_refused_before_it_polls(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Refused before connecting: exit 2, and how to fix it."""
    application = Application(agent_modules=("workflows.agents",))
    argv = ["--no-examples", "--log-format", "json"]
    code = worker_main(argv, application=application)
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "durable-agent worker: this worker hosts no agents: --no-examples leaves out the "
        "application's agents and no --agents MODULE was given, and a worker without agents "
        "takes runs from task queue 'durable-agent' only to fail each with unknown_agent; "
        "give your agents' module with --agents your.module"
    )
