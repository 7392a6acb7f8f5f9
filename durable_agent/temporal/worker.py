"""The worker behind `python worker.py` and `durable-agent worker`.

    durable-agent worker [--agents my.module ...] [--log-format json|console] [--dev]

Configured by TEMPORAL_ADDRESS (default localhost:7233), TEMPORAL_NAMESPACE (default
`default`) and TEMPORAL_TASK_QUEUE (default `durable-agent`). Every `Agent` a module passed
to --agents defines (or lists in `AGENTS`) is registered; an application's `worker.py` adds
its own modules (unless --no-examples). `--dev` first starts the embedded Temporal dev
server (SQLite file under .temporal/, Web UI on http://localhost:8233) and, when the
`deployer` agent is registered, one example run waiting for approval.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import structlog
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

from ..agent import Agent
from ..logs import configure_logging
from . import DEFAULT_TASK_QUEUE
from .client import AgentRunError
from .encryption import EncryptionCodec, EncryptionError
from .plugin import DurableAgentPlugin
from .registry import AgentRegistry, registry
from .search_attributes import ensure_search_attributes
from .storage import STORAGE_ENV, StorageConfigError
from .toolsets import ToolsetStartupError, toolset_pool

if TYPE_CHECKING:
    from ..inbox.server import InboxServer

log = structlog.get_logger("durable_agent.worker")


def register_module(target: AgentRegistry, module_name: str) -> list[str]:
    """Registers the agents a module defines; returns their names."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise SystemExit(f"--agents {module_name}: cannot import it ({error})") from error
    agents = getattr(module, "AGENTS", None)
    if agents is None:
        agents = [value for value in vars(module).values() if isinstance(value, Agent)]
    if not agents:
        raise SystemExit(
            f"--agents {module_name}: the module defines no Agent; build one with "
            "AgentBuilder(...).build() at module level or list them in AGENTS"
        )
    names = []
    for agent in agents:
        if agent.name not in target:
            target.register(agent)
        names.append(agent.name)
    return names


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--agents", action="append", default=[], metavar="MODULE")
    parser.add_argument(
        "--no-examples", action="store_true", help="do not register the application's agents"
    )
    parser.add_argument("--log-format", choices=["console", "json"], default="console")
    parser.add_argument("--dev", action="store_true", help="start the embedded Temporal dev server")
    parser.add_argument("--db", default=".temporal/dev.db", help="dev server SQLite file (--dev)")
    parser.add_argument("--port", type=int, default=7233, help="dev server port (--dev)")
    parser.add_argument("--ui-port", type=int, default=8233, help="dev server Web UI port (--dev)")
    parser.add_argument("--no-demo", action="store_true", help="with --dev, start no example run")
    parser.add_argument(
        "--inbox-port", type=int, default=8234, help="approvals inbox port (--dev; default 8234)"
    )
    parser.add_argument("--no-inbox", action="store_true", help="with --dev, serve no inbox")
    parser.add_argument(
        "--graceful-shutdown-seconds",
        type=float,
        default=float(os.environ.get("DURABLE_AGENT_GRACEFUL_SHUTDOWN_SECONDS", "30")),
        help="on Ctrl-C/SIGTERM, how long in-flight activities may finish (default 30)",
    )
    return parser.parse_args(argv)


def plugin() -> DurableAgentPlugin:
    """Encrypts payloads when DURABLE_AGENT_ENCRYPTION_KEYS is set (see `.encryption`) and
    stores large ones where DURABLE_AGENT_STORAGE says (see `.storage`); requires signed
    approvals when DURABLE_AGENT_APPROVAL_KEYS is set (see `.signing`). A setting that does
    not parse stops the worker with a message naming it."""
    try:
        built = DurableAgentPlugin.from_env()
    except (EncryptionError, StorageConfigError) as error:
        raise SystemExit(str(error)) from None
    if built.external_storage is not None:
        log.info("external payload storage on", storage=os.environ.get(STORAGE_ENV))
    codec = built.codec
    if isinstance(codec, EncryptionCodec):
        log.info("payload encryption on", active_key=codec.active, key_ids=codec.key_ids)
    keys = built.approval_keys
    if keys is not None:
        log.info("signed approvals required", signing_key=keys.active, key_ids=keys.key_ids)
    return built


async def run_worker(
    address: str,
    namespace: str,
    task_queue: str,
    *,
    stop: asyncio.Event,
    ready: asyncio.Event | None = None,
    graceful_shutdown_seconds: float = 30.0,
) -> None:
    """On `stop`, in-flight activities get `graceful_shutdown_seconds` to finish before they
    are cancelled (a cancelled tool call is retried on another worker)."""
    try:
        client = await Client.connect(address, namespace=namespace, plugins=[plugin()])
    except RuntimeError as error:
        raise SystemExit(
            f"cannot reach the Temporal server at {address} (namespace {namespace}): {error}\n"
            "start one with `python worker.py --dev` or "
            "`docker compose -f docker-compose.temporal.yml up -d`, or set TEMPORAL_ADDRESS"
        ) from error
    try:
        added = await ensure_search_attributes(client)
        if added:
            log.info("registered search attributes", added=added)
    except RPCError as error:
        log.warning(
            "could not check or register the search attributes AgentName, AgentStatus and "
            "PendingApprovals; create them on the server, or workflows will fail their tasks",
            error=str(error),
        )
    # Every registered agent's MCP servers start, and are listed, before the worker polls:
    # a misconfigured one stops the worker here with the reason.
    try:
        await toolset_pool.check([registration.agent for registration in registry])
    except ToolsetStartupError as error:
        await toolset_pool.close()
        raise SystemExit(f"durable-agent worker: {error.message}") from None
    async with Worker(
        client,
        task_queue=task_queue,
        graceful_shutdown_timeout=timedelta(seconds=graceful_shutdown_seconds),
    ):
        log.info(
            "worker started",
            address=address,
            namespace=namespace,
            task_queue=task_queue,
            agents=registry.names(),
        )
        if ready is not None:
            ready.set()
        await stop.wait()
        log.info("worker stopping: finishing in-flight tasks")
    log.info("worker stopped")


