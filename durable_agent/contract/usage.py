"""Token and request accounting, and the limits a run must stay within."""

from __future__ import annotations

from pydantic import BaseModel

from ._fields import WIRE_CONFIG, omit_none, trusted
from .errors import UsageLimitExceeded

__all__ = ["Usage", "UsageLimits"]


class Usage(BaseModel):
    """What a run (or one model response) cost; field names follow starweaver's JSON.

    `cost` is the price in US dollars from the `genai-prices` table (`durable_agent.pricing`),
    `None` when nothing was priced. Adding usages adds the known costs: a request whose model
    has no known price adds nothing, so a run's cost is what its priced requests cost, and
    `None` only when none of them was priced. It is left out of the JSON when `None`.
    """

    model_config = WIRE_CONFIG

    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    tool_calls: int = 0
    total_tokens: int = 0
    cost: float | None = omit_none()

    def add(self, other: Usage) -> Usage:
        """A new total; usage objects handed out in checkpoints are never mutated."""
        return trusted(
            Usage,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            requests=self.requests + other.requests,
            tool_calls=self.tool_calls + other.tool_calls,
            total_tokens=self.total_tokens + other.total_tokens,
            cost=_add_costs(self.cost, other.cost),
        )


def _add_costs(left: float | None, right: float | None) -> float | None:
    if right is None:
        return left
    if left is None:
        return right
    return left + right


class UsageLimits(BaseModel):
    """Caps that end a run with `UsageLimitExceeded` before it spends more.

    `None` means unlimited. The request limit defaults to 50 so that a model stuck in a
    tool loop cannot spend without bound; raise it for long-running agents.
    """

    request_limit: int | None = 50
    tool_calls_limit: int | None = None
    input_tokens_limit: int | None = None
    output_tokens_limit: int | None = None
    total_tokens_limit: int | None = None
    cost_limit: float | None = None
    """US dollars (`Usage.cost`). The run fails before a model request when what is left of
    the budget cannot cover that request's estimate (what the run's previous request cost:
    a run's requests only grow), and after a request whose cost took it past the limit.
    Requests of models without a known price count nothing against it."""

    def check_before_request(self, usage: Usage, estimate: float | None = None) -> None:
        """`estimate`: what the next request is expected to cost (None: unknown)."""
        if self.cost_limit is not None and usage.cost is not None:
            left = self.cost_limit - usage.cost
            if left <= 0 or (estimate is not None and estimate > left):
                raise UsageLimitExceeded(
                    f"the next model request (about ${estimate or 0:.6f}) would exceed "
                    f"cost_limit=${self.cost_limit:.6f} (${usage.cost:.6f} spent); raise "
                    "UsageLimits.cost_limit to allow more",
                    limit="cost_limit",
                )
        if self.request_limit is not None and usage.requests + 1 > self.request_limit:
            raise UsageLimitExceeded(
                f"the next model request would exceed request_limit={self.request_limit} "
                f"({usage.requests} requests made); raise UsageLimits.request_limit to allow more",
                limit="request_limit",
            )

    def check_before_tool_calls(self, usage: Usage, count: int) -> None:
        if self.tool_calls_limit is not None and usage.tool_calls + count > self.tool_calls_limit:
            raise UsageLimitExceeded(
                f"running {count} more tool call(s) would exceed "
                f"tool_calls_limit={self.tool_calls_limit} ({usage.tool_calls} made)",
                limit="tool_calls_limit",
            )

    def check_tokens(self, usage: Usage) -> None:
        for name, used in (
            ("input_tokens_limit", usage.input_tokens),
            ("output_tokens_limit", usage.output_tokens),
            ("total_tokens_limit", usage.total_tokens),
        ):
            limit: int | None = getattr(self, name)
            if limit is not None and used > limit:
                raise UsageLimitExceeded(
                    f"{name.removesuffix('_limit')} reached {used}, over {name}={limit}",
                    limit=name,
                )
        if self.cost_limit is not None and usage.cost is not None and usage.cost > self.cost_limit:
            raise UsageLimitExceeded(
                f"cost reached ${usage.cost:.6f}, over cost_limit=${self.cost_limit:.6f}",
                limit="cost_limit",
            )
