"""`durable-agent`: start, inspect and steer agent runs on Temporal from the shell.

    durable-agent run weather "Weather in Paris?" --wait
    durable-agent status agent-deployer-1a2b3c4d
    durable-agent approve agent-deployer-1a2b3c4d call_deploy_0 --by alice
    durable-agent deny agent-deployer-1a2b3c4d call_deploy_0 --reason "change freeze"
    durable-agent steer agent-weather-5e6f7a8b "also check Rome"
    durable-agent fork agent-weather-5e6f7a8b --at 4 --model strong
    durable-agent retry agent-weather-5e6f7a8b
    durable-agent chat assistant
    durable-agent list --status waiting
    durable-agent watch agent-deployer-1a2b3c4d
    durable-agent export agent-weather-5e6f7a8b -o run.json --redact
    durable-agent workspace agent-coder-1a2b3c4d --diff 0
    durable-agent eval my_evals:dataset --agent weather --name prompt-v2
    durable-agent worker --agents my_agents
    durable-agent inbox --users inbox-users.toml

The commands are thin: `durable_agent.temporal.AgentClient` does the work, and this module
turns its errors into the documented exit codes. Parsing (click) is synchronous and returns
the command's coroutine, which `amain` awaits in the caller's event loop and `main` runs
with `asyncio.run`; `worker` runs its own loop, so only `main` can start it.

Exit codes:
  0    success
  1    the operation was rejected or the run failed (an update validator refused it, the
       workflow is already closed or is not an agent run, `run --wait` ended in a failed
       run, ...); `status` itself exits 0 whatever state it reports
  2    usage error (bad arguments)
  3    workflow not found
  4    cannot connect to the Temporal server
  5    no worker answered in time (a query or update timed out; an update may still apply)
  130  interrupted (Ctrl-C); a started run goes on
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Sequence
from typing import Any, cast

import click

from durable_agent.temporal.client import (
    AgentRunError,
    CannotConnect,
    NoWorker,
    Rejected,
    RunNotFound,
)
from durable_agent.temporal.worker import exit_process

from . import chat, decisions, evals, export, forks, runs, watch, workspace
from .context import (
    EPILOG,
    EXIT_CONNECT,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_REJECTED,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    Settings,
    connection_options,
)
from .inbox import inbox
from .output import err
from .worker import worker

__all__ = [
    "EXIT_CONNECT",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_REJECTED",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "amain",
    "cli",
    "exit_code",
    "main",
]


@click.group(epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@connection_options(group=True)
def cli() -> None:
    """Start, inspect and steer durable agent runs on Temporal.

    Results go to stdout (--json makes them machine-readable), errors and hints to stderr.
    The connection options are accepted before or after the command.
    """


for command in (
    runs.run,
    runs.status,
    decisions.approve,
    decisions.deny,
    decisions.deferred,
    decisions.resume,
    decisions.suspend,
    decisions.cancel,
    decisions.steer,
    chat.chat,
    forks.fork,
    forks.retry,
    runs.checkpoints,
    runs.list_runs,
    watch.watch,
    export.export,
    workspace.workspace,
    evals.eval_command,
    worker,
    inbox,
):
    cli.add_command(command)


def exit_code(error: AgentRunError) -> int:
    """The documented exit code of a client error."""
    if isinstance(error, RunNotFound):
        return EXIT_NOT_FOUND
    if isinstance(error, CannotConnect):
        return EXIT_CONNECT
    if isinstance(error, NoWorker):
        return EXIT_TIMEOUT
    return EXIT_REJECTED


def _message(error: AgentRunError) -> str:
    return f"rejected: {error.message}" if isinstance(error, Rejected) else error.message


def _undecodable(argv: Sequence[str]) -> str | None:
    """The usage error for an argument that is not UTF-8 (the shell passed bytes Python
    could only decode with surrogates), or None: nothing such can be sent to Temporal."""
    for position, arg in enumerate(argv, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            shown = arg.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            return (
                f"durable-agent: argument {position} ({shown!r}) is not valid UTF-8 text; "
                "give ids, prompts and messages as UTF-8"
            )
    return None


def _parse(argv: Sequence[str]) -> int | Awaitable[int]:
    """Runs click: an exit code (help, usage error, `worker`) or the command to await."""
    if problem := _undecodable(argv):
        err(problem)
        return EXIT_USAGE
    try:
        outcome: Any = cli.main(
            args=list(argv), prog_name="durable-agent", standalone_mode=False, obj=Settings()
        )
    except click.ClickException as error:
        error.show()
        return error.exit_code
    except click.Abort:
        return EXIT_INTERRUPTED
    if outcome is None:
        return EXIT_OK
    if isinstance(outcome, int):
        return outcome
    return cast("Awaitable[int]", outcome)


async def _run(command: Awaitable[int]) -> int:
    try:
        return await command
    except AgentRunError as error:
        err(f"durable-agent: {_message(error)}")
        return exit_code(error)


async def amain(argv: Sequence[str] | None = None) -> int:
    """Runs one command in the current event loop and returns its exit code."""
    parsed = _parse(sys.argv[1:] if argv is None else argv)
    return parsed if isinstance(parsed, int) else await _run(parsed)


def main(argv: list[str] | None = None) -> int:
    """The `durable-agent` console script.

    With an explicit `argv` it returns the exit code. Without one (the console script,
    `python -m durable_agent.cli`) it ends the process itself: the Temporal client's Rust threads
    can abort CPython's shutdown (temporalio/sdk-python#300, exit status 134), which would
    break the exit codes scripts rely on. `worker` always ends the process.
    """
    try:
        parsed = _parse(sys.argv[1:] if argv is None else argv)
        code = parsed if isinstance(parsed, int) else asyncio.run(_run(parsed))
    except KeyboardInterrupt:
        err("interrupted")
        code = EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `durable-agent list | head -1`
        code = EXIT_OK
    if argv is None:
        exit_process(code)
    return code
