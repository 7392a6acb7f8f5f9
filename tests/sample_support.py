"""The sample application (`python worker.py`) as a worker process for a test."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

from durable_agent.temporal.devserver import DevServer

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["ROOT", "sample_worker"]


@contextlib.contextmanager
def sample_worker(
    server: DevServer,
    log: Path,
    task_queue: str | None = None,
    extra_env: dict[str, str] | None = None,
) -> Iterator[dict[str, str]]:
    """Runs `python worker.py` against `server` on `task_queue` (default: one of its own);
    yields the environment a user's shell would have to reach it (no OpenAI key: the
    scripted models), with `extra_env` (e.g. the workspace store) in both."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DURABLE_AGENT_"))},
        "TEMPORAL_ADDRESS": server.address,
        "TEMPORAL_TASK_QUEUE": task_queue or f"sample-{uuid.uuid4().hex[:8]}",
        **(extra_env or {}),
    }
    with open(log, "ab") as output:
        worker = subprocess.Popen(
            [sys.executable, "worker.py", "--log-format", "json"],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        yield env
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
