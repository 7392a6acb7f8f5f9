"""The approvals inbox: a web page for the humans in the loop (`durable-agent inbox`).

It lists every run waiting on a human (from the `AgentStatus` search attribute) with each
pending call, its arguments, the conversation that led to it, how long it has waited and
when it expires, and lets the approvers the agent names approve (with edited arguments),
deny (with a reason), deliver deferred results and resume suspended runs. See `app` for the
web side, `auth` for who is deciding, `server` for serving it.

Needs the `inbox` extra: `pip install 'durable-agent[inbox]'`.
"""

from __future__ import annotations

from .app import InboxSettings, create_app
from .auth import Identity, InboxConfigError, UserDirectory, hash_password
from .server import DEFAULT_PORT, serve_inbox, session_secret

__all__ = [
    "DEFAULT_PORT",
    "Identity",
    "InboxConfigError",
    "InboxSettings",
    "UserDirectory",
    "create_app",
    "hash_password",
    "serve_inbox",
    "session_secret",
]
