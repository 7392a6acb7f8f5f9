"""The dev server SIGKILLed mid-run and restarted on the same SQLite file and ports: the
worker process rides it out (it reconnects) and the run finishes."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from durable_agent.temporal.devserver import DevServer
from tests.temporal_support import free_port

from .agents import STEPS_OUTPUT
from .support import Faults, unique

pytestmark = pytest.mark.server

PROMPT = "fetch alpha and beta"


async def test_server_killed_and_restarted_mid_run(tmp_path: Path) -> None:
    # Ports chosen once: the restarted server must come back where the worker looks for it.
    server = DevServer(
        tmp_path / "server" / "dev.db",
        port=free_port(),
        ui_port=free_port(),
        dynamic_config={"frontend.enableUpdateWorkflowExecution": "true"},
    )
    async with Faults(server.address, tmp_path, "server-kill") as faults:
        faults.servers.append(server)
        await server.start()
        worker = await faults.start_worker()
        reference, reference_messages = await faults.undisturbed("fault-steps", PROMPT)

        handle = await faults.start_run("fault-steps", PROMPT, workflow_id=unique("server-kill"))
        faults.block_tool(handle.id, "call_fetch_1")
        await faults.wait_for_line("tool_blocked", handle.id)

        server.stop(signal.SIGKILL)
        assert server.process is not None
        assert server.process.returncode == -signal.SIGKILL
        await asyncio.sleep(3)  # the worker's polls and heartbeats fail meanwhile
        assert worker.alive, f"the worker exited when the server died; see {worker.log}"

        await server.start()  # same database file, same ports
        faults.reconnect()
        faults.release(handle.id)
        handle = await faults.handle(handle.id)
        result = await faults.result(handle, timeout=45)
        messages = await faults.transcript(handle)

        assert worker.alive, f"the worker exited; see {worker.log}"
        assert len(faults.workers) == 1, "the same worker process finished the run"
        assert result.output == reference.output == STEPS_OUTPUT
        assert messages == reference_messages
        # Every model request answered before the crash stayed answered.
        assert faults.steps("model_requests", handle.id) == [1, 2, 3]
        assert faults.steps("model_responses", handle.id) == [1, 2, 3]
        finished = faults.calls("tool_finished", handle.id)
        started = faults.calls("tool_started", handle.id)
        assert finished.count("call_fetch_2") == started.count("call_fetch_2") == 1
        # The blocked call is retried after the restart when its heartbeat timeout (2s)
        # passed while the server was down; each start finished at most once.
        assert 1 <= finished.count("call_fetch_1") <= started.count("call_fetch_1") <= 2
        attempts = [r[2] for r in faults.lines("tool_started", handle.id) if r[1] == "call_fetch_1"]
        print(f"call_fetch_1 attempts: {attempts}")
