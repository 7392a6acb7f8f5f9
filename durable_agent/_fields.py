"""Field helpers shared by the wire models.

Starweaver omits optional fields when they are empty; these helpers keep that rule in one
place so every model serializes the same way.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

__all__ = ["WIRE_CONFIG", "omit_empty", "omit_none"]

WIRE_CONFIG = ConfigDict(extra="allow", validate_assignment=False, populate_by_name=True)
"""Unknown fields are kept so that data written by a newer starweaver survives a round trip."""


def _is_empty(value: Any) -> bool:
    return value is None or value == [] or value == {} or value is False or value == 0


def omit_empty(default: Any = None, *, factory: Any = None) -> Any:
    """A field left out of the JSON when it is None, 0, False or an empty collection."""
    if factory is not None:
        return Field(default_factory=factory, exclude_if=_is_empty)
    return Field(default=default, exclude_if=_is_empty)


def omit_none(default: Any = None) -> Any:
    """A field left out of the JSON only when it is None (so 0 and "" still serialize)."""
    return Field(default=default, exclude_if=lambda v: v is None)
