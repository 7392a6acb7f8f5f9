"""SIGTERM (a rolling deploy, `docker stop`, Ctrl-C): README and worker.py promise that the
worker "lets in-flight tasks finish, then exits". A tool call in flight must finish on the
worker that started it, not be cut off and run again elsewhere."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from durable_agent.temporal.devserver import DevServer

from .agents import STEPS_OUTPUT
from .support import Faults

pytestmark = pytest.mark.server


async def test_sigterm_lets_an_in_flight_tool_call_finish(
    dev_server: DevServer, tmp_path: Path
) -> None:
    async with Faults(dev_server.address, tmp_path, "sigterm") as faults:
        first = await faults.start_worker()
        handle = await faults.start_run("fault-steps", "fetch alpha and beta")
        faults.block_tool(handle.id, "call_fetch_1")
        await faults.wait_for_line("tool_blocked", handle.id)

        first.process.send_signal(signal.SIGTERM)
        await asyncio.sleep(1)  # the tool is still working when it is told to stop
        faults.release(handle.id)
        first.process.wait(20)

        # Whatever happened, a second worker finishes the run (so the test always ends).
        await faults.start_worker()
        result = await faults.result(handle)
        assert result.output == STEPS_OUTPUT

        started = [r[2] for r in faults.lines("tool_started", handle.id) if r[1] == "call_fetch_1"]
        finished = [
            r[2] for r in faults.lines("tool_finished", handle.id) if r[1] == "call_fetch_1"
        ]
        print(f"call_fetch_1 started attempts {started}, finished attempts {finished}")
        # The attempt in flight at SIGTERM finished on the first worker and was not re-run.
        assert finished == ["1"], f"in-flight tool call was cut off by SIGTERM; see {first.log}"
        assert started == ["1"]


async def test_sigterm_exits_after_the_graceful_timeout_despite_a_blocked_sync_tool(
    dev_server: DevServer, tmp_path: Path
) -> None:
    """A sync tool that ignores cancellation used to hold the process on the event loop's
    default executor (49 s against a 30 s graceful timeout). Now the process exits once the
    graceful timeout is over; the call is retried on the next worker (the README says so)."""
    async with Faults(dev_server.address, tmp_path, "sigterm-sync") as faults:
        os.environ["DURABLE_AGENT_GRACEFUL_SHUTDOWN_SECONDS"] = "2"
        try:
            first = await faults.start_worker()
        finally:
            del os.environ["DURABLE_AGENT_GRACEFUL_SHUTDOWN_SECONDS"]
        handle = await faults.start_run("fault-sync-block", "wait")
        await faults.wait_for_line("tool_blocked", handle.id)
        sent = time.monotonic()
        first.process.send_signal(signal.SIGTERM)
        await asyncio.to_thread(first.process.wait, 20)
        took = time.monotonic() - sent
        assert took < 15, f"the worker took {took:.1f}s to exit; see {first.log}"
        assert faults.lines("tool_finished", handle.id) == [], "the tool was still blocked"

        faults.release(handle.id)
        await faults.start_worker()
        result = await faults.result(handle)
        assert result.output == "waited"
        attempts = [r[2] for r in faults.lines("tool_started", handle.id)]
        assert attempts[-1] == "2", "the cut-off call runs again on the next worker"
