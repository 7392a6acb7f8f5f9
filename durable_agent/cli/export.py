"""`durable-agent export ID -o FILE.json`: a run's whole continue-as-new chain as one file,
to replay against new code (`durable_agent.testing.replay_histories`), to re-run offline
(`ReplayModel.from_history`) or, with `--redact`, to attach to a bug report.

The histories are read through the CLI's client, so its encryption keys and payload store
(`DURABLE_AGENT_ENCRYPTION_KEYS`, `DURABLE_AGENT_STORAGE`) decode what the worker encoded;
the file holds the plain payloads (see `durable_agent.testing.histories`).
"""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path

import click
from temporalio.service import RPCError, RPCStatusCode

from durable_agent.temporal.client import AgentRunError, CannotConnect, RunNotFound
from durable_agent.temporal.encryption import EncryptionError

from .context import EPILOG, EXIT_OK, Settings, connection_options
from .output import dump_line, err, out

__all__ = ["export"]


@click.command(epilog=EPILOG)
@click.argument("workflow_id", metavar="ID")
@click.option(
    "-o",
    "--output",
    "output",
    required=True,
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="the JSON file to write",
)
@click.option(
    "--redact",
    is_flag=True,
    help="replace message text, prompts, outputs and tool arguments (for a bug report)",
)
@click.option("--run-id", metavar="RUN_ID", help="export the chain up to this run (default: all)")
@connection_options(group=False)
@click.pass_obj
def export(
    settings: Settings, workflow_id: str, output: Path, redact: bool, run_id: str | None
) -> Awaitable[int]:
    """Write run ID's histories (every run of its chain, oldest first) to a JSON file."""
    return _export(settings, workflow_id, output, redact, run_id)


async def _export(
    settings: Settings, workflow_id: str, output: Path, redact: bool, run_id: str | None
) -> int:
    from durable_agent.testing.histories import export_chain

    agents = await settings.connect()
    try:
        chain = await export_chain(agents.client, workflow_id, run_id=run_id, redact=redact)
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise RunNotFound(
                f"no workflow with id {workflow_id!r} in namespace {agents.namespace!r}",
                workflow_id=workflow_id,
            ) from None
        if error.status == RPCStatusCode.UNAVAILABLE:
            raise CannotConnect(f"lost the connection to the Temporal server: {error}") from None
        raise AgentRunError(f"export failed: {error.message}", workflow_id=workflow_id) from None
    except (RuntimeError, EncryptionError) as error:  # a payload it cannot decode
        raise AgentRunError(
            f"export failed: cannot decode the run's payloads: {error}", workflow_id=workflow_id
        ) from None
    chain.write(output)
    events = sum(len(history.events) for history in chain.histories)
    if settings.json:
        dump_line(
            {
                "workflow_id": workflow_id,
                "file": str(output),
                "runs": len(chain.histories),
                "events": events,
                "redacted": redact,
            }
        )
    else:
        out(str(output))
        err(
            f"exported {len(chain.histories)} run(s), {events} events of {workflow_id!r}"
            + (" (redacted)" if redact else "")
        )
    return EXIT_OK
