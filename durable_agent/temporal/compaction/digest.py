"""Digests both sides compute: chained over a message history, and over a run's toolset
tool definitions.

The workflow and the model-request activity both compute them, so the activity can prove
that the messages it cached are exactly the prefix the workflow means, and the workflow can
send only the messages after that prefix (and a digest instead of the tool schemas).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

from durable_agent import ModelMessage, ToolDefinition

__all__ = ["DIGEST_CHARS", "EMPTY_DIGEST", "HistoryDigest", "definitions_digest", "extend_digest"]

DIGEST_CHARS = 16
"""Hex digits of a history digest written into an activity input: 64 bits tell one prefix
of one workflow's conversation from another; the full digest stays with each side."""

EMPTY_DIGEST = hashlib.sha256(b"durable-agent/history/v1").hexdigest()


def extend_digest(digest: str, messages: Iterable[ModelMessage]) -> str:
    for message in messages:
        step = hashlib.sha256(digest.encode())
        step.update(message.model_dump_json().encode())
        digest = step.hexdigest()
    return digest


class HistoryDigest:
    """The digest of a growing history, extended one message at a time.

    `offset` messages (held by earlier runs of the workflow) precede the list it is given;
    their digest is `base`. Lengths are global: they count those messages too.
    """

    def __init__(self, offset: int = 0, base: str = EMPTY_DIGEST) -> None:
        self.offset = offset
        self.length = offset
        self.digest = base
        self._ahead: tuple[int, str] | None = None

    def advance(self, messages: list[ModelMessage], length: int) -> str:
        """The digest of the first `length` messages, where `messages` starts at `offset`."""
        if self._ahead is not None and self.length <= self._ahead[0] <= length:
            self.length, self.digest = self._ahead
        self._ahead = None
        self.digest = self._through(messages, length)
        self.length = length
        return self.digest

    def peek(self, messages: list[ModelMessage], length: int) -> str:
        """The digest of the first `length` messages without moving on to them, remembered:
        the `advance` that reaches them later hashes only what comes after."""
        digest = self._through(messages, length)
        self._ahead = (length, digest)
        return digest

    def _through(self, messages: list[ModelMessage], length: int) -> str:
        if length < self.length:
            raise ValueError(f"history digest cannot go back from {self.length} to {length}")
        return extend_digest(
            self.digest, messages[self.length - self.offset : length - self.offset]
        )


def definitions_digest(definitions: Iterable[ToolDefinition]) -> str:
    canonical = json.dumps(
        [d.model_dump(mode="json") for d in definitions], sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()
