"""Who is using the inbox: a login of its own, or a reverse proxy's word.

The embedded default keeps users and scrypt password hashes in a TOML file
(`--users FILE`, DURABLE_AGENT_INBOX_USERS_FILE):

    [users.alice]
    password_hash = "scrypt$32768$8$1$<salt>$<hash>"   # durable-agent inbox hash-password
    groups = ["ops"]

or, for containers, in DURABLE_AGENT_INBOX_USERS: entries `name:hash` or
`name:hash:group,group` separated by spaces or newlines. A user's groups are checked
against `AgentBuilder.approvers` like their name.

Behind a proxy that authenticates (oauth2-proxy and the like) the identity is the value of
a header the proxy sets, `--trusted-user-header X-Forwarded-User`, and the groups those of
`--trusted-groups-header X-Forwarded-Groups` (comma-separated). The inbox must then be
reachable only through that proxy, which must strip the headers from what clients send.

The password hash is the standard library's scrypt (n=2^15, r=8, p=1): no native
dependency, and memory-hard.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import os
import re
import secrets
import time
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "USERS_ENV",
    "USERS_FILE_ENV",
    "Identity",
    "InboxConfigError",
    "LoginThrottle",
    "User",
    "UserDirectory",
    "hash_password",
    "identity_from_headers",
    "verify_password",
]

USERS_ENV = "DURABLE_AGENT_INBOX_USERS"
USERS_FILE_ENV = "DURABLE_AGENT_INBOX_USERS_FILE"
SCRYPT_N = 2**15
SCRYPT_R = 8
SCRYPT_P = 1
SCRYPT_MAXMEM = 128 * SCRYPT_N * SCRYPT_R * 2
_NAME = re.compile(r"^[^\s:,;\x00-\x1f\x7f]{1,128}$")
"""A user or group name: no spaces, no separators of the env format, no control characters.
E-mail addresses (oauth2-proxy's usual user) pass."""


class InboxConfigError(Exception):
    """The inbox cannot start: the message names the setting and what is wrong with it."""


@dataclass(frozen=True)
class Identity:
    """The person behind a request: what `decided_by` and the signed `groups` record."""

    user: str
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class User:
    name: str
    password_hash: str = field(repr=False)
    groups: tuple[str, ...] = ()


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """`scrypt$N$r$p$<salt>$<hash>` (base64), for the users file."""
    if not password:
        raise ValueError("the password is empty")
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.scrypt(
        password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, maxmem=SCRYPT_MAXMEM
    )
    encode = base64.b64encode
    return (
        f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${encode(salt).decode()}${encode(digest).decode()}"
    )


def _parse_hash(encoded: str) -> tuple[int, int, int, bytes, bytes]:
    parts = encoded.split("$")
    if len(parts) != 6 or parts[0] != "scrypt":
        raise ValueError("not `scrypt$N$r$p$salt$hash`")
    try:
        n, r, p = (int(x) for x in parts[1:4])
        salt = base64.b64decode(parts[4], validate=True)
        digest = base64.b64decode(parts[5], validate=True)
    except (ValueError, binascii.Error):
        raise ValueError("not `scrypt$N$r$p$salt$hash` with numbers and base64") from None
    if n < 2**14 or n & (n - 1) or not 1 <= r <= 32 or not 1 <= p <= 16 or len(digest) < 16:
        raise ValueError(f"scrypt parameters n={n}, r={r}, p={p} are out of range")
    return n, r, p, salt, digest


def verify_password(password: str, encoded: str) -> bool:
    try:
        n, r, p, salt, digest = _parse_hash(encoded)
    except ValueError:
        return False
    candidate = hashlib.scrypt(
        password.encode(),
        salt=salt,
        n=n,
        r=r,
        p=p,
        maxmem=max(SCRYPT_MAXMEM, 128 * n * r * 2),
        dklen=len(digest),
    )
    return hmac.compare_digest(candidate, digest)


def _check_name(what: str, name: object, where: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise InboxConfigError(
            f"{where}: {what} {name!r} must be 1-128 characters without spaces, ':', ',' or ';'"
        )
    return name


def _user(name: object, password_hash: object, groups: Iterable[object], where: str) -> User:
    checked = _check_name("user name", name, where)
    if not isinstance(password_hash, str):
        raise InboxConfigError(f"{where}: user {checked!r} has no password_hash string")
    try:
        _parse_hash(password_hash)
    except ValueError as error:
        raise InboxConfigError(
            f"{where}: the password hash of user {checked!r} is {error}; make one with "
            "`durable-agent inbox hash-password`"
        ) from None
    return User(checked, password_hash, tuple(_check_name("group", g, where) for g in groups))


@functools.cache
def _dummy_hash() -> str:
    """Checked against for unknown user names, so a login takes as long for them as for
    real ones and the response time does not tell which names exist."""
    return hash_password(secrets.token_urlsafe(16))


class UserDirectory:
    """The inbox's own users. Looked up on every request, so a user removed from the file
    (after a restart) loses access at once, whatever session cookie they hold."""

    def __init__(self, users: Iterable[User]) -> None:
        self._users: dict[str, User] = {}
        for user in users:
            if user.name in self._users:
                raise InboxConfigError(f"user {user.name!r} is listed twice")
            self._users[user.name] = user
        if not self._users:
            raise InboxConfigError(
                "no inbox users are configured; add one to the users file (--users) or "
                f"{USERS_ENV}, or use --trusted-user-header behind an authenticating proxy"
            )

    @classmethod
    def from_file(cls, path: str | Path) -> UserDirectory:
        where = str(path)
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise InboxConfigError(f"users file {where} does not exist") from None
        except (OSError, UnicodeDecodeError) as error:
            raise InboxConfigError(f"users file {where} cannot be read: {error}") from None
        except tomllib.TOMLDecodeError as error:
            raise InboxConfigError(f"users file {where} is not valid TOML: {error}") from None
        table = data.get("users")
        if not isinstance(table, dict):
            raise InboxConfigError(
                f'users file {where} has no [users.NAME] tables (password_hash = "...", '
                "groups = [...])"
            )
        users = []
        for name, entry in table.items():
            if not isinstance(entry, dict):
                raise InboxConfigError(f"{where}: users.{name} must be a table")
            unknown = sorted(set(entry) - {"password_hash", "groups"})
            if unknown:
                raise InboxConfigError(
                    f"{where}: users.{name} has unknown key(s) {unknown}; the keys are "
                    "password_hash and groups"
                )
            groups = entry.get("groups", [])
            if not isinstance(groups, list):
                raise InboxConfigError(f"{where}: users.{name}.groups must be a list of names")
            users.append(_user(name, entry.get("password_hash"), groups, where))
        return cls(users)

    @classmethod
    def from_spec(cls, spec: str, where: str = USERS_ENV) -> UserDirectory:
        users = []
        for entry in spec.split():
            name, _, rest = entry.partition(":")
            password_hash, _, groups = rest.partition(":")
            users.append(
                _user(name, password_hash or None, [g for g in groups.split(",") if g], where)
            )
        return cls(users)

    @classmethod
    def load(cls, users_file: str | None, environ: Mapping[str, str] = os.environ) -> UserDirectory:
        """From `users_file`, else the file DURABLE_AGENT_INBOX_USERS_FILE names, else the
        users in DURABLE_AGENT_INBOX_USERS."""
        path = users_file or environ.get(USERS_FILE_ENV)
        if path:
            return cls.from_file(path)
        spec = environ.get(USERS_ENV, "")
        if spec.strip():
            return cls.from_spec(spec)
        raise InboxConfigError(
            "the inbox needs users: pass --users FILE (or set "
            f"{USERS_FILE_ENV} or {USERS_ENV}), or --trusted-user-header NAME behind an "
            "authenticating proxy"
        )

    def names(self) -> list[str]:
        return sorted(self._users)

    def identity(self, name: str) -> Identity | None:
        user = self._users.get(name)
        return Identity(user.name, user.groups) if user is not None else None

    def authenticate(self, name: str, password: str) -> Identity | None:
        user = self._users.get(name)
        ok = verify_password(password, user.password_hash if user else _dummy_hash())
        return Identity(user.name, user.groups) if user is not None and ok else None


def identity_from_headers(
    headers: Mapping[str, str], user_header: str, groups_header: str | None
) -> Identity | None:
    """The proxy's identity; None when the header is missing or not a plain name."""
    user = headers.get(user_header, "").strip()
    if not user or not _NAME.match(user):
        return None
    groups: tuple[str, ...] = ()
    if groups_header:
        raw = headers.get(groups_header, "")
        groups = tuple(g.strip() for g in raw.split(",") if g.strip() and _NAME.match(g.strip()))
    return Identity(user, groups)


class LoginThrottle:
    """Refuses logins for a name after `limit` failures within `window` seconds, for
    `lockout` seconds: slows password guessing without a store of its own."""

    def __init__(self, limit: int = 5, window: float = 300.0, lockout: float = 60.0) -> None:
        self.limit = limit
        self.window = window
        self.lockout = lockout
        self._failures: dict[str, list[float]] = {}

    def blocked_for(self, name: str, now: float | None = None) -> float:
        """Seconds until `name` may try again (0: now)."""
        now = time.monotonic() if now is None else now
        recent = [t for t in self._failures.get(name, []) if now - t < self.window]
        self._failures[name] = recent
        if len(recent) < self.limit:
            return 0.0
        return max(0.0, recent[-1] + self.lockout - now)

    def failed(self, name: str, now: float | None = None) -> None:
        self._failures.setdefault(name, []).append(time.monotonic() if now is None else now)
        if len(self._failures) > 10_000:  # bounded memory under a spray of names
            self._failures.pop(next(iter(self._failures)))

    def succeeded(self, name: str) -> None:
        self._failures.pop(name, None)
