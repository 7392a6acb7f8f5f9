"""Model quotas: a provider's limits (requests and tokens per minute, concurrent requests)
shared by every run that uses the same model, so a fleet waits its turn instead of spending
its retries on 429s.

`ModelQuota` is the configuration, keyed by `provider:model` (`openai:gpt-4.1`); `QuotaWindow`
is the arithmetic: given what was granted recently, when may the next request go. Providers
enforce per-minute limits over shorter periods, so the window also keeps any 10 seconds to a
sixth of a per-minute figure. Engine-agnostic: the Temporal integration keeps one window per
key in a workflow (`durable_agent.temporal.quota`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from ..contract.errors import UserError
from ..contract.messages import ModelMessage, ModelResponse
from ..models.base import Model

__all__ = [
    "BURST_SECONDS",
    "SEND_MARGIN",
    "SHORT_SEND_MARGIN",
    "ModelQuota",
    "QuotaWindow",
    "estimate_tokens",
    "model_key",
    "parse_quota",
]

MINUTE = 60.0
BURST_SECONDS = 10.0
"""The shorter period providers quantize a per-minute limit to: no more than a sixth of a
per-minute figure goes out in any 10 seconds."""


class ModelQuota(BaseModel):
    """One model's limits; None: that figure is not limited."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    requests_per_minute: int | None = Field(default=None, gt=0)
    tokens_per_minute: int | None = Field(default=None, gt=0)
    max_concurrent: int | None = Field(default=None, gt=0)

    def burst_requests(self) -> int | None:
        """Requests allowed in any 10 seconds: a sixth of the minute's, at least one."""
        if self.requests_per_minute is None:
            return None
        return max(1, math.floor(self.requests_per_minute * BURST_SECONDS / MINUTE))

    def burst_tokens(self) -> int | None:
        if self.tokens_per_minute is None:
            return None
        return max(1, math.floor(self.tokens_per_minute * BURST_SECONDS / MINUTE))


def estimate_tokens(messages: Sequence[ModelMessage]) -> int:
    """A request's tokens before it is sent (a quota's budget is spent before the provider
    says): the last response's input and output, again its output for the answer, plus
    what was added since at about four characters a token. After the request the provider's
    own count replaces this estimate."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, ModelResponse) and message.usage.total_tokens:
            added = messages[index + 1 :]
            return (
                message.usage.total_tokens + message.usage.output_tokens + _characters(added) // 4
            )
    return _characters(messages) // 4 + FIRST_ANSWER_TOKENS


FIRST_ANSWER_TOKENS = 256
"""What a run's first request is assumed to answer with, before any usage is known."""


def _characters(messages: Sequence[ModelMessage]) -> int:
    return sum(len(message.model_dump_json()) for message in messages)


def model_key(model: Model) -> str | None:
    """`provider:model_name`, the key quotas are configured under; None for a model no
    provider serves (test and function models)."""
    provider = model.provider
    return f"{provider}:{model.model_name}" if provider else None


_FIELDS = {"rpm": "requests_per_minute", "tpm": "tokens_per_minute", "concurrent": "max_concurrent"}
_KEY = re.compile(r"^[\w.\-]+:[\w.\-/:@]+$")


def parse_quota(spec: str) -> tuple[str, ModelQuota]:
    """`openai:gpt-4.1=rpm:60,tpm:30000,concurrent:8` (the `--quota` flag) as a key and its
    quota; `UserError` names what is wrong."""
    key, sep, limits = spec.partition("=")
    key = key.strip()
    if not sep or not _KEY.match(key) or not limits.strip():
        raise UserError(
            f"--quota {spec!r}: write PROVIDER:MODEL=rpm:N,tpm:N,concurrent:N (any of the "
            "three), e.g. openai:gpt-4.1=rpm:60,tpm:30000"
        )
    values: dict[str, int] = {}
    for item in limits.split(","):
        name, _, number = item.strip().partition(":")
        if name not in _FIELDS:
            raise UserError(f"--quota {spec!r}: unknown limit {name!r}; use rpm, tpm or concurrent")
        if not number.isdigit() or int(number) < 1:
            raise UserError(f"--quota {spec!r}: {name} needs a whole number above 0")
        if _FIELDS[name] in values:
            raise UserError(
                f"--quota {spec!r}: {name} is given twice ({values[_FIELDS[name]]} and "
                f"{number}); give each limit once"
            )
        values[_FIELDS[name]] = int(number)
    return key, ModelQuota(**values)


SEND_MARGIN = 1.0
"""Seconds a request may take from when it counts (its send, as its sender reported it) to
the provider: an ended request counts in each span for this much longer. The keepers
recorded before `SHORT_SEND_MARGIN` use it."""
SHORT_SEND_MARGIN = 0.5
"""The margin of keepers that hear a request's send from its activity's own clock and have
the activity wait for its slot (`QuotaGrant.not_before`): what is left to cover is the
request's way to the provider and the clocks' skew, not a dispatch."""


