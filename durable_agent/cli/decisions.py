"""What a person decides for a run: `approve`, `deny`, `deferred`, `resume`, `suspend`,
`steer`.

The first four are workflow updates, so a refusal by the workflow's validator (a wrong call
id, a second decision, a resume of a run that is not suspended, an approver the agent does
not allow, a missing signature) exits 1 with its message. With DURABLE_AGENT_APPROVAL_KEYS
set, `approve` and `deny` sign the decision for `--by` and `--group`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

import click

from durable_agent.contract.decisions import denial_problem
from durable_agent.temporal.client import AgentRunHandle
from durable_agent.temporal.wire import UpdateAccepted

from .context import EPILOG, EXIT_OK, JSON_OBJECT, JSON_VALUE, Settings, connection_options
from .output import dump, out, q

__all__ = ["approve", "deferred", "deny", "resume", "steer", "suspend"]

BY_HELP = "who decided (kept for audit; checked against the agent's approvers)"
GROUP_HELP = "a group the decider belongs to (repeatable; checked against the approvers)"


async def _decide(
    settings: Settings,
    workflow_id: str,
    decide: Callable[[AgentRunHandle], Awaitable[UpdateAccepted]],
) -> int:
    handle = (await settings.connect()).get(workflow_id)
    accepted = await decide(handle)
    if settings.json:
        dump(accepted)
    else:
        out(accepted.message)
    return EXIT_OK


NOTE_HELP = "a remark for the agent: its model reads it with the call's result"
HOLDER_HELP = (
    "the workflow holding the call (a sub-agent's, as `status` lists it): needed when two "
    "workflows of the run's tree wait on calls of the same id"
)


def _reason(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if problem := denial_problem(value):
        raise click.BadParameter(problem)
    return value


@click.command(epilog=EPILOG)
@click.argument("workflow_id", metavar="ID")
@click.argument("call_id")
@click.option("--by", metavar="NAME", help=BY_HELP)
@click.option("--group", "groups", metavar="GROUP", multiple=True, help=GROUP_HELP)
@click.option("--args", "arguments", type=JSON_OBJECT, help="run the tool with these arguments")
@click.option("--note", help=NOTE_HELP)
@click.option("--holder", metavar="WORKFLOW_ID", help=HOLDER_HELP)
@connection_options(group=False)
@click.pass_obj
def approve(
    settings: Settings,
    workflow_id: str,
    call_id: str,
    by: str | None,
    groups: tuple[str, ...],
    arguments: dict[str, Any] | None,
    note: str | None,
    holder: str | None,
) -> Awaitable[int]:
    """Approve pending tool call CALL_ID of run ID (the ids `status` lists)."""
    return _decide(
        settings,
        workflow_id,
        lambda run: run.approve(
            call_id,
            by=by,
            override_arguments=arguments,
            note=note,
            groups=list(groups) or None,
            holder=holder,
        ),
    )


@click.command(epilog=EPILOG)
@click.argument("workflow_id", metavar="ID")
@click.argument("call_id")
@click.option("--reason", required=True, callback=_reason, help="why; the model sees it")
@click.option("--by", metavar="NAME", help=BY_HELP)
@click.option("--group", "groups", metavar="GROUP", multiple=True, help=GROUP_HELP)
@click.option("--note", help=NOTE_HELP)
@click.option("--holder", metavar="WORKFLOW_ID", help=HOLDER_HELP)
@connection_options(group=False)
@click.pass_obj
def deny(
    settings: Settings,
    workflow_id: str,
    call_id: str,
    reason: str,
    by: str | None,
    groups: tuple[str, ...],
    note: str | None,
    holder: str | None,
) -> Awaitable[int]:
    """Deny pending tool call CALL_ID of run ID: the tool never runs."""
    return _decide(
        settings,
        workflow_id,
        lambda run: run.deny(
            call_id, reason, by=by, note=note, groups=list(groups) or None, holder=holder
        ),
    )


@click.command(epilog=EPILOG)
@click.argument("workflow_id", metavar="ID")
@click.argument("call_id")
@click.option("--response", type=JSON_VALUE, required=True, help="the call's result as JSON")
@click.option("--error", "failed", is_flag=True, help="the call failed with RESPONSE")
@connection_options(group=False)
@click.pass_obj
def deferred(
    settings: Settings, workflow_id: str, call_id: str, response: Any, failed: bool
) -> Awaitable[int]:
    """Deliver the result of deferred tool call CALL_ID of run ID."""
    state: Literal["success", "error"] = "error" if failed else "success"
    return _decide(settings, workflow_id, lambda run: run.deferred(call_id, response, state))


@click.command(epilog=EPILOG)
@click.argument("workflow_id", metavar="ID")
@click.option("--reason", help="recorded with the resume")
@connection_options(group=False)
@click.pass_obj
def resume(settings: Settings, workflow_id: str, reason: str | None) -> Awaitable[int]:
    """Resume suspended run ID."""
    return _decide(settings, workflow_id, lambda run: run.resume(reason))


@click.command(epilog=EPILOG)
@click.argument("workflow_id", metavar="ID")
@click.option("--reason", required=True, help="shown while the run is suspended")
@connection_options(group=False)
@click.pass_obj
def suspend(settings: Settings, workflow_id: str, reason: str) -> Awaitable[int]:
    """Pause run ID at its next boundary, until `durable-agent resume ID`."""

    async def send() -> int:
        handle = (await settings.connect()).get(workflow_id)
        await handle.suspend(reason)
        message = "suspend requested; the run pauses at its next boundary"
        if settings.json:
            dump({"workflow_id": handle.id, "message": message, "reason": reason})
        else:
            out(f"{message} (resume: durable-agent resume {q(handle.id)})")
        return EXIT_OK

    return send()


@click.command(epilog=EPILOG)
@click.argument("workflow_id", metavar="ID")
@click.option("--reason", help="why; recorded with the cancellation")
@connection_options(group=False)
@click.pass_obj
def cancel(settings: Settings, workflow_id: str, reason: str | None) -> Awaitable[int]:
    """Cancel run ID: it ends `cancelled`, its sub-agents' runs with it, and no model
    request follows. Refused (exit 1) for a run that has already ended."""

    async def send() -> int:
        handle = (await settings.connect()).get(workflow_id)
        await handle.cancel(reason)
        message = "cancellation requested; the run ends cancelled"
        if settings.json:
            dump({"workflow_id": handle.id, "message": message, "reason": reason})
        else:
            out(f"{message} (follow: durable-agent status {q(handle.id)})")
        return EXIT_OK

    return send()


@click.command(epilog=EPILOG)
@click.argument("workflow_id", metavar="ID")
@click.argument("message")
@connection_options(group=False)
@click.pass_obj
def steer(settings: Settings, workflow_id: str, message: str) -> Awaitable[int]:
    """Send MESSAGE to running agent ID: the model reads it at its next request (e.g.
    "also check Rome"). Refused (exit 1) when it is empty or the run has ended."""
    return _decide(settings, workflow_id, lambda run: run.steer(message))
