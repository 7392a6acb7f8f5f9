"""`ReplayModel`, `durable-agent export` and `replay_histories` (issue 40, points 2, 3, 5).

In-process from the recorded histories of tests/histories (fast lane); from runs on a
time-skipping test environment with continue-as-new, encryption and external storage
(slow lane): exported, redacted, replayed, and a deliberately non-deterministic change
named by workflow and event.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from durable_agent import AgentBuilder, FunctionModel, ModelResponse, TextPart, Usage
from durable_agent.cli import amain
from durable_agent.temporal import AgentActivityConfig, AgentRegistration, DurableAgentPlugin
from durable_agent.temporal.encryption import generate_key
from durable_agent.testing import (
    AgentTestEnvironment,
    HistoryFileError,
    NonDeterministicReplay,
    ReplayDivergence,
    ReplayModel,
    RunChain,
    replay_histories,
)
from durable_agent.testing.histories import redacted_value

from .helpers import call, tool_response
from .replay_agents import get_weather

HISTORIES = Path(__file__).resolve().parent / "histories"
TOOL_RUN = HISTORIES / "v0.3.0" / "tool_run.json"


def weather_agent(model: Any, name: str = "replay-weather", *, tools: bool = True) -> Any:
    builder = AgentBuilder(model).name(name).instructions("Answer in a word.")
    return (builder.tool(get_weather) if tools else builder).build()


# -- in process, from recorded files ------------------------------------------------------------


async def test_a_changed_agent_replays_a_recorded_file_in_process() -> None:
    model = ReplayModel.from_history(TOOL_RUN)
    assert [step.step for step in model.steps] == [1, 2]
    result = await weather_agent(model).run("Weather in Paris and Oslo?")
    recorded = model.responses
    assert result.output == recorded[-1].text
    assert result.usage.requests == 2
    assert result.usage.input_tokens == sum(r.usage.input_tokens for r in recorded)
    assert model.request_count == 2


async def test_more_requests_than_recorded_raise_a_divergence_naming_the_step() -> None:
    model = ReplayModel.from_history(HISTORIES / "v0.3.0" / "mid_tool_call.json")
    assert len(model.steps) == 1
    with pytest.raises(ReplayDivergence, match=r"model request 2 \(step 2\).*recorded 1") as e:
        await weather_agent(model, "replay-slow").run("go")
    assert e.value.step == 2


async def test_strict_replay_checks_tool_results_and_tools_offered() -> None:
    def other_weather(city: str) -> str:
        return f"rain in {city}"

    other_weather.__name__ = "get_weather"
    changed = AgentBuilder(ReplayModel.from_history(TOOL_RUN, strict=True)).name("w")
    with pytest.raises(ReplayDivergence, match="step 2: the tool results sent differ") as e:
        await changed.tool(other_weather).build().run("go")
    assert e.value.step == 2
    lenient = AgentBuilder(ReplayModel.from_history(TOOL_RUN)).name("w").tool(other_weather)
    assert (await lenient.build().run("go")).output
    no_tools = weather_agent(ReplayModel.from_history(TOOL_RUN, strict=True), tools=False)
    with pytest.raises(ReplayDivergence, match="calls tool 'get_weather', which the agent no"):
        await no_tools.run("go")
    same = weather_agent(ReplayModel.from_history(TOOL_RUN, strict=True))
    assert (await same.run("go")).output


def test_a_file_that_is_not_a_history_is_refused(tmp_path: Path) -> None:
    cases = {
        "not-json.json": "hello",
        "array.json": "[1, 2]",
        "object.json": '{"name": "x"}',
        "no-events.json": '{"events": []}',
        "export-v9.json": '{"format": "durable-agent-history", "version": 9, "runs": []}',
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(HistoryFileError, match=path.stem):
            ReplayModel.from_history(path)
    with pytest.raises(HistoryFileError, match="cannot be read"):
        RunChain.read(tmp_path / "missing.json")
    started_late = json.loads(TOOL_RUN.read_text())
    started_late["events"] = started_late["events"][1:]
    with pytest.raises(HistoryFileError, match="not a workflow execution's start"):
        RunChain.read(started_late)


def test_redaction_drops_text_and_arguments_by_key() -> None:
    value = {
        "prompt": "secret plan",
        "parts": [
            {"kind": "text", "text": "hello"},
            {"kind": "tool_call", "id": "c1", "name": "deploy", "arguments": {"env": "prod"}},
        ],
        "usage": {"input_tokens": 3},
        "status": "completed",
    }
    assert redacted_value(value) == {
        "prompt": "[redacted]",
        "parts": [
            {"kind": "text", "text": "[redacted]"},
            {"kind": "tool_call", "id": "c1", "name": "deploy", "arguments": {}},
        ],
        "usage": {"input_tokens": 3},
        "status": "completed",
    }


# -- from runs on a test environment ------------------------------------------------------------


def payload_text(value: Any) -> str:
    """Every payload's data in an exported file, decoded (the JSON keeps it in base64)."""
    if isinstance(value, dict):
        found = [payload_text(v) for k, v in value.items() if k != "data"]
        data = value.get("data")
        if isinstance(data, str) and "metadata" in value:
            found.append(base64.b64decode(data).decode(errors="replace"))
        return "\n".join(found)
    if isinstance(value, list):
        return "\n".join(payload_text(v) for v in value)
    return ""


