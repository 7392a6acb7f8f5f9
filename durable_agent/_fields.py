"""Field helpers shared by the wire models.

Starweaver omits optional fields when they are empty; these helpers keep that rule in one
place so every model serializes the same way.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

M = TypeVar("M", bound=BaseModel)

__all__ = ["WIRE_CONFIG", "omit_empty", "omit_none", "trusted"]

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


def trusted(cls: type[M], **fields: Any) -> M:
    """A `cls` of values that are already what its fields hold (the loop's own validated
    state), without validating them again: for models built at every loop boundary, where
    validation, or `model_construct`'s defaults pass, is most of a step's cost. Every
    field must be given; nothing is checked."""
    model = cls.__new__(cls)
    _set(model, "__dict__", fields)
    _set(model, "__pydantic_fields_set__", set(fields))
    _set(model, "__pydantic_extra__", {} if cls.model_config.get("extra") == "allow" else None)
    _set(model, "__pydantic_private__", None)
    return model


_set = object.__setattr__
