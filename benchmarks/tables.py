"""The report's cells and tables, shared by its sections' modules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["fmt", "goal", "span", "table"]


def fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, list):
        return " / ".join(fmt(v) for v in value)
    if isinstance(value, int) or abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    lines += [
        "| " + " | ".join(v if isinstance(v, str) else fmt(v) for v in r) + " |" for r in rows
    ]
    return [*lines, ""]


def span(values: Sequence[float | None]) -> str:
    known = [v for v in values if v is not None]
    return f"{min(known):.2f}-{max(known):.2f}" if known else "n/a"


def goal(value: float | None, goal: float, *, at_most: bool = True) -> str:
    if value is None:
        return "n/a"
    met = value <= goal if at_most else value >= goal
    return f"{fmt(value)} ({'met' if met else '**missed**'})"