@dataclass
class _Grant:
    at: float
    """When it was granted (with `by_send`: kept when it ended; else, once it ended, when
    it ended)."""
    tokens: int
    open: bool = True
    """Still in flight: it counts in every span until it ends, since the provider counts
    it when it arrives, some time after the grant."""


_Cost = Callable[[_Grant], int]


@dataclass
class QuotaWindow:
    """What a key granted in the last minute, and whether (and when) the next request may go.

    Times are seconds on any monotonic clock the caller keeps (the keeper workflow's
    `workflow.now()`); a grant counts against concurrency until `settle`."""

    quota: ModelQuota
    grants: list[_Grant] = field(default_factory=list)
    in_flight: int = 0
    paused_until: float = 0.0
    by_send: bool = False
    """Count an ended request in the spans from when it was sent (its grant, plus
    `margin`), as a provider counts it, not from when it ended: a minute's requests go
    out in a minute, not in a minute plus their durations. While a request is in flight it
    counts in every span (a retried attempt after a worker crash goes out under the same
    grant). False: the keepers recorded before it count from the end."""
    margin: float = SEND_MARGIN
    """With `by_send`, how much longer than from its send an ended request counts."""

    def wait(self, now: float, tokens: int) -> float | None:
        """Seconds until a request estimated at `tokens` may go (0: now); None while only a
        release can make room (concurrency)."""
        quota = self.quota
        self._forget(now)
        if quota.max_concurrent is not None and self.in_flight >= quota.max_concurrent:
            return None
        waits = [max(0.0, self.paused_until - now)]
        waits.append(self._room(now, MINUTE, quota.requests_per_minute, lambda g: 1, 1))
        waits.append(self._room(now, BURST_SECONDS, quota.burst_requests(), lambda g: 1, 1))
        asked = min(tokens, quota.tokens_per_minute or tokens)
        waits.append(self._room(now, MINUTE, quota.tokens_per_minute, lambda g: g.tokens, asked))
        burst = quota.burst_tokens()
        waits.append(
            self._room(now, BURST_SECONDS, burst, lambda g: g.tokens, min(asked, burst or asked))
        )
        return max(waits)

    def _room(self, now: float, span: float, limit: int | None, cost: _Cost, wanted: int) -> float:
        """Seconds until the grants of the last `span` seconds leave room for `wanted`."""
        if limit is None:
            return 0.0
        recent = [g for g in self.grants if g.open or self._since(g) > now - span]
        used = sum(cost(g) for g in recent)
        if used + wanted <= limit:
            return 0.0
        # Ended ones leave the span in turn; open ones only once they end.
        for grant in sorted((g for g in recent if not g.open), key=self._since):
            used -= cost(grant)
            if used + wanted <= limit:
                return self._since(grant) + span - now
        return span

    def _since(self, grant: _Grant) -> float:
        """From when a grant counts in the spans."""
        return grant.at + self.margin if self.by_send and not grant.open else grant.at

    def grant(self, at: float, tokens: int) -> None:
        """Counts a request from `at`: now, or the moment ahead it was granted for (its
        sender waits until then)."""
        self.grants.append(_Grant(at, tokens))
        self.in_flight += 1

    def settle(self, now: float, granted_at: float, estimated: int, used: int | None) -> None:
        """A granted request ended: it no longer counts against concurrency, its token
        estimate becomes what the provider reported, and it stays in the spans until they
        have passed since now (it reached the provider at some point before now)."""
        self.in_flight = max(0, self.in_flight - 1)
        for grant in self.grants:
            if grant.open and grant.at == granted_at and grant.tokens == estimated:
                grant.open = False
                if not self.by_send:
                    grant.at = now
                if used is not None:
                    grant.tokens = used
                return

    def sent(
        self, granted_at: float, tokens: int, now: float, reported: float | None = None
    ) -> float:
        """The request granted at `granted_at` went out at `reported` (the sender's clock),
        or, unreported, now: it counts from then, which is returned. A reported time is kept
        between the grant and now, so a sender's skewed clock can neither count a request
        before it was allowed nor after it was heard of; `margin` covers the rest."""
        at = now if reported is None else min(now, max(granted_at, reported))
        for grant in self.grants:
            if grant.open and grant.at == granted_at and grant.tokens == tokens:
                grant.at = at
                break
        return at

    def pause(self, until: float) -> None:
        self.paused_until = max(self.paused_until, until)

    def _forget(self, now: float) -> None:
        self.grants = [g for g in self.grants if g.open or self._since(g) > now - MINUTE]

    def snapshot(self) -> list[tuple[float, int, bool]]:
        return [(g.at, g.tokens, g.open) for g in self.grants]

    @classmethod
    def restore(
        cls,
        quota: ModelQuota,
        grants: Iterable[tuple[float, int, bool]],
        in_flight: int,
        paused_until: float,
        *,
        by_send: bool = False,
        margin: float = SEND_MARGIN,
    ) -> QuotaWindow:
        kept = [_Grant(at, tokens, open) for at, tokens, open in grants]
        return cls(quota, kept, in_flight, paused_until, by_send, margin)
