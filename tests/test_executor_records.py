"""The Temporal executor keeps every boundary for forks in a compact form (JSON without
the conversation, the large values by reference); each must read back as it was."""

from __future__ import annotations

from typing import Any

from durable_agent import AgentBuilder, AgentCheckpoint, Continue, Suspend, TestModel
from durable_agent.temporal.executor import TemporalExecutor

from .helpers import call, text_response, tool_response
from .test_starweaver_fixtures import load


class Watching(TemporalExecutor):
    """Writes down each checkpoint as JSON when it is handed over, then records it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[dict[str, Any]] = []

    async def checkpoint(self, checkpoint: AgentCheckpoint) -> Continue | Suspend:
        self.seen.append(checkpoint.model_dump(mode="json"))
        return await super().checkpoint(checkpoint)


def lookup(key: str) -> dict[str, Any]:
    return {"key": key, "rows": [1, 2, 3], "nested": {"a": None}}


async def test_every_recorded_boundary_reads_back_as_it_was_handed_over() -> None:
    script = [
        tool_response(call("lookup", "c1", key="a"), call("lookup", "c2", key="b")),
        tool_response(call("lookup", "c3", key="c")),
        text_response("done"),
    ]
    executor = Watching()
    agent = (
        AgentBuilder(TestModel.with_responses(script)).tool(lookup).build().with_executor(executor)
    )
    result = await agent.run("go", metadata={"tenant": "t1", "tags": ["x"]})
    assert result.output == "done"
    assert len(executor.seen) > 10
    for position, seen in enumerate(executor.seen):
        recorded = executor.recorded(position)
        assert recorded.model_dump(mode="json") == seen, position
        assert executor.position_of(seen["checkpoint_id"]) == position
    assert executor.position_of("ckpt_unknown") is None


async def test_a_packed_run_reads_its_latest_checkpoint_back_and_keeps_none() -> None:
    """While a run waits for a person (`pack`), its latest checkpoint is let go of and
    read back from its JSON for each reader; the next boundary keeps one again."""
    script = [tool_response(call("lookup", "c1", key="a")), text_response("done")]
    executor = Watching()
    agent = (
        AgentBuilder(TestModel.with_responses(script)).tool(lookup).build().with_executor(executor)
    )
    await agent.run("go")
    last = executor.latest
    assert last is not None
    node = executor.node
    assert executor.evidence, "read for a query"
    executor.pack()
    assert executor._latest is None, "the packed run keeps no checkpoint object"
    assert executor._evidence == [], "nor the evidence a query read"
    read = executor.latest
    assert read is not None
    assert read.model_dump(mode="json") == executor.seen[-1] == last.model_dump(mode="json")
    assert executor.latest is not read, "read back for each reader, not kept"
    assert executor.node is node
    assert [e.model_dump(mode="json") for e in executor.evidence] == [
        seen["resume"] for seen in executor.seen
    ]
    executor.record(last)
    assert executor.latest is last


def test_a_continued_run_keeps_the_checkpoint_it_carries_until_its_first_boundary() -> None:
    executor = TemporalExecutor()
    assert executor.latest is None
    assert executor.node is None
    carried = AgentCheckpoint.model_validate(load("text_run.json")["checkpoints"][-1])
    executor.latest = carried
    executor.pack()  # nothing recorded in this run: nothing to read back from
    assert executor.latest is carried
    assert executor.node is carried.node