SECRET = "the secret city of Atlantis"


def scripted(counts: list[int]) -> FunctionModel:
    """Three steps: two tool calls, then the answer; each response with its usage."""

    def answer(messages: list[Any], info: Any) -> ModelResponse:
        counts.append(1)
        responses = sum(1 for m in messages if m.kind == "response")
        usage = Usage(requests=1, input_tokens=10 + responses, output_tokens=5, cost=0.001)
        if responses < 2:
            city = ["Paris", SECRET][responses]
            response = tool_response(call("get_weather", f"w{responses}", city=city))
            return response.model_copy(update={"usage": usage})
        return ModelResponse(parts=[TextPart(text=f"Sunny in {SECRET}.")], usage=usage)

    return FunctionModel(answer)


@pytest.fixture
def encrypted_storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DurableAgentPlugin:
    """The plugin (and the CLI's environment): encrypted payloads, every one over 10 bytes
    stored outside history."""
    monkeypatch.setenv("DURABLE_AGENT_ENCRYPTION_KEYS", generate_key("k1"))
    monkeypatch.setenv("DURABLE_AGENT_STORAGE", f"file://{tmp_path / 'payloads'}")
    monkeypatch.setenv("DURABLE_AGENT_STORAGE_THRESHOLD", "10")
    return DurableAgentPlugin.from_env()


@pytest.mark.server
async def test_a_run_across_continue_as_new_exported_redacted_and_replayed(
    tmp_path: Path, encrypted_storage: DurableAgentPlugin
) -> None:
    counts: list[int] = []
    agent = weather_agent(scripted(counts))
    hosted = AgentRegistration(agent, AgentActivityConfig(continue_as_new_after_steps=1))
    async with AgentTestEnvironment([hosted], plugin=encrypted_storage) as env:
        handle = await env.client.start(agent.name, f"Weather in {SECRET}?")
        original = await handle.result()
        assert len(await handle.runs()) >= 2  # it continued as new
        assert len(counts) == 3

        model = await ReplayModel.from_run(env.client, handle.id)
        assert len(model.steps) == 3
        assert [s.response.usage.cost for s in model.steps] == [0.001] * 3
        replayed = await weather_agent(model).run(f"Weather in {SECRET}?")
        assert replayed.output == original.output
        assert replayed.usage.input_tokens == original.usage.input_tokens
        assert len(counts) == 3  # no provider asked

        address = env.temporal.service_client.config.target_host
        whole, redacted = tmp_path / "run.json", tmp_path / "redacted.json"
        assert await amain(["export", handle.id, "-o", str(whole), "--address", address]) == 0
        argv = ["export", handle.id, "-o", str(redacted), "--redact", "--address", address]
        assert await amain(argv) == 0
        missing = ["export", "nope", "-o", str(tmp_path / "x.json"), "--address", address]
        assert await amain(missing) == 3

    exported = json.loads(whole.read_text())
    assert exported["format"] == "durable-agent-history"
    assert len(exported["runs"]) >= 2
    assert all(run["history"]["events"] for run in exported["runs"])
    assert SECRET in payload_text(exported)  # decrypted, fetched from the store
    from_file = ReplayModel.from_history(whole)
    assert [s.response for s in from_file.steps] == [s.response for s in model.steps]
    assert (await weather_agent(from_file).run("again")).output == original.output

    shared = json.loads(redacted.read_text())
    assert shared["redacted"] is True
    assert "[redacted]" in payload_text(shared)
    assert SECRET not in payload_text(shared)
    assert "Paris" not in payload_text(shared)
    assert len(ReplayModel.from_history(redacted).steps) == 3

    assert await replay_histories([whole], agents=[hosted]) == len(exported["runs"])
    changed = AgentBuilder(scripted([])).name(agent.name).tool(get_weather)
    changed = changed.approval_required_tools(["get_weather"]).build()
    with pytest.raises(NonDeterministicReplay) as failed:
        await replay_histories([whole], agents=[changed])
    message = str(failed.value)
    assert handle.id in message
    assert failed.value.workflow_id == handle.id
    assert "event " in failed.value.event
    with pytest.raises(HistoryFileError):
        await replay_histories([tmp_path / "x.json"], agents=[hosted])


@pytest.mark.server
async def test_a_replay_model_as_the_model_of_an_agent_on_the_environment() -> None:
    counts: list[int] = []
    agent = weather_agent(scripted(counts), "recorded")
    async with AgentTestEnvironment([agent]) as env:
        handle = await env.client.start("recorded", "Weather?")
        original = await handle.result()
        model = await ReplayModel.from_run(env.temporal, handle.id)
    replaying = weather_agent(model, "replaying")
    async with AgentTestEnvironment([replaying]) as env:
        result = await (await env.client.start("replaying", "Weather?")).result()
        assert result.output == original.output
        assert result.usage.requests == 3
    short = weather_agent(ReplayModel(model.responses[:1]), "short")
    async with AgentTestEnvironment([short]) as env:
        failed = await env.client.start("short", "Weather?")
        with pytest.raises(Exception, match=r"replay_divergence: .*step 2"):
            await failed.result()


def test_replay_histories_from_plain_code_replays_at_once() -> None:
    """Outside a coroutine (a synchronous test, a script) it replays and answers the count."""
    from .replay_agents import replay_agents

    assert replay_histories([HISTORIES / "tool_run.json"], agents=replay_agents()) == 1
