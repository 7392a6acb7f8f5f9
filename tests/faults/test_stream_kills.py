"""A worker SIGKILLed while a model request streams: the run finishes on a fresh worker, and
a subscriber that follows the run through the kill sees every record once, in order, with
the killed attempt's text superseded (`model_retry`) by the retry's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from durable_agent import AgentStreamRecord
from durable_agent.cli.live import RunView
from durable_agent.temporal import AgentClient
from durable_agent.temporal.devserver import DevServer

from .agents import STREAM_TEXT
from .support import Faults, unique, wait_until

pytestmark = pytest.mark.server


async def test_killed_while_the_model_streams(dev_server: DevServer, tmp_path: Path) -> None:
    async with Faults(dev_server.address, tmp_path, "kill-stream") as faults:
        first = await faults.start_worker()
        workflow_id = unique("kill-stream")
        faults.block_model(workflow_id, 1)
        handle = await faults.start_run("fault-stream", "talk", workflow_id=workflow_id)
        run = AgentClient(await faults.client()).get(handle.id)
        seen: list[AgentStreamRecord] = []
        shown: list[str] = []
        view = RunView(handle.id)

        async def follow() -> None:
            async for record in run.stream(poll_interval=0.05):
                seen.append(record)
                view.apply(record)
                shown.append(view.text(1))

        follower = asyncio.create_task(follow())
        await faults.wait_for_line("model_blocked", handle.id)
        await wait_until(
            lambda: any(r.kind == "model_delta" for r in seen),
            timeout=10,
            what="the first half's deltas at the subscriber",
        )
        first.kill()
        faults.release(handle.id)
        await faults.start_worker()
        result = await faults.result(handle)
        await asyncio.wait_for(follower, 30)
        replayed = [r async for r in run.stream()]

    assert result.output == STREAM_TEXT
    assert [r.seq for r in replayed] == list(range(len(replayed)))
    assert seen == replayed, "the subscriber saw every record once, through the kill"
    kinds = [r.kind for r in replayed]
    retry = replayed[kinds.index("model_retry")]
    assert retry.data == {"run_step": 1, "attempt": 2, "superseded": 1}
    killed = [r.data["text"] for r in replayed[: retry.seq] if r.kind == "model_delta"]
    assert STREAM_TEXT.startswith("".join(killed))
    assert 0 < len("".join(killed)) < len(STREAM_TEXT)
    retried = [r for r in replayed[retry.seq :] if r.kind == "model_delta"]
    assert "".join(r.data["text"] for r in retried) == STREAM_TEXT
    assert {r.data["attempt"] for r in retried} == {2}
    assert shown[-1] == STREAM_TEXT
    assert all(STREAM_TEXT.startswith(text) for text in shown), "never two attempts run together"
    assert [row[2] for row in faults.lines("model_requests", handle.id)] == ["1", "2"]
