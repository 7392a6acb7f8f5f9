"""`durable-agent worker` and `python worker.py`: a worker hosting agents on `AgentWorkflow`.

    durable-agent worker [--agents my.module ...] [--log-format json|console] [--dev]

Configured by TEMPORAL_ADDRESS (default localhost:7233), TEMPORAL_NAMESPACE (default
`default`) and TEMPORAL_TASK_QUEUE (default `durable-agent`), or the group's `--address`,
`--namespace` and `--task-queue` given before `worker`. Every `Agent` a module passed to
`--agents` defines (or lists in `AGENTS`) is registered; an application's `worker.py` adds
its own modules (`main(default_agents=...)`) unless `--no-examples`. `--dev` first starts
the embedded Temporal dev server (SQLite file under .temporal/, Web UI on
http://localhost:8233), the approvals inbox and, when the `deployer` agent is registered,
one example run waiting for approval.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import structlog
from click.core import ParameterSource

from durable_agent.cli.logs import configure_logging
from durable_agent.contract.errors import UserError
from durable_agent.engine.quotas import ModelQuota, parse_quota
from durable_agent.environments.workspace.stores import STORE_ENV as WORKSPACE_STORE_ENV
from durable_agent.temporal import DEFAULT_TASK_QUEUE
from durable_agent.temporal import worker as library
from durable_agent.temporal.registry import AgentRegistry
from durable_agent.temporal.roles import ROLES
from durable_agent.temporal.storage import STORAGE_ENV

from .context import EXIT_INTERRUPTED, EXIT_OK, EXIT_REJECTED, EXIT_USAGE
from .dev import DEMO_AGENT, DevStack, PortTaken, dev_storage
from .output import err

__all__ = ["Application", "main", "serve", "worker"]

log = structlog.get_logger("durable_agent.worker")

APPLICATION_KEY = "durable_agent.application"
"""Where `main` puts an application's own agents, workflows and activities."""
GROUP_OPTIONS = {
    "address": "TEMPORAL_ADDRESS",
    "namespace": "TEMPORAL_NAMESPACE",
    "task_queue": "TEMPORAL_TASK_QUEUE",
}


@dataclass(frozen=True)
class Application:
    """What an application's `worker.py` adds to the worker: modules whose agents it
    registers (unless --no-examples), and workflows and activities of its own."""

    agent_modules: Sequence[str] = ()
    workflows: Sequence[type] = ()
    activities: Sequence[Callable[..., Any]] = ()


@dataclass
class Where:
    """The server, namespace and task queue the worker serves."""

    address: str
    namespace: str
    task_queue: str


