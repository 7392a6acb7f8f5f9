"""Field helpers shared by the wire models.

Starweaver omits optional fields when they are empty; these helpers keep that rule in one
place so every model serializes the same way.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

M = TypeVar("M", bound=BaseModel)

__all__ = [
    "WIRE_CONFIG",
    "omit_empty",
    "omit_none",
    "replaced",
    "settled",
    "shallow_copy",
    "trusted",
]

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


def trusted(cls: type[M], /, **fields: Any) -> M:
    """A `cls` of values that are already what its fields hold (the loop's own validated
    state), without validating them again: for models built at every loop boundary, where
    validation, or `model_construct`'s defaults pass, is most of a step's cost. Every
    field must be given; nothing is checked. Models built here are not to be changed (as
    messages and records never are): they share one fields set, and `model_fields_set`
    lists every field."""
    model = _new(cls)
    _set_dict(model, fields)
    every_field, keeps_extra = _every_field(cls)
    # Every field is given, so every model of `cls` built here has the same fields set:
    # one set shared by all of them (pydantic only ever adds a set field's name to it, or
    # copies it), not a new one per model for the garbage collector to walk.
    _set_fields_set(model, every_field)
    _set_extra(model, {} if keeps_extra else None)
    _set_private(model, None)
    return model


def settled(model: M, *, deep: bool = True) -> M:
    """`model`, just validated, and the models in its fields, given the fields set `trusted`
    gives: the one shared by every model of their class. For what a run keeps for as long
    as it is cached, decoded from an activity's result (a response, a tool's outcome): a
    validated model has every field in its `__dict__`, and its own fields set costs 216
    bytes, 728 once it names more than four fields. A model holding extra fields keeps its
    own (it names them). Changes the models in place and returns `model`; `deep=False`:
    `model` alone (the models in its fields may be its caller's)."""
    for value in model.__dict__.values() if deep else ():
        if isinstance(value, BaseModel):
            settled(value)
        elif isinstance(value, list | tuple):
            for item in value:
                if isinstance(item, BaseModel):
                    settled(item)
    every_field, _ = _every_field(type(model))
    if not model.__pydantic_extra__ and every_field.issubset(model.__dict__):
        _set_fields_set(model, every_field)
    return model


def _every_field(cls: type[BaseModel]) -> tuple[set[str], bool]:
    """The fields set shared by the models of `cls` that name every field, and whether
    `cls` keeps extra fields."""
    try:
        return _shared[cls]
    except KeyError:
        shared = _shared[cls] = set(cls.model_fields), cls.model_config.get("extra") == "allow"
        return shared


def shallow_copy(model: M) -> M:
    """`model.__copy__()` without pydantic's generic path, for copies taken at every loop
    boundary: the same fields, extra and private values, and a fields set of its own, unless
    `model` has its class's shared one (`trusted`, `settled`), which names every field, so
    that setting a field cannot change it: the copy shares it too."""
    copy = _new(type(model))
    _set_dict(copy, model.__dict__.copy())
    fields_set = model.__pydantic_fields_set__
    _set_fields_set(copy, fields_set if _is_shared(model) else set(fields_set))
    extra, private = model.__pydantic_extra__, model.__pydantic_private__
    _set_extra(copy, None if extra is None else extra.copy())
    _set_private(copy, None if private is None else private.copy())
    return copy


def replaced(model: M, /, **changes: Any) -> M:
    """`model.model_copy(update=changes)` for values that are already what the fields hold
    (a response stamped with the run's own ids), without pydantic's generic copy path."""
    copy = shallow_copy(model)
    copy.__dict__.update(changes)
    if not (_is_shared(copy) and copy.__pydantic_fields_set__.issuperset(changes)):
        _set_fields_set(copy, copy.__pydantic_fields_set__ | changes.keys())
    return copy


def _is_shared(model: BaseModel) -> bool:
    """Whether `model` has its class's shared fields set (which must not grow)."""
    shared = _shared.get(type(model))
    return shared is not None and model.__pydantic_fields_set__ is shared[0]


_new = object.__new__
# BaseModel keeps these in slots; their descriptors set them without a lookup through the
# class each time (most of `trusted`'s cost when it went through `object.__setattr__`).
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__
_shared: dict[type[BaseModel], tuple[set[str], bool]] = {}
