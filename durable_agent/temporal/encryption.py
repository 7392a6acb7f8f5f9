"""Encrypts every payload before it reaches Temporal, so its database holds only ciphertext.

Prompts, messages, tool arguments and results, checkpoints, activity summaries and (with
the plugin's encoded failure attributes) error messages and stack traces all travel as
Temporal payloads; the server stores whatever the client hands it. Encrypting them in the
client and worker means a database dump, a backup or an operator with server access sees
nothing of the conversation. What Temporal does not route through the codec stays readable:
workflow ids, workflow/activity type names, task queues, timestamps and the search
attributes `AgentName`, `AgentStatus` and `PendingApprovals` (they are indexed for
filtering, and hold no conversation content).

Turn it on by giving the worker and every client that reads or writes runs the same keys
(a client without them sees `Unknown payload encoding binary/encrypted`):

    python -m durable_agent.temporal.encryption generate-key   # prints k20250601-3fa2:BASE64
    export DURABLE_AGENT_ENCRYPTION_KEYS='k20250601-3fa2:BASE64'
    python worker.py

    client = await Client.connect(address, plugins=[DurableAgentPlugin(codec=codec_from_env())])

`DURABLE_AGENT_ENCRYPTION_KEYS` is a comma-separated list of `id:base64key` entries of
32-byte AES-256 keys. The first entry encrypts; every entry decrypts. To rotate, generate a
key and put it first, keeping the old ones after it for as long as histories encrypted
with them exist (retention period of the namespace, longer for long-running workflows).
Plaintext payloads pass through decoding untouched, so switching encryption on does not
break runs started before it.

To read payloads in the Web UI or the `temporal` CLI, run the codec server
(`durable_agent.temporal.codec_server`) with the same keys. Replaying a downloaded history needs the
codec too: `Replayer(workflows=[], plugins=[DurableAgentPlugin(codec=...)])`.

Each payload is AES-256-GCM encrypted as a whole serialized `Payload` (metadata included,
so even its encoding is hidden) with a fresh 96-bit random nonce; the key id is the
associated data, so a ciphertext cannot be passed off as made under another key.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import os
import re
import secrets
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = [
    "ENCODING",
    "ENV_VAR",
    "KEY_ID_METADATA",
    "EncryptionCodec",
    "EncryptionError",
    "codec_from_env",
    "generate_key",
    "parse_keys",
]

ENV_VAR = "DURABLE_AGENT_ENCRYPTION_KEYS"
ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
KEY_BYTES = 32
NONCE_BYTES = 12
_KEY_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
"""Ids live in the env var (split on `,` and `:`) and in payload metadata; keep them plain."""


class EncryptionError(Exception):
    """A key is misconfigured, missing, or a payload failed authentication.

    Messages name key ids and the env var to fix, never key material.
    """


def _aesgcm() -> type[AESGCM]:
    """`cryptography` is an optional extra: only processes that encrypt need it."""
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as error:  # pragma: no cover - depends on the installation
        raise EncryptionError(
            f"{ENV_VAR} is set but the `cryptography` package is missing: "
            "pip install 'durable-agent[crypto]'"
        ) from error
    return AESGCM


def parse_keys(
    spec: str, *, env_var: str = ENV_VAR, purpose: str = "AES-256"
) -> tuple[dict[str, bytes], str]:
    """Parses `id:base64key,...` into (keys by id, the active id).

    Errors surface at start-up rather than at the first payload, when a worker would
    otherwise fail tasks over and over. `env_var` and `purpose` name the setting and what
    the 32-byte keys are for in those errors: the approval keys
    (`durable_agent.temporal.signing`) share this format.
    """
    keys: dict[str, bytes] = {}
    active = ""
    for raw in spec.split(","):
        entry = raw.strip()
        if not entry:
            continue
        key_id, sep, encoded = entry.partition(":")
        key_id = key_id.strip()
        if not sep or not key_id:
            raise EncryptionError(
                f"{env_var}: an entry is not `id:base64key` (entry number {len(keys) + 1}); "
                "generate one with `python -m durable_agent.temporal.encryption generate-key`"
            )
        if not _KEY_ID.match(key_id):
            raise EncryptionError(
                f"{env_var}: key id {key_id!r} must be 1-64 letters, digits, '.', '_' or '-'"
            )
        if key_id in keys:
            raise EncryptionError(f"{env_var}: key id {key_id!r} is listed twice")
        try:
            key = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise EncryptionError(
                f"{env_var}: key {key_id!r} is not valid base64"
            ) from None  # the cause would echo key material
        if len(key) != KEY_BYTES:
            raise EncryptionError(
                f"{env_var}: key {key_id!r} is {len(key)} bytes; {purpose} needs {KEY_BYTES}"
            )
        keys[key_id] = key
        active = active or key_id
    if not keys:
        raise EncryptionError(
            f"{env_var} lists no keys; set it to `id:base64key` "
            "(`python -m durable_agent.temporal.encryption generate-key` makes one)"
        )
    return keys, active


def generate_key(key_id: str | None = None) -> str:
    """A new `id:base64key` entry; the default id sorts by creation date, for rotation."""
    key_id = key_id or f"k{time.strftime('%Y%m%d', time.gmtime())}-{secrets.token_hex(2)}"
    if not _KEY_ID.match(key_id):
        raise EncryptionError(f"key id {key_id!r} must be 1-64 letters, digits, '.', '_' or '-'")
    # An AES-256 key is 32 random bytes: making one needs no `cryptography` installed.
    return f"{key_id}:{base64.b64encode(secrets.token_bytes(32)).decode()}"


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM payload codec with key ids, so keys can rotate without re-encrypting."""

    def __init__(self, keys: Mapping[str, bytes], active: str) -> None:
        if active not in keys:
            raise EncryptionError(f"the active key id {active!r} is not among the keys")
        for key_id, key in keys.items():
            if len(key) != KEY_BYTES:
                raise EncryptionError(
                    f"key {key_id!r} is {len(key)} bytes; AES-256 needs {KEY_BYTES}"
                )
        aesgcm = _aesgcm()
        self._ciphers = {key_id: aesgcm(key) for key_id, key in keys.items()}
        self.active = active

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> EncryptionCodec:
        spec = environ.get(ENV_VAR, "")
        if not spec.strip():
            raise EncryptionError(
                f"{ENV_VAR} is not set; set it to `id:base64key` "
                "(`python -m durable_agent.temporal.encryption generate-key` makes one)"
            )
        keys, active = parse_keys(spec)
        return cls(keys, active)

    @property
    def key_ids(self) -> list[str]:
        return list(self._ciphers)

    def __repr__(self) -> str:  # never the keys themselves
        return f"EncryptionCodec(active={self.active!r}, key_ids={self.key_ids!r})"

    def encrypt(self, payload: Payload) -> Payload:
        nonce = os.urandom(NONCE_BYTES)
        aad = self.active.encode()
        sealed = self._ciphers[self.active].encrypt(nonce, payload.SerializeToString(), aad)
        return Payload(
            metadata={"encoding": ENCODING, KEY_ID_METADATA: aad},
            data=nonce + sealed,
        )

    def decrypt(self, payload: Payload) -> Payload:
        """Opens an encrypted payload; anything else is returned as is.

        Passing plaintext through lets a worker with encryption on finish runs whose
        history began before it was switched on.
        """
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        key_id = payload.metadata.get(KEY_ID_METADATA, b"").decode(errors="replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise EncryptionError(
                f"payload encrypted with key id {key_id!r}, which this process does not have "
                f"(it has {', '.join(repr(k) for k in self._ciphers)}); add that key to "
                f"{ENV_VAR} (after the active one)"
            )
        from cryptography.exceptions import InvalidTag

        data = payload.data
        try:
            plain = cipher.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], key_id.encode())
        except InvalidTag:
            raise EncryptionError(
                f"payload encrypted with key id {key_id!r} failed authentication: it was "
                "tampered with or truncated, or the key under that id is not the one it was "
                "encrypted with"
            ) from None
        decoded = Payload()
        decoded.ParseFromString(plain)
        return decoded

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(p) for p in payloads]


def codec_from_env(environ: Mapping[str, str] = os.environ) -> EncryptionCodec | None:
    """The codec when `DURABLE_AGENT_ENCRYPTION_KEYS` is set, else None (no encryption).

    Every process that talks to the namespace (worker, CLI, your clients) should build its
    plugin as `DurableAgentPlugin(codec=codec_from_env())`, so they agree on the keys.
    """
    if not environ.get(ENV_VAR, "").strip():
        return None
    return EncryptionCodec.from_env(environ)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m durable_agent.temporal.encryption", description="Payload encryption keys."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    generate = commands.add_parser(
        "generate-key", help=f"print a new `id:base64key` entry for {ENV_VAR}"
    )
    generate.add_argument("--id", dest="key_id", help="key id (default k<YYYYMMDD>-<random>)")
    args = parser.parse_args(argv)
    try:
        entry = generate_key(args.key_id)
    except EncryptionError as error:
        parser.error(str(error))
    print(entry)
    print(
        f"# put it first in {ENV_VAR} (comma-separated) to encrypt with it; keep older keys "
        "after it so existing histories still decrypt",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
