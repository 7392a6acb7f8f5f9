"""Tools: plain Python functions, with arguments validated by pydantic.

The JSON schema the model sees and the validation of what it sends back both come from one
pydantic model built from the function's signature, so they cannot drift apart.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

from .errors import UserError

__all__ = ["Tool", "ToolContext", "ToolDefinition", "ToolFunc"]

ToolFunc = Callable[..., Any] | Callable[..., Awaitable[Any]]
_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class ToolDefinition(BaseModel):
    """What a model is told about a tool."""

    name: str
    description: str = ""
    parameters_json_schema: dict[str, Any]
    strict: bool | None = None


@dataclass(frozen=True)
class ToolContext:
    """Handed to a tool whose first parameter is annotated `ToolContext`.

    `idempotency_key` is stable across retries of the same call (run or workflow id plus the
    tool call id): a tool with side effects uses it to make a retried call safe.
    """

    run_id: str
    conversation_id: str
    run_step: int
    tool_name: str
    tool_call_id: str
    retry: int = 0
    approved: bool = False
    idempotency_key: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


_SECTION = re.compile(r"^([A-Za-z][\w ]*):$")
_PARAM = re.compile(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM = re.compile(r"^:param\s+(?:\w+\s+)?(\w+):\s*(.*)$")
_ARG_SECTIONS = ("args", "arguments", "parameters")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Google- or Sphinx-style docstrings: the text before the first section is the
    description; `Args:` entries (and `:param x:` lines) describe parameters."""
    params: dict[str, str] = {}
    description: list[str] = []
    section: str | None = None
    last: str | None = None
    for line in inspect.cleandoc(doc or "").splitlines():
        stripped = line.strip()
        if sphinx := _SPHINX_PARAM.match(stripped):
            params[sphinx.group(1)] = sphinx.group(2)
            section, last = "sphinx", sphinx.group(1)
        elif not line.startswith((" ", "\t")) and (header := _SECTION.match(stripped)):
            section, last = header.group(1).lower(), None
        elif section is None:
            description.append(line)
        elif section in _ARG_SECTIONS and (entry := _PARAM.match(stripped)):
            params[entry.group(1)] = entry.group(2)
            last = entry.group(1)
        elif last is not None and stripped and section in _ARG_SECTIONS:
            params[last] = f"{params[last]} {stripped}".strip()
    return "\n".join(description).strip(), params


class Tool:
    """A function the model may call.

    `requires_approval` makes every call wait for a human; `max_retries` bounds how often
    the model may send invalid arguments or be told to retry before the run fails.
    """

    def __init__(
        self,
        function: ToolFunc,
        *,
        name: str | None = None,
        description: str | None = None,
        max_retries: int = 1,
        requires_approval: bool = False,
    ) -> None:
        self.function = function
        self.name = name or function.__name__
        if not _NAME_RE.match(self.name):
            raise UserError(
                f"tool name {self.name!r} is not allowed: use 1-64 letters, digits, '_' or '-'"
            )
        self.max_retries = max_retries
        self.requires_approval = requires_approval
        self.is_async = inspect.iscoroutinefunction(function)
        doc_description, param_docs = _parse_docstring(function.__doc__ or "")
        self.description = description if description is not None else doc_description
        self.takes_ctx, self.args_model = self._build_args_model(param_docs)

    def _build_args_model(self, param_docs: dict[str, str]) -> tuple[bool, type[BaseModel]]:
        signature = inspect.signature(self.function)
        try:
            hints = get_type_hints(self.function)
        except Exception as exc:  # unresolvable forward references
            raise UserError(f"tool {self.name!r}: cannot resolve type hints: {exc}") from exc
        takes_ctx = False
        fields: dict[str, Any] = {}
        for index, (pname, param) in enumerate(signature.parameters.items()):
            annotation = hints.get(pname, Any)
            if index == 0 and annotation is ToolContext:
                takes_ctx = True
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise UserError(
                    f"tool {self.name!r}: *args/**kwargs parameters cannot be described to a "
                    f"model; declare each argument ({pname!r})"
                )
            if annotation is ToolContext:
                raise UserError(f"tool {self.name!r}: ToolContext must be the first parameter")
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[pname] = (annotation, Field(default, description=param_docs.get(pname)))
        model = create_model(
            f"{self.name}_args",
            __config__=ConfigDict(extra="forbid"),
            **fields,
        )
        return takes_ctx, model

    @functools.cached_property
    def _definition(self) -> ToolDefinition:
        schema = self.args_model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            if isinstance(prop, dict):
                prop.pop("title", None)
        return ToolDefinition(
            name=self.name, description=self.description, parameters_json_schema=schema
        )

    def definition(self) -> ToolDefinition:
        """Computed once: building a JSON schema costs more than a whole loop step."""
        return self._definition

    def validate_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Raises pydantic's `ValidationError`; the caller turns it into a retry prompt."""
        validated = self.args_model.model_validate(arguments)
        return {name: getattr(validated, name) for name in type(validated).model_fields}

    async def call(
        self, ctx: ToolContext, arguments: dict[str, Any], *, in_thread: bool = False
    ) -> Any:
        args = (ctx,) if self.takes_ctx else ()
        if in_thread and not self.is_async:
            return await asyncio.to_thread(functools.partial(self.function, *args, **arguments))
        result = self.function(*args, **arguments)
        if inspect.isawaitable(result):
            result = await result
        return result
