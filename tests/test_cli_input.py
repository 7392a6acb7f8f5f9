"""What the CLI takes from a person's shell: arguments that must be UTF-8 text (a usage
error in one line otherwise, nothing sent), and prompts from the command line, a file or
standard input (one longer than the shell takes as an argument; none at all is a usage
error). The installed `durable-agent` console script runs where the shell's bytes matter."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from temporalio.client import Client

from durable_agent import AgentBuilder, TestModel
from durable_agent.cli.app import amain
from durable_agent.temporal import AgentClient
from durable_agent.temporal.devserver import DevServer

from .temporal_support import new_worker, unique

CONSOLE_SCRIPT = Path(sys.executable).parent / "durable-agent"


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with structlog.testing.capture_logs():
        yield


@pytest.mark.parametrize(
    "argv",
    [
        [b"run", b"weather", b"\xff\xfe"],
        [b"steer", b"t1", b"\xff"],
        [b"status", b"\xff"],
    ],
    ids=["run", "steer", "status"],
)
@pytest.mark.server
def test_arguments_that_are_not_utf8_are_a_usage_error(argv: list[bytes]) -> None:
    done = subprocess.run(
        [bytes(CONSOLE_SCRIPT), *argv, b"--address", b"127.0.0.1:1"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert "is not valid UTF-8 text" in err


async def test_a_prompt_of_a_million_characters_comes_from_a_file_or_stdin(
    client: Client, dev_server: DevServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique("long-prompt")
    agent = AgentBuilder(TestModel.with_text("read it")).name(name).build()
    prompt = "x" * 999_999 + "!"
    task = tmp_path / "task.md"
    task.write_text(prompt + "\n")
    async with new_worker(client, agents=[agent]) as worker:
        queue = worker.task_queue
        common = ["--address", dev_server.address, "--task-queue", queue, "--json"]
        from_file = await amain(["run", name, "--prompt-file", str(task), *common])
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(prompt.encode())))
        from_stdin = await amain(["run", name, "-", *common])
        agents = AgentClient(client, task_queue=queue)
        runs = [run async for run in agents.list(agent=name)]
        for _ in range(100):
            if len(runs) == 2:
                break
            await asyncio.sleep(0.1)
            runs = [run async for run in agents.list(agent=name)]
        results = [await agents.get(run.workflow_id).result() for run in runs]
    assert (from_file, from_stdin) == (0, 0)
    assert [r.output for r in results] == ["read it", "read it"]
    history = await agents.get(runs[0].workflow_id).handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    assert len(started.input.payloads[0].data) > 1_000_000


@pytest.mark.server
def test_run_without_a_prompt_is_a_usage_error() -> None:
    done = subprocess.run(
        [str(CONSOLE_SCRIPT), "run", "weather", "--address", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "give the prompt: PROMPT, PROMPT - (standard input) or --prompt-file" in done.stderr
