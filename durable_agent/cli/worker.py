"""`durable-agent worker`: the worker `python worker.py` runs, for an installed wheel.

Every argument after `worker` goes unchanged to `durable_agent.temporal.worker.main`
(`--agents MODULE`, `--dev`, `--log-format`, ... and `--help`), configured by the same
TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE / TEMPORAL_TASK_QUEUE. Unlike `python worker.py` it
registers no example agents: name yours with `--agents`.
"""

from __future__ import annotations

import asyncio
import os
import sys

import click
from click.core import ParameterSource

from durable_agent.temporal.worker import exit_process
from durable_agent.temporal.worker import main as worker_main

from .context import EXIT_INTERRUPTED, EXIT_OK, EXIT_REJECTED
from .output import err

__all__ = ["worker"]

FORWARDED = {
    "address": "TEMPORAL_ADDRESS",
    "namespace": "TEMPORAL_NAMESPACE",
    "task_queue": "TEMPORAL_TASK_QUEUE",
}
"""Group options given before `worker` (`durable-agent --address X worker`) reach the worker
as the environment it reads."""


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
    short_help="Run a worker (python worker.py's options; see `worker --help`)",
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def worker(ctx: click.Context, args: tuple[str, ...]) -> None:
    """Run a worker hosting the agents of `--agents MODULE` until Ctrl-C/SIGTERM; `--dev`
    starts the embedded Temporal dev server first. Ends the process when it stops."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise click.UsageError(
            "`durable-agent worker` runs its own event loop; start it with "
            "durable_agent.cli.main([...]) or durable_agent.temporal.worker.main([...]), not "
            "from a running event loop"
        )
    _forward_group_options(ctx)
    exit_process(_run(list(args)))


def _forward_group_options(ctx: click.Context) -> None:
    root = ctx.find_root()
    for name, variable in FORWARDED.items():
        if root.get_parameter_source(name) == ParameterSource.COMMANDLINE:
            value = getattr(root.obj, name)
            os.environ[variable] = str(value)


def _run(argv: list[str]) -> int:
    """The worker's exit code; its argparse and start-up errors arrive as SystemExit."""
    sys.argv[0] = "durable-agent worker"  # argparse's prog, in the worker's usage and errors
    try:
        return worker_main(argv)
    except SystemExit as stop:
        if stop.code is None:
            return EXIT_OK
        if isinstance(stop.code, int):
            return stop.code
        err(f"durable-agent worker: {stop.code}")
        return EXIT_REJECTED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
