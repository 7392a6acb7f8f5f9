"""Starweaver's optional evidence fields: context revision, environment, trace, metadata."""

from __future__ import annotations

import json

from durable_agent import (
    AgentBuilder,
    AgentCheckpoint,
    AgentResumeEvidence,
    TestModel,
    TraceContext,
)

from .helpers import RecordingExecutor
from .test_starweaver_fixtures import FILES, load


async def test_revision_and_environment_come_from_state_metadata() -> None:
    executor = RecordingExecutor()
    agent = AgentBuilder(TestModel.with_text("ok")).build().with_executor(executor)
    await agent.run(
        "hi", metadata={"context_revision": "rev-7", "environment_ref": "env/abc", "other": 1}
    )
    for checkpoint in executor.checkpoints:
        evidence = checkpoint.resume
        assert evidence.context_revision == "rev-7"
        assert evidence.environment_ref == "env/abc"
        data = evidence.model_dump(mode="json")
        assert data["context_revision"] == "rev-7"
        assert data["environment_ref"] == "env/abc"
        assert "metadata" not in data  # empty: left out, as starweaver does
        assert "trace_context" not in data  # tracing off


async def test_fields_are_left_out_when_the_metadata_lacks_them() -> None:
    executor = RecordingExecutor()
    agent = AgentBuilder(TestModel.with_text("ok")).build().with_executor(executor)
    await agent.run("hi", metadata={"context_revision": 3})  # not a string: not a revision
    data = executor.checkpoints[-1].resume.model_dump(mode="json")
    for name in ("context_revision", "environment_ref", "trace_context", "metadata"):
        assert name not in data


def test_starweaver_shaped_evidence_round_trips() -> None:
    raw = load(FILES[1])["checkpoints"][3]
    raw["resume"]["context_revision"] = "r1"
    raw["resume"]["environment_ref"] = "e1"
    raw["resume"]["trace_context"] = {
        "trace_id": "0af7651916cd43dd8448eb211c80319c",
        "span_id": "b7ad6b7169203331",
        "metadata": {"trace_flags": "01"},
    }
    raw["resume"]["metadata"] = {"store": {"k": 1}}
    checkpoint = AgentCheckpoint.model_validate(raw)
    assert checkpoint.resume.trace_context == TraceContext(
        trace_id="0af7651916cd43dd8448eb211c80319c",
        span_id="b7ad6b7169203331",
        metadata={"trace_flags": "01"},
    )
    assert checkpoint.resume.metadata == {"store": {"k": 1}}
    assert json.loads(checkpoint.model_dump_json()) == raw


def test_every_fixture_checkpoint_still_round_trips_exactly() -> None:
    for name in FILES:
        for raw in load(name)["checkpoints"]:
            evidence = AgentResumeEvidence.model_validate(raw["resume"])
            assert evidence.trace_context is None
            assert evidence.metadata == {}
            assert json.loads(evidence.model_dump_json()) == raw["resume"]


async def test_a_state_trace_context_reaches_every_checkpoint() -> None:
    executor = RecordingExecutor()
    agent = AgentBuilder(TestModel.with_text("ok")).build().with_executor(executor)
    result = await agent.run("hi")
    context = TraceContext(trace_id="1" * 32, span_id="2" * 16)
    state = result.state.model_copy(update={"trace_context": context})
    data = json.loads(state.model_dump_json())
    assert data["trace_context"] == {"trace_id": "1" * 32, "span_id": "2" * 16}
    evidence = AgentResumeEvidence.from_state(state, executor.checkpoints[-1].node, 0)
    assert evidence.trace_context == context