async def start_demo(address: str, namespace: str, task_queue: str) -> None:
    from . import AgentWorkflow, AgentWorkflowInput

    client = await Client.connect(address, namespace=namespace, plugins=[plugin()])
    handle = await client.start_workflow(
        AgentWorkflow.run,
        AgentWorkflowInput(agent="deployer", prompt="Deploy v2.1 to prod"),
        id=f"demo-deployer-{os.getpid()}",
        task_queue=task_queue,
        static_summary="Demo: deployer agent waiting for approval of `deploy`",
    )
    log.info("demo run started", workflow_id=handle.id)
    print(
        f"\nDemo run {handle.id} is waiting for approval.\n"
        f"  see it:      durable-agent status {handle.id}\n"
        f"  approve it:  durable-agent approve {handle.id} call_deploy_0\n"
        f"  or deny it:  durable-agent deny {handle.id} call_deploy_0 --reason 'not today'\n",
        flush=True,
    )


async def amain(args: argparse.Namespace, default_agents: Sequence[str] = ()) -> int:
    configure_logging(args.log_format)
    if not args.no_examples:
        for module in default_agents:
            register_module(registry, module)
    for module in args.agents:
        register_module(registry, module)
    address = os.environ.get("TEMPORAL_ADDRESS", "localhost:7233")
    namespace = os.environ.get("TEMPORAL_NAMESPACE", "default")
    task_queue = os.environ.get("TEMPORAL_TASK_QUEUE", DEFAULT_TASK_QUEUE)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # SIGHUP: the terminal running `./scripts/dev` was closed; stop as for Ctrl-C.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)

    server = None
    if args.dev:
        from .devserver import DevServer

        # The embedded default keeps large payloads on local disk next to the database.
        payloads = (Path(args.db).parent / "payloads").resolve()
        os.environ.setdefault(STORAGE_ENV, f"file://{payloads}")

        server = DevServer(
            args.db,
            port=args.port,
            ui_port=args.ui_port,
            namespace=namespace,
            ui_codec_endpoint=os.environ.get("DURABLE_AGENT_CODEC_ENDPOINT"),
        )
        address = server.address
        log.info("starting the Temporal dev server", db=str(server.db_file), ui=server.ui_url)
        await server.start()
        print(
            f"Temporal Web UI: {server.ui_url}  (server {address}, data in {server.db_file})",
            flush=True,
        )
    inbox: InboxServer | None = None
    try:
        ready = asyncio.Event()
        worker = asyncio.create_task(
            run_worker(
                address,
                namespace,
                task_queue,
                stop=stop,
                ready=ready,
                graceful_shutdown_seconds=args.graceful_shutdown_seconds,
            )
        )
        if args.dev and not args.no_inbox:
            inbox = await dev_inbox(args, address, namespace, task_queue, ready, worker)
        if args.dev and not args.no_demo and "deployer" in registry:
            await ready.wait()
            await start_demo(address, namespace, task_queue)
        await worker
    finally:
        if inbox is not None:
            await inbox.stop()
        if server is not None:
            server.stop()
    return 0


async def dev_inbox(
    args: argparse.Namespace,
    address: str,
    namespace: str,
    task_queue: str,
    ready: asyncio.Event,
    worker: asyncio.Task[None],
) -> InboxServer | None:
    """The approvals inbox next to the dev server's Web UI, once the worker polls; without
    the `inbox` extra, or with its port taken, the worker runs on without it."""
    waiting = asyncio.ensure_future(ready.wait())
    await asyncio.wait([waiting, worker], return_when=asyncio.FIRST_COMPLETED)
    if not ready.is_set():
        waiting.cancel()
        return None
    try:
        from ..inbox import InboxConfigError
        from ..inbox.dev import start_dev_inbox
    except ImportError:
        log.warning("no approvals inbox: pip install 'durable-agent[inbox]' for it")
        return None
    try:
        inbox, line = await start_dev_inbox(
            address, namespace, task_queue, port=args.inbox_port, directory=Path(args.db).parent
        )
    except (InboxConfigError, AgentRunError) as error:
        log.warning("no approvals inbox", error=str(error))
        return None
    print(line, flush=True)
    return inbox


def main(argv: Sequence[str] | None = None, *, default_agents: Sequence[str] = ()) -> int:
    """Runs the worker until SIGINT/SIGTERM; `default_agents` are modules to register first."""
    sys.path.insert(0, os.getcwd())
    return asyncio.run(amain(parse_args(argv), default_agents))


def exit_process(code: int) -> NoReturn:
    """Leaves without interpreter finalization: the SDK's native threads can abort it after
    a clean shutdown (temporalio/sdk-python#300), and supervisors must see the real code."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
