"""The Temporal executor keeps every boundary for forks in a compact form (JSON without
the conversation, the large values by reference); each must read back as it was."""

from __future__ import annotations

from typing import Any

from durable_agent import AgentBuilder, AgentCheckpoint, Continue, Suspend, TestModel
from durable_agent.temporal.executor import TemporalExecutor

from .helpers import call, text_response, tool_response


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
