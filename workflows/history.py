"""Chained digests over a message history.

The workflow and the model-request activity both compute them, so the activity can prove
that the messages it cached are exactly the prefix the workflow means, and the workflow can
send only the messages after that prefix.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from durable_agent import ModelMessage

__all__ = ["EMPTY_DIGEST", "HistoryDigest", "extend_digest"]

EMPTY_DIGEST = hashlib.sha256(b"durable-agent/history/v1").hexdigest()


def extend_digest(digest: str, messages: Iterable[ModelMessage]) -> str:
    for message in messages:
        step = hashlib.sha256(digest.encode())
        step.update(message.model_dump_json().encode())
        digest = step.hexdigest()
    return digest


class HistoryDigest:
    """The digest of a growing history, extended one message at a time."""

    def __init__(self) -> None:
        self.length = 0
        self.digest = EMPTY_DIGEST

    def advance(self, messages: list[ModelMessage], length: int) -> str:
        """The digest of `messages[:length]`; `messages` must extend what was seen before."""
        if length < self.length:
            self.length, self.digest = 0, EMPTY_DIGEST
        self.digest = extend_digest(self.digest, messages[self.length : length])
        self.length = length
        return self.digest
