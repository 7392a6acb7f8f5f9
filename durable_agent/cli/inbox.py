"""`durable-agent inbox`: serve the approvals inbox; `inbox hash-password` for its users file.

    durable-agent inbox --users inbox-users.toml            # its own login
    durable-agent inbox --trusted-user-header X-Forwarded-User \\
        --trusted-groups-header X-Forwarded-Groups          # behind oauth2-proxy

The web stack (the `inbox` extra) is imported only when the command runs, so the rest of
the CLI works without it.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable
from dataclasses import dataclass

import click

from .context import (
    EPILOG,
    EXIT_OK,
    EXIT_USAGE,
    Settings,
    connection_options,
    workspace_store_url,
)
from .output import err, out

__all__ = ["inbox"]

MISSING_EXTRA = (
    "durable-agent inbox needs the `inbox` extra (starlette, jinja2, uvicorn, ...): "
    "pip install 'durable-agent[inbox]'"
)


@dataclass(frozen=True)
class InboxOptions:
    host: str
    port: int
    users_file: str | None
    trusted_user_header: str | None
    trusted_groups_header: str | None
    poll_seconds: float
    secure_cookies: bool
    agents: tuple[str, ...]


@click.group(invoke_without_command=True, epilog=EPILOG)
@click.option("--port", type=click.IntRange(0, 65535), default=8234, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option(
    "--users",
    "users_file",
    metavar="FILE",
    help="TOML file of users, password hashes and groups (env DURABLE_AGENT_INBOX_USERS_FILE; "
    "or the users in DURABLE_AGENT_INBOX_USERS)",
)
@click.option(
    "--trusted-user-header",
    metavar="NAME",
    help="take the identity from this header set by an authenticating proxy "
    "(e.g. X-Forwarded-User); no login of the inbox's own",
)
@click.option(
    "--trusted-groups-header",
    metavar="NAME",
    help="with --trusted-user-header: comma-separated groups (e.g. X-Forwarded-Groups)",
)
@click.option(
    "--poll-seconds",
    type=click.FloatRange(0.5, 60),
    default=2.0,
    show_default=True,
    help="how often the page refreshes the list",
)
@click.option("--secure-cookies", is_flag=True, help="session cookie over HTTPS only")
@click.option(
    "--agent", "agent_names", metavar="NAME", multiple=True, help="only runs of this agent"
)
@connection_options(group=False)
@click.pass_context
def inbox(
    ctx: click.Context,
    port: int,
    host: str,
    users_file: str | None,
    trusted_user_header: str | None,
    trusted_groups_header: str | None,
    poll_seconds: float,
    secure_cookies: bool,
    agent_names: tuple[str, ...],
) -> Awaitable[int] | None:
    """Serve the approvals inbox: every run waiting on a human, with Approve / Deny buttons
    for the approvers each agent names. Runs until Ctrl-C.

    Decisions record the logged-in identity as `decided_by`. With
    DURABLE_AGENT_APPROVAL_KEYS set (as on the worker), they are signed."""
    if ctx.invoked_subcommand is not None:
        return None
    if trusted_user_header and users_file:
        raise click.UsageError("--users and --trusted-user-header exclude each other")
    if trusted_groups_header and not trusted_user_header:
        raise click.UsageError("--trusted-groups-header needs --trusted-user-header")
    settings = ctx.find_object(Settings)
    assert settings is not None
    options = InboxOptions(
        host,
        port,
        users_file,
        trusted_user_header,
        trusted_groups_header,
        poll_seconds,
        secure_cookies,
        agent_names,
    )
    return _serve(settings, options)


async def _serve(settings: Settings, options: InboxOptions) -> int:
    try:
        from durable_agent.inbox import (
            InboxConfigError,
            InboxSettings,
            UserDirectory,
            create_app,
            session_secret,
        )
        from durable_agent.inbox.server import serve_inbox
    except ImportError:
        err(MISSING_EXTRA)
        return EXIT_USAGE
    try:
        users = None if options.trusted_user_header else UserDirectory.load(options.users_file)
        inbox_settings = InboxSettings(
            secret=session_secret(),
            users=users,
            trusted_user_header=options.trusted_user_header,
            trusted_groups_header=options.trusted_groups_header,
            poll_seconds=options.poll_seconds,
            secure_cookies=options.secure_cookies,
            agents=options.agents,
            workspace_store=workspace_store_url(),
        )
    except InboxConfigError as error:
        err(f"durable-agent inbox: {error}")
        return EXIT_USAGE
    agents = await settings.connect()
    app = create_app(agents, inbox_settings)
    who = (
        f"identity from the {options.trusted_user_header} header"
        if options.trusted_user_header
        else f"users: {', '.join(users.names()) if users else ''}"
    )
    keys = agents.approval_keys
    signing = (
        f"decisions signed with approval key {keys.active!r}"
        if keys is not None
        else "decisions NOT signed (set DURABLE_AGENT_APPROVAL_KEYS here and on the worker)"
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await serve_inbox(
            app,
            options.host,
            options.port,
            stop,
            announce=f"Approvals inbox: {{url}}  ({who}; {signing}; Ctrl-C stops it)",
        )
    except InboxConfigError as error:
        err(f"durable-agent inbox: {error}")
        return EXIT_USAGE
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    return EXIT_OK


@inbox.command("hash-password", epilog=EPILOG)
@click.option("--user", "name", metavar="NAME", help="print a users-file entry for NAME")
@click.option("--group", "groups", metavar="GROUP", multiple=True, help="with --user (repeatable)")
@click.option("--stdin", "from_stdin", is_flag=True, help="read the password from stdin")
def hash_password_command(name: str | None, groups: tuple[str, ...], from_stdin: bool) -> int:
    """Print the scrypt hash of a password, for the inbox's users file."""
    try:
        from durable_agent.inbox.auth import hash_password
    except ImportError:
        err(MISSING_EXTRA)
        return EXIT_USAGE
    if from_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    if not password:
        raise click.UsageError("the password is empty")
    hashed = hash_password(password)
    if name is None:
        out(hashed)
        return EXIT_OK
    listed = ", ".join(f'"{g}"' for g in groups)
    out(f'[users."{name}"]\npassword_hash = "{hashed}"\ngroups = [{listed}]')
    return EXIT_OK
