"""Model requests scheduled by release 0.2 and before: their new messages travel whole.

Such a request names its history's prefix as today's do, but carries the run's
`ModelRequestInput` with the new messages in it instead of the packed form. It is served
as long as a run of that release may still be waiting to make one.
"""

from __future__ import annotations

from durable_agent import ModelMessage
from durable_agent.engine import nodes

from .digest import extend_digest

__all__ = ["whole_request"]


def whole_request(
    input: nodes.ModelRequestInput, prefix_digest: str
) -> tuple[nodes.ModelRequestInput, list[ModelMessage], str]:
    """The request, its new messages and their digest after the prefix's."""
    new = input.messages
    return input, new, extend_digest(prefix_digest, new)