@click.command(
    "worker",
    epilog="Environment: TEMPORAL_ADDRESS (default localhost:7233), TEMPORAL_NAMESPACE "
    "(default default), TEMPORAL_TASK_QUEUE (default durable-agent).",
    context_settings={"help_option_names": ["-h", "--help"]},
    short_help="Run a worker hosting agents until Ctrl-C/SIGTERM",
)
@click.option("--agents", multiple=True, metavar="MODULE", help="register the agents of MODULE")
@click.option(
    "--no-examples",
    is_flag=True,
    help="do not register the application's agents (give yours with --agents: a worker "
    "without agents is refused, except with --dev)",
)
@click.option("--log-format", type=click.Choice(["console", "json"]), default="console")
@click.option("--dev", is_flag=True, help="start the embedded Temporal dev server first")
@click.option("--db", default=".temporal/dev.db", show_default=True, help="dev server file")
@click.option("--port", type=int, default=7233, show_default=True, help="dev server port")
@click.option("--ui-port", type=int, default=8233, show_default=True, help="Web UI port")
@click.option("--no-demo", is_flag=True, help="with --dev, start no example run")
@click.option("--inbox-port", type=int, default=8234, show_default=True, help="inbox port")
@click.option("--no-inbox", is_flag=True, help="with --dev, serve no approvals inbox")
@click.option(
    "--quota",
    "quotas",
    multiple=True,
    metavar="KEY=LIMITS",
    callback=lambda ctx, param, value: _quotas(value),
    help="a model quota every run of the task queue keeps to, across workers: "
    "PROVIDER:MODEL=rpm:N,tpm:N,concurrent:N (any of the three; repeatable)",
)
@click.option(
    "--role",
    type=click.Choice(list(ROLES)),
    default="all",
    show_default=True,
    help="workflows: agent workflows on the task queue (their model and tool calls go to "
    "QUEUE-models / QUEUE-tools); models / tools: only those calls; all: everything",
)
@click.option(
    "--max-concurrent-activities",
    type=click.IntRange(min=1),
    help="activities this worker runs at once (per role: model calls, tool calls)",
)
@click.option(
    "--deployment-name",
    metavar="NAME",
    help="run as a version of this Worker Deployment (with --build-id; runs auto-upgrade)",
)
@click.option("--build-id", metavar="ID", help="this worker's version in --deployment-name")
@click.option(
    "--graceful-shutdown-seconds",
    type=float,
    default=lambda: float(os.environ.get("DURABLE_AGENT_GRACEFUL_SHUTDOWN_SECONDS", "30")),
    help="on Ctrl-C/SIGTERM, how long in-flight activities may finish (default 30)",
)
@click.pass_context
def worker(ctx: click.Context, /, **options: object) -> None:
    """Run a worker hosting the agents of `--agents MODULE` until Ctrl-C/SIGTERM; `--dev`
    starts the embedded Temporal dev server first. Ends the process when it stops."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise click.UsageError(
            "`durable-agent worker` runs its own event loop; start it with "
            "durable_agent.cli.main([...]), not from a running event loop"
        )
    library.exit_process(serve(ctx, _where(ctx)))


def _deployment(options: dict[str, Any]) -> tuple[str, str] | None:
    name, build = options["deployment_name"], options["build_id"]
    if (name is None) != (build is None):
        raise library.WorkerStartError(
            "--deployment-name and --build-id go together: give both", usage=True
        )
    return (name, build) if name is not None and build is not None else None


def _quotas(specs: Sequence[str]) -> dict[str, ModelQuota]:
    quotas: dict[str, ModelQuota] = {}
    for spec in specs:
        try:
            key, quota = parse_quota(spec)
        except UserError as error:
            raise click.BadParameter(error.message, param_hint="'--quota'") from None
        if key in quotas:
            raise click.BadParameter(f"{key} is given twice", param_hint="'--quota'")
        quotas[key] = quota
    return quotas


def _where(ctx: click.Context) -> Where:
    """The environment's settings, overridden by the group's options given before `worker`."""
    values = {
        "address": os.environ.get("TEMPORAL_ADDRESS", "localhost:7233"),
        "namespace": os.environ.get("TEMPORAL_NAMESPACE", "default"),
        "task_queue": os.environ.get("TEMPORAL_TASK_QUEUE", DEFAULT_TASK_QUEUE),
    }
    root = ctx.find_root()
    if root is not ctx:
        for name in GROUP_OPTIONS:
            if root.get_parameter_source(name) == ParameterSource.COMMANDLINE:
                values[name] = str(getattr(root.obj, name))
    return Where(**values)


def serve(ctx: click.Context, where: Where) -> int:
    """Runs the worker (and, with --dev, the stack around it); its exit code."""
    options = ctx.params
    application: Application = ctx.meta.get(APPLICATION_KEY, Application())
    configure_logging("json" if options["log_format"] == "json" else "console")
    sys.path.insert(0, os.getcwd())
    try:
        options["deployment"] = _deployment(options)
        modules = [] if options["no_examples"] else list(application.agent_modules)
        agents = AgentRegistry()
        for module in [*modules, *options["agents"]]:
            library.register_module(agents, module)
        if not agents.names():
            _no_agents(options, where, application)
        return asyncio.run(_serve(options, where, application, agents))
    except library.WorkerStartError as error:
        err(f"durable-agent worker: {error}")
        return EXIT_USAGE if error.usage else EXIT_REJECTED
    except PortTaken as error:
        err(f"durable-agent worker --dev: {error}")
        return EXIT_REJECTED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _no_agents(options: dict[str, Any], where: Where, application: Application) -> None:
    """A worker without agents still serves `AgentWorkflow` on its task queue, and fails
    every run it takes there with `unknown_agent`, runs other workers would have served:
    refused, except with --dev (the embedded server: nobody else's runs), where it is a
    warning. The message says how to give it agents."""
    left_out = options["no_examples"] and application.agent_modules
    why = "--no-examples leaves out the application's agents and no" if left_out else "no"
    message = (
        f"this worker hosts no agents: {why} --agents MODULE was given, and a worker "
        f"without agents takes runs from task queue {where.task_queue!r} only to fail each "
        "with unknown_agent; give your agents' module with --agents your.module"
    )
    if not options["dev"]:
        raise library.WorkerStartError(message, usage=True)
    log.warning(message + " (--dev: starting anyway, on the embedded server)")


async def _serve(
    options: dict[str, Any], where: Where, application: Application, agents: AgentRegistry
) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # SIGHUP: the terminal running `./scripts/dev` was closed; stop as for Ctrl-C.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    stack = None
    if options["dev"]:
        stack = DevStack(
            db=str(options["db"]),
            port=options["port"],
            ui_port=options["ui_port"],
            inbox_port=options["inbox_port"],
            inbox=not options["no_inbox"],
            demo=not options["no_demo"] and DEMO_AGENT in agents,
            namespace=where.namespace,
        )
        stack.check_ports()
        # The embedded default keeps large payloads on local disk next to the database,
        # and the runs' workspaces beside them (contract section 10: .temporal/workspaces).
        os.environ.setdefault(STORAGE_ENV, dev_storage(stack.db))
        workspaces = (Path(stack.db).parent / "workspaces").resolve()
        os.environ.setdefault(WORKSPACE_STORE_ENV, workspaces.as_uri())
    server = stack.server() if stack is not None else None
    if server is not None:
        log.info("starting the Temporal dev server", db=str(server.db_file), ui=server.ui_url)
        await server.start()
        where.address = server.address
    around = None
    try:
        ready = asyncio.Event()
        running = asyncio.create_task(
            library.run_worker(
                where.address,
                where.namespace,
                where.task_queue,
                stop=stop,
                agents=agents,
                ready=ready,
                graceful_shutdown_seconds=options["graceful_shutdown_seconds"],
                quotas=options["quotas"],
                role=options["role"],
                deployment=options["deployment"],
                max_concurrent_activities=options["max_concurrent_activities"],
                workflows=application.workflows,
                activities=application.activities,
            )
        )
        if stack is not None and server is not None:
            around = await stack.around_the_worker(
                server, where.namespace, where.task_queue, ready=ready, running=running, stop=stop
            )
        await running
    finally:
        if around is not None:
            await around.stop()
        if server is not None:
            server.stop()
    return EXIT_OK


def main(argv: Sequence[str] | None = None, *, application: Application | None = None) -> int:
    """`python worker.py`: the worker command with an application's own agents, workflows
    and activities; returns its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        with worker.make_context("worker.py", args) as ctx:
            ctx.meta[APPLICATION_KEY] = application or Application()
            return serve(ctx, _where(ctx))
    except click.exceptions.Exit as done:
        return done.exit_code
    except click.ClickException as error:
        error.show()
        return error.exit_code
