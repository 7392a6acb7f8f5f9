"""What every command shares: the connection settings, their options, exit codes and the
argument types whose errors name the bad value."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from durable_agent.contract.decisions import read_deferred_response
from durable_agent.environments.workspace.stores import DEFAULT_STORE_DIR, STORE_ENV
from durable_agent.temporal.client import DEFAULT_TASK_QUEUE, DEFAULT_TIMEOUT, AgentClient
from durable_agent.temporal.storage import STORAGE_ENV
from durable_agent.temporal.wire import MAX_APPROVAL_TIMEOUT_SECONDS

__all__ = [
    "EPILOG",
    "EXIT_CONNECT",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_REJECTED",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "JSON_OBJECT",
    "JSON_VALUE",
    "POSITIVE_INT",
    "SECONDS",
    "Settings",
    "connection_options",
    "workspace_store_option",
    "workspace_store_url",
]

EXIT_OK = 0
EXIT_REJECTED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_CONNECT = 4
EXIT_TIMEOUT = 5
EXIT_INTERRUPTED = 130

DEFAULT_ADDRESS = "localhost:7233"
DEFAULT_NAMESPACE = "default"

# `\b` keeps click from re-flowing the table.
EPILOG = """\
\b
exit codes:
  0    success
  1    the operation was rejected or the run failed (e.g. an update validator refused it,
       the workflow is already closed or is not an agent run, `run --wait` on a run that
       failed)
  2    usage error
  3    workflow not found
  4    cannot connect to the Temporal server
  5    no worker answered in time (query/update timed out; an update may still apply)
  130  interrupted (a started run goes on)
"""


@dataclass
class Settings:
    """Where to connect and how to print; one object shared by the group and the command
    (the command's own options override the group's)."""

    address: str = DEFAULT_ADDRESS
    namespace: str = DEFAULT_NAMESPACE
    task_queue: str = DEFAULT_TASK_QUEUE
    timeout: float = DEFAULT_TIMEOUT
    json: bool = False

    async def connect(self) -> AgentClient:
        return await AgentClient.connect(
            self.address,
            self.namespace,
            task_queue=self.task_queue,
            timeout=self.timeout,
            environ=environment(),
        )


DEV_DB = ".temporal/dev.db"
"""The embedded dev stack's database (`./scripts/dev`, `python worker.py --dev`), from the
folder it was started in; its payloads over 64 KiB are kept beside it (`dev_payloads`)."""


def dev_payloads(db: str | os.PathLike[str] = DEV_DB) -> Path:
    """Where the dev stack whose database is `db` keeps its large payloads: one rule for
    the stack that writes them and the CLI that reads them."""
    return (Path(db).parent / "payloads").resolve()


def environment() -> Mapping[str, str]:
    """The environment the CLI connects with: the process's own, plus the dev stack's
    payload store when the CLI runs where the dev stack keeps it and no store is set, so
    `status` and `watch` of a run with a large payload work without exporting anything."""
    payloads = dev_payloads()
    if os.environ.get(STORAGE_ENV) or not payloads.is_dir():
        return os.environ
    return {**os.environ, STORAGE_ENV: f"file://{payloads}"}


DEV_WORKSPACES = ".temporal/workspaces"
"""Where the dev stack keeps workspaces (`worker --dev` sets the store to it)."""


def workspace_store_url(given: str | None = None) -> str:
    """The workspace store `durable-agent workspace` reads: `--store`, else
    `DURABLE_AGENT_WORKSPACE_STORE`, else a worker's default here
    (`.durable-agent/workspaces`), or the dev stack's when only that one exists."""
    if given:
        return given
    configured = os.environ.get(STORE_ENV, "").strip()
    if configured:
        return configured
    default, dev = Path(DEFAULT_STORE_DIR).resolve(), Path(DEV_WORKSPACES).resolve()
    return (dev if dev.is_dir() and not default.is_dir() else default).as_uri()


