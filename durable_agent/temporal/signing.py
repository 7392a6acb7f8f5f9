"""Signed approvals: decisions the workflow accepts only from whoever holds an approval key.

Without this, anyone who can reach Temporal (its Web UI, its CLI, a script) can send an
`approval` signal or a `submit_approval` update under any `decided_by` name and make a
risky tool run. With `DURABLE_AGENT_APPROVAL_KEYS` set on the worker, a decision counts only
if it carries an HMAC-SHA256 signature, made with one of those keys, over

    workflow id, tool call id, the decision's own fields (approved or denied, reason,
    override arguments, approver `decided_by`, and any field a decision gains later),
    the approver's groups, and when it was signed.

The inbox and `durable-agent approve` / `deny` (given the same variable) sign; the workflow
checks the signature, that it is fresh, and that the signed approver is one the agent
allows for the tool (`AgentBuilder.approvers`). A signature for another run, another call,
another verdict or another approver does not verify.

Keys use the encryption keys' format and rotation (`parse_keys`): a comma-separated list of
`id:base64key` entries of 32 random bytes (`python -m durable_agent.temporal.encryption
generate-key` makes one). The first entry signs; every entry verifies, so a new key goes
first and old ones stay after it until nothing signed with them is still in flight. Each
signature names its key id: `v1:<key id>:<base64url mac>`.

HMAC is a shared secret: whoever holds a key can sign as anyone. Give the keys to the
worker and the inbox (which vouches for the people it has logged in), and to admins who
decide from the CLI, never to the people who only use the inbox.

The worker hands its keys to the workflow through its `Hosting` (`.hosting`), never through
history. Verification is pure
(HMAC, JSON) and its only clock is `workflow.now()`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from .encryption import EncryptionError, parse_keys
from .wire import ApprovalSignal

__all__ = [
    "ENV_VAR",
    "MAX_FUTURE_SKEW",
    "MAX_SIGNATURE_AGE",
    "ApprovalKeyError",
    "ApprovalKeys",
    "canonical_time",
    "sign_signal",
    "signed_message",
    "signed_problem",
]

ENV_VAR = "DURABLE_AGENT_APPROVAL_KEYS"
VERSION = "v1"
DOMAIN = b"durable-agent approval v1\n"
"""Prefixed to every signed message, so a MAC made for anything else never verifies here."""
MAX_SIGNATURE_AGE = timedelta(hours=1)
"""A decision signed longer ago than this (by the workflow's clock) is refused: it bounds
what a leaked, unused signature is good for. Updates are applied within seconds; a signal
sent while no worker runs may outlive it (and is then dropped with a log line)."""
MAX_FUTURE_SKEW = timedelta(minutes=5)
"""Clock skew allowed between the signer and the worker."""


class ApprovalKeyError(EncryptionError):
    """`DURABLE_AGENT_APPROVAL_KEYS` does not parse. An `EncryptionError`, so every process
    that already stops on a bad encryption key (worker, CLI, inbox) stops on this too."""


def canonical_time(moment: datetime) -> str:
    """UTC with microseconds and a `Z`: one spelling for one instant, on both sides."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


LEGACY_NAMES = {"override_arguments": "arguments"}
"""Decision fields v1 signs under another name: kept, so signatures made by earlier
releases (an update in flight across an upgrade) still verify."""


def signed_message(workflow_id: str, signal: ApprovalSignal) -> bytes:
    """What a signature covers: the decision's own JSON (every field it has, so a field
    added to `ToolApprovalDecision` is covered without code here), for one call
    (`tool_call_id`) of one run (`workflow_id`), by one approver (`decided_by`, `groups`),
    at one time (`signed_at`). Canonical: sorted-key compact JSON, groups sorted and
    deduplicated; an unsigned decision claims the epoch (and fails)."""
    body = {
        LEGACY_NAMES.get(name, name): value
        for name, value in signal.decision().model_dump(mode="json").items()
    }
    signed_at = signal.signed_at or datetime.fromtimestamp(0, UTC)
    body.update(
        groups=sorted(set(signal.groups or ())),
        signed_at=canonical_time(signed_at),
        tool_call_id=signal.tool_call_id,
        workflow_id=workflow_id,
    )
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return DOMAIN + text.encode()


def _mac(key: bytes, message: bytes) -> str:
    digest = hmac.new(key, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


@dataclass(frozen=True)
class ApprovalKeys:
    """The approval keys of one process; `active` signs, all of them verify."""

    keys: Mapping[str, bytes] = field(repr=False)
    active: str

    def __post_init__(self) -> None:
        if self.active not in self.keys:
            raise ApprovalKeyError(f"the active approval key id {self.active!r} is not a key")

    @classmethod
    def parse(cls, spec: str) -> ApprovalKeys:
        try:
            keys, active = parse_keys(spec, env_var=ENV_VAR, purpose="HMAC-SHA256")
        except EncryptionError as error:
            raise ApprovalKeyError(str(error)) from None
        return cls(keys, active)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> ApprovalKeys | None:
        """The keys in `DURABLE_AGENT_APPROVAL_KEYS`, None when it is unset or blank."""
        spec = environ.get(ENV_VAR, "")
        return cls.parse(spec) if spec.strip() else None

    @property
    def key_ids(self) -> list[str]:
        return list(self.keys)

    def __repr__(self) -> str:  # never the keys themselves
        return f"ApprovalKeys(active={self.active!r}, key_ids={self.key_ids!r})"

    def sign(self, message: bytes) -> str:
        return f"{VERSION}:{self.active}:{_mac(self.keys[self.active], message)}"

    def problem(self, workflow_id: str, signal: ApprovalSignal, now: datetime) -> str | None:
        """Why `signal`'s signature does not make it a decision this worker accepts for run
        `workflow_id`, or None.

        `now` is the workflow's clock (`workflow.now()`), so the answer is deterministic.
        """
        call = signal.tool_call_id
        signature = signal.signature
        if not signature:
            return (
                f"the decision for tool call {call!r} is not signed, and this worker accepts "
                f"only signed approvals ({ENV_VAR} is set on it); decide in the approvals "
                f"inbox, or with `durable-agent approve`/`deny` given {ENV_VAR}"
            )
        version, _, rest = signature.partition(":")
        key_id, _, mac = rest.partition(":")
        if version != VERSION or not key_id or not mac:
            return (
                f"the signature of the decision for tool call {call!r} is not "
                f"`{VERSION}:<key id>:<mac>`"
            )
        key = self.keys.get(key_id)
        if key is None:
            known = ", ".join(repr(k) for k in self.keys)
            return (
                f"the decision for tool call {call!r} is signed with key id {key_id!r}, which "
                f"this worker does not have (it has {known}); add that key to {ENV_VAR} "
                "after the active one, or sign with a current key"
            )
        try:
            expected = _mac(key, signed_message(workflow_id, signal))
        except (TypeError, ValueError) as error:
            return f"the decision for tool call {call!r} cannot be signed: {error}"
        try:
            valid = hmac.compare_digest(expected.encode(), mac.encode("ascii"))
        except UnicodeEncodeError:
            valid = False
        if not valid:
            return (
                f"the signature does not match the decision for tool call {call!r}: it was "
                "made for another run, call, verdict, reason, arguments, approver, groups or "
                "time"
            )
        signed_at = (signal.signed_at or datetime.fromtimestamp(0, UTC)).astimezone(UTC)
        if signed_at > now + MAX_FUTURE_SKEW:
            return (
                f"the decision for tool call {call!r} is signed at {canonical_time(signed_at)}, "
                f"in the future of the workflow's clock ({canonical_time(now)}); check the "
                "signer's clock"
            )
        if now - signed_at > MAX_SIGNATURE_AGE:
            return (
                f"the decision for tool call {call!r} was signed at "
                f"{canonical_time(signed_at)}, more than {MAX_SIGNATURE_AGE} before the "
                f"workflow received it ({canonical_time(now)}); decide again"
            )
        return None


def sign_signal(
    keys: ApprovalKeys, workflow_id: str, signal: ApprovalSignal, now: datetime | None = None
) -> ApprovalSignal:
    """`signal` signed for run `workflow_id` at `now` (the signer's clock by default)."""
    signed = signal.model_copy(update={"signed_at": now or datetime.now(UTC), "signature": None})
    return signed.model_copy(update={"signature": keys.sign(signed_message(workflow_id, signed))})


def signed_problem(
    keys: ApprovalKeys, workflow_id: str, signal: ApprovalSignal, now: datetime
) -> str | None:
    """Why the workflow must refuse `signal` under `keys`, or None."""
    if signal.signature and signal.signed_at is None:
        return f"the decision for tool call {signal.tool_call_id!r} is signed but has no signed_at"
    if signal.signed_at is not None and signal.signed_at.tzinfo is None:
        return f"signed_at of the decision for tool call {signal.tool_call_id!r} has no time zone"
    return keys.problem(workflow_id, signal, now)
