"""What a model response cost, in US dollars, from the `genai-prices` price table.

A response is priced where it is produced (`nodes.model_request`, which both drivers use:
in-process directly, on Temporal inside the `model_request` activity), never in workflow
code: the table changes with package upgrades, and a replay must read the figure history
recorded, not work out a new one. The price is that of the request's time (its
`timestamp`), so a retried request is priced the same.

A model is priced by its `provider` and the model name the response reports (the model's
own name when the response names none, or one the table does not know). Models without a
provider (test and function models) and models the table does not know are not priced: their
`cost` is `None`. Pricing never raises.
"""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from ..contract.messages import ModelResponse
    from ..contract.usage import Usage
    from ..models.base import Model

__all__ = ["dollars", "price", "price_response"]

log = structlog.get_logger("durable_agent.pricing")


def price(
    provider: str | None, model_name: str | None, usage: Usage, *, at: datetime | None = None
) -> float | None:
    """The price of one request with `usage` (its token counts; `input_tokens` counts the
    cached ones too, as genai-prices does), or None when the model's price is unknown."""
    if not provider or not model_name:
        return None
    if not (usage.input_tokens or usage.output_tokens):
        return None  # the provider reported no usage: nothing to price it by
    try:
        from genai_prices import Usage as PriceUsage
        from genai_prices import calc_price

        counts = PriceUsage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
        )
        result = calc_price(counts, model_name, provider_id=provider, genai_request_timestamp=at)
        return float(result.total_price)
    except LookupError:
        _unknown(provider, model_name)
        return None
    except Exception as error:  # a price table's bug must not fail a run
        log.warning(
            "could not price a model response",
            provider=provider,
            model=model_name,
            error=repr(error),
        )
        return None


def price_response(response: ModelResponse, model: Model, timestamp: str | None) -> ModelResponse:
    """`response` with `usage.cost` set (unless its model already priced it)."""
    if response.usage.cost is not None:
        return response
    provider: Any = getattr(response, "provider_name", None) or model.provider
    if not provider:
        return response  # nothing to look its price up by (e.g. TestModel)
    at = _parse(timestamp)
    cost = price(provider, response.model_name or model.model_name, response.usage, at=at)
    if cost is None and response.model_name and response.model_name != model.model_name:
        cost = price(provider, model.model_name, response.usage, at=at)
    if cost is None:
        return response
    return response.model_copy(update={"usage": response.usage.model_copy(update={"cost": cost})})


def dollars(cost: float | None) -> str:
    """A cost as people read it: `$1.23`, `$0.0685`, `$0.000012`; `-` when unknown."""
    if cost is None:
        return "-"
    if cost >= 1:
        return f"${cost:,.2f}"
    if 0 < cost < 0.0000005:
        return "<$0.000001"
    text = f"{cost:.6f}".rstrip("0")
    decimals = len(text.partition(".")[2])
    return f"${text}" + "0" * max(0, 4 - decimals)


def _parse(timestamp: str | None) -> datetime | None:
    if not timestamp:
        return None
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None


@lru_cache(maxsize=256)
def _unknown(provider: str, model_name: str) -> None:
    """Says once per model that it is not priced."""
    log.info(
        "no price known for this model; its cost is left unknown (None)",
        provider=provider,
        model=model_name,
    )