def workspace_store_option(function: F) -> F:
    """`--store URL` of the workspace commands."""
    option = click.option(
        "--store",
        "store",
        metavar="URL",
        help=f"the workspace store (env {STORE_ENV}; default as the worker's: "
        f"{DEFAULT_STORE_DIR}, or {DEV_WORKSPACES} under the dev stack)",
    )
    return option(function)


# -- argument types -------------------------------------------------------------------------


class JsonValue(click.ParamType[Any, Any]):
    name = "JSON"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return read_deferred_response(value)
        except ValueError as error:
            self.fail(str(error), param, ctx)


class JsonObject(JsonValue):
    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        parsed = super().convert(value, param, ctx)
        if not isinstance(parsed, dict):
            self.fail(
                f'expected a JSON object like \'{{"env": "prod"}}\', got {value!r}', param, ctx
            )
        return parsed


class Seconds(click.ParamType[float, Any]):
    name = "SECONDS"

    def __init__(self, maximum: float | None = None) -> None:
        self.maximum = maximum

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"not a number of seconds: {value!r}", param, ctx)
        if not math.isfinite(seconds) or seconds <= 0:
            self.fail(f"must be a number of seconds above 0, got {value}", param, ctx)
        if self.maximum is not None and seconds > self.maximum:
            self.fail(f"must be at most {self.maximum:g} seconds, got {value}", param, ctx)
        return seconds


class PositiveInt(click.ParamType[int, Any]):
    name = "N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            number = int(value)
        except (TypeError, ValueError):
            self.fail(f"not a whole number: {value!r}", param, ctx)
        if number <= 0:
            self.fail(f"must be at least 1, got {value}", param, ctx)
        return number


JSON_VALUE = JsonValue()
JSON_OBJECT = JsonObject()
SECONDS = Seconds()
APPROVAL_SECONDS = Seconds(maximum=MAX_APPROVAL_TIMEOUT_SECONDS)
POSITIVE_INT = PositiveInt()


# -- the connection options -----------------------------------------------------------------

F = TypeVar("F", bound=Callable[..., Any])


def _store(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """Writes an option into the shared Settings: on the group always (its env/default),
    on a command only when given there, so `durable-agent --json status ID` and
    `durable-agent status ID --json` mean the same."""
    if value is None or (value is False and param.name == "json"):
        return
    assert param.name is not None
    setattr(ctx.ensure_object(Settings), param.name, value)


def _option(*names: str, **attrs: Any) -> Callable[[F], F]:
    return click.option(*names, expose_value=False, callback=_store, **attrs)


def connection_options(*, group: bool) -> Callable[[F], F]:
    """--address, --namespace, --task-queue, --timeout and --json, accepted before the
    command (on the group, with the environment's defaults) or after it."""

    def default(value: Any) -> Any:
        return value if group else None

    env = os.environ
    options = [
        _option(
            "--address",
            default=default(env.get("TEMPORAL_ADDRESS", DEFAULT_ADDRESS)),
            metavar="HOST:PORT",
            help=f"Temporal frontend (env TEMPORAL_ADDRESS, default {DEFAULT_ADDRESS})",
        ),
        _option(
            "--namespace",
            metavar="NAME",
            default=default(env.get("TEMPORAL_NAMESPACE", DEFAULT_NAMESPACE)),
            help=f"Temporal namespace (env TEMPORAL_NAMESPACE, default {DEFAULT_NAMESPACE})",
        ),
        _option(
            "--task-queue",
            "task_queue",
            metavar="QUEUE",
            default=default(env.get("TEMPORAL_TASK_QUEUE", DEFAULT_TASK_QUEUE)),
            help=f"the workers' task queue (env TEMPORAL_TASK_QUEUE, default {DEFAULT_TASK_QUEUE})",
        ),
        _option(
            "--timeout",
            type=SECONDS,
            default=default(DEFAULT_TIMEOUT),
            help=f"seconds to wait for the server or a worker (default {DEFAULT_TIMEOUT:g})",
        ),
        _option("--json", "json", is_flag=True, default=False, help="print machine-readable JSON"),
    ]

    def decorate(function: F) -> F:
        for option in reversed(options):
            function = option(function)
        return function

    return decorate
