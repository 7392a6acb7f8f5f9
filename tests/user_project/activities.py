"""The user's activities, plus the plain function the inventory agent uses as a tool."""

from __future__ import annotations

from temporalio import activity


@activity.defn
async def file_report(answer: str) -> str:
    """The user's own activity: runs on the agent's answer once the child workflow is done."""
    return f"REPORT: {answer.upper()}"


def check_inventory(sku: str) -> str:
    """How many of an item are in stock.

    Args:
        sku: the item's stock-keeping unit, e.g. "WIDGET-9"
    """
    return f"{sku}: 12 in stock"
