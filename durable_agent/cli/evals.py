"""`durable-agent eval MODULE:DATASET --agent NAME`: a pydantic-evals dataset evaluated on
the workers (each case a durable run, see `durable_agent.evals`), its report printed as
pydantic-evals renders it. Exit 1 when an assertion failed or a case could not run; 2 for
a dataset that cannot be found or is not prompts, and for an agent no worker hosts."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Awaitable
from typing import Any

import click

from .context import EPILOG, EXIT_OK, EXIT_REJECTED, EXIT_USAGE, Settings, connection_options
from .output import err, out

__all__ = ["eval_command", "load_dataset"]


def load_dataset(spec: str) -> Any:
    """The `pydantic_evals.Dataset` named `module:attribute` (the current directory is on
    the import path, as for `python -m`); `click.UsageError` saying what is wrong."""
    from pydantic_evals import Dataset

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise click.UsageError(f"{spec!r}: give the dataset as MODULE:NAME (e.g. evals:cases)")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise click.UsageError(f"cannot import {module_name!r}: {error}") from None
    dataset = getattr(module, attribute, None)
    if dataset is None:
        raise click.UsageError(f"module {module_name!r} has no {attribute!r}")
    if callable(dataset) and not isinstance(dataset, Dataset):
        dataset = dataset()
    if not isinstance(dataset, Dataset):
        raise click.UsageError(
            f"{spec} is a {type(dataset).__name__}, not a pydantic_evals.Dataset"
        )
    return dataset


@click.command("eval", epilog=EPILOG)
@click.argument("dataset_spec", metavar="MODULE:DATASET")
@click.option("--agent", "agent", required=True, metavar="NAME", help="the agent the workers host")
@click.option(
    "--name",
    metavar="NAME",
    help="the evaluation's name (default: the dataset's): the same name again reuses its runs",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="cases running at once",
)
@connection_options(group=False)
@click.pass_obj
def eval_command(
    settings: Settings, dataset_spec: str, agent: str, name: str | None, concurrency: int
) -> Awaitable[int]:
    """Evaluate AGENT on a pydantic-evals dataset of prompts, each case a durable run."""
    dataset = load_dataset(dataset_spec)
    return _evaluate(settings, dataset, agent, name, concurrency)


async def _evaluate(
    settings: Settings, dataset: Any, agent: str, name: str | None, concurrency: int
) -> int:
    from durable_agent import UnknownAgentError
    from durable_agent.evals import InvalidDataset, evaluate

    client = await settings.connect()
    try:
        report = await evaluate(
            agent, dataset, client=client, name=name, max_concurrency=concurrency
        )
    except (InvalidDataset, UnknownAgentError) as error:
        err(f"durable-agent: {error.message}")
        return EXIT_USAGE
    out(report.render(include_output=False, include_averages=True))
    failed = [
        case.name
        for case in report.cases
        if any(not result.value for result in case.assertions.values())
    ]
    if failed or report.failures:
        errored = [failure.name for failure in report.failures]
        err(
            "durable-agent: "
            + "; ".join(
                part
                for part in (
                    f"assertions failed in {', '.join(failed)}" if failed else "",
                    f"cases that could not run: {', '.join(errored)}" if errored else "",
                )
                if part
            )
        )
        return EXIT_REJECTED
    return EXIT_OK
