"""Time travel from the shell: `fork` (a new run from any recorded boundary) and `retry`
(a failed run again from the boundary before its failure)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import click
from pydantic import ValidationError

from durable_agent import ModelSettings

from .context import EPILOG, JSON_OBJECT, Settings, connection_options
from .runs import report_started

__all__ = ["fork", "retry"]


def _checkpoint(value: str | None) -> int | str | None:
    """`--at 12` is an index, `--at ckpt_...` a checkpoint id; a negative number is
    neither, refused before anything starts."""
    if value is None:
        return None
    if value.isdigit():
        return int(value)
    if value.startswith("-") and value[1:].isdigit():
        raise click.BadParameter(
            f"{value} is negative; give a checkpoint's # (0 or more, as `durable-agent "
            "checkpoints ID` lists them) or its id",
            param_hint="'--at'",
        )
    if not value.strip():
        raise click.BadParameter("give a checkpoint's # or id", param_hint="'--at'")
    return value


def _settings(value: dict[str, Any] | None) -> ModelSettings | None:
    if value is None:
        return None
    try:
        return ModelSettings.model_validate(value)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        raise click.BadParameter(f"not valid model settings ({problems})") from None


@click.command(epilog=EPILOG)
@click.argument("workflow_id", metavar="ID")
@click.option(
    "--at",
    metavar="N|CHECKPOINT_ID",
    help="the boundary to start from: its # in `durable-agent checkpoints ID` or its id "
    "(default: the latest one a run can go on from)",
)
@click.option(
    "--id", "new_id", metavar="NEW_ID", help="the fork's workflow id (default ID-fork-XXXXXX)"
)
@click.option("--model", metavar="NAME", help="try it with another of the agent's allowed models")
@click.option(
    "--settings",
    "model_settings",
    type=JSON_OBJECT,
    help="model settings, e.g. '{\"temperature\": 0}'",
)
@click.option("--instructions", metavar="TEXT", help="replace the agent's instructions")
@click.option("--wait", is_flag=True, help="wait for the fork and print its output")
@connection_options(group=False)
@click.pass_obj
def fork(
    settings: Settings,
    workflow_id: str,
    at: str | None,
    new_id: str | None,
    model: str | None,
    model_settings: dict[str, Any] | None,
    instructions: str | None,
    wait: bool,
) -> Awaitable[int]:
    """Start a new run from a checkpoint of run ID (running or ended; ID is not touched).

    The fork does that boundary's work and goes on: no model request or tool call recorded
    before it is sent again. Prints the fork's workflow id; a bad --at fails the fork at
    once: exit 1 and the reason (the command waits a moment for the fork to get under
    way)."""
    checkpoint = _checkpoint(at)
    overrides = _settings(model_settings)

    async def start() -> int:
        source = (await settings.connect()).get(workflow_id)
        handle = await source.fork(
            checkpoint,
            new_id,
            model=model,
            model_settings=overrides,
            instructions=instructions,
        )
        where = (
            f"#{checkpoint}"
            if isinstance(checkpoint, int)
            else checkpoint or "its latest checkpoint"
        )
        note = f"forked {workflow_id} at {where}"
        return await report_started(handle, settings, wait, note, source=workflow_id)

    return start()


@click.command(epilog=EPILOG)
@click.argument("workflow_id", metavar="ID")
@click.option("--wait", is_flag=True, help="wait for the retried run and print its output")
@connection_options(group=False)
@click.pass_obj
def retry(settings: Settings, workflow_id: str, wait: bool) -> Awaitable[int]:
    """Start failed run ID again from the boundary before its failure (after fixing a tool
    or raising a limit): only the work that failed is done again.

    It runs under the same workflow id when the server allows a new run of it, else under
    a new id, which is printed (as always) and named on stderr."""

    async def start() -> int:
        handle = await (await settings.connect()).get(workflow_id).retry()
        if handle.id == workflow_id:
            note = f"retrying {workflow_id} from the boundary before its failure"
        else:
            note = (
                f"the server refused a new run of {workflow_id} (its id reuse policy); "
                f"retrying it as {handle.id}"
            )
        return await report_started(handle, settings, wait, note, source=workflow_id)

    return start()
