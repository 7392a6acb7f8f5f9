from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client

from durable_agent.temporal.devserver import DevServer

from .temporal_support import connect, free_port

pytest_plugins = ["pytester", "tests.lanes", "tests.head_start"]


@pytest.fixture(scope="session")
async def dev_server() -> AsyncIterator[DevServer]:
    """One real Temporal dev server (SQLite, Web UI, search attributes) for the session."""
    directory = Path(tempfile.mkdtemp(prefix="durable-agent-test-"))
    server = DevServer(
        directory / "dev.db",
        port=free_port(),
        ui_port=free_port(),
        dynamic_config={"frontend.enableUpdateWorkflowExecution": "true"},
    )
    await server.start()
    os.environ.setdefault("DURABLE_AGENT_TEST_SERVER", server.address)
    yield server
    server.stop()


@pytest.fixture
async def client(dev_server: DevServer) -> Client:
    return await connect(dev_server.address)
