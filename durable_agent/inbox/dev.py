"""The inbox of the embedded default: `python worker.py --dev` (and `./scripts/dev`) serve it
next to the Temporal Web UI, with one user, `dev` (group `ops`).

The password is made at the first start and kept, with the session secret, beside the dev
server's database (`.temporal/inbox-dev-password`, `.temporal/inbox-secret`, mode 0600), so
restarts keep both the login and open sessions. Nothing here is meant for a shared server:
run `durable-agent inbox --users FILE` there.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from durable_agent.temporal.client import AgentClient

from .app import InboxSettings, create_app
from .auth import User, UserDirectory, hash_password
from .server import InboxServer

__all__ = ["DEV_GROUPS", "DEV_USER", "dev_login", "start_dev_inbox"]

DEV_USER = "dev"
DEV_GROUPS = ("ops",)
PASSWORD_FILE = "inbox-dev-password"
SECRET_FILE = "inbox-secret"


def _kept(path: Path, make: int) -> str:
    """The token in `path`, made (`make` random bytes) and saved 0600 if it is missing."""
    if path.exists():
        value = path.read_text().strip()
        if value:
            return value
    value = secrets.token_urlsafe(make)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(value + "\n")
    return value


def dev_login(directory: Path) -> tuple[UserDirectory, str, str]:
    """(the users, the dev user's password, the session secret), kept in `directory`."""
    password = _kept(directory / PASSWORD_FILE, 12)
    secret = _kept(directory / SECRET_FILE, 32)
    users = UserDirectory([User(DEV_USER, hash_password(password), DEV_GROUPS)])
    return users, password, secret


async def start_dev_inbox(
    address: str,
    namespace: str,
    task_queue: str,
    *,
    port: int,
    directory: Path,
    host: str = "127.0.0.1",
) -> tuple[InboxServer, str]:
    """Starts the dev inbox; returns it and the line to print for the person at the terminal."""
    users, password, secret = dev_login(directory)
    agents = await AgentClient.connect(address, namespace, task_queue=task_queue)
    app = create_app(agents, InboxSettings(secret=secret, users=users))
    server = InboxServer(app, host, port)
    await server.start()
    where = directory / PASSWORD_FILE
    signed = "signed" if agents.approval_keys is not None else "unsigned"
    line = (
        f"Approvals inbox: {server.url}  (log in as {DEV_USER} / {password}, groups "
        f"{', '.join(DEV_GROUPS)}; kept in {where}; decisions {signed})"
    )
    return server, line
