"""Tools: plain Python functions, with arguments validated by pydantic.

The JSON schema the model sees and the validation of what it sends back both come from one
pydantic model built from the function's signature, so they cannot drift apart.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import re
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from ..contract.errors import UserError
from ..contract.tools import ToolContext, ToolDefinition

__all__ = ["TOOL_NAME", "Tool", "ToolFunc"]

ToolFunc = Callable[..., Any] | Callable[..., Awaitable[Any]]
TOOL_NAME = _NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


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
        self.name = name or _function_name(function)
        if not _NAME_RE.match(self.name):
            raise UserError(
                f"tool name {self.name!r} is not allowed: use 1-64 letters, digits, '_' or '-'"
            )
        target = _target(function)
        if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
            raise UserError(
                f"tool {self.name!r} is a generator function: its result could not be sent to "
                "the model (or recorded); return a list or a string instead"
            )
        self.max_retries = max_retries
        self.requires_approval = requires_approval
        self.is_async = inspect.iscoroutinefunction(target)
        doc_description, param_docs = _parse_docstring(inspect.getdoc(target) or "")
        self.description = description if description is not None else doc_description
        self.takes_ctx, self.args_model, self._params = self._build_args_model(param_docs)
        self._positional = [p.name for p in self._params if p.positional]

    def _build_args_model(
        self, param_docs: dict[str, str]
    ) -> tuple[bool, type[BaseModel], list[_Param]]:
        try:
            signature = inspect.signature(self.function, eval_str=True)
        except Exception as exc:  # unresolvable forward references, builtins without one
            raise UserError(f"tool {self.name!r}: cannot read its signature: {exc}") from exc
        takes_ctx = False
        fields: dict[str, Any] = {}
        params: list[_Param] = []
        for index, (pname, param) in enumerate(signature.parameters.items()):
            annotation = Any if param.annotation is param.empty else param.annotation
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
            # Fields get names of their own and the parameter's name as alias: a parameter
            # may be called `json`, `schema`, `model_config` or `_x`, which pydantic would
            # otherwise drop from the schema or refuse.
            field_name = f"p{len(params)}"
            fields[field_name] = (
                annotation,
                Field(default, alias=pname, description=param_docs.get(pname)),
            )
            params.append(_Param(pname, field_name, param.kind is param.POSITIONAL_ONLY))
        model = create_model(
            f"{self.name}_args",
            __config__=ConfigDict(extra="forbid", populate_by_name=False),
            **fields,
        )
        return takes_ctx, model, params

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
        return {p.name: getattr(validated, p.field) for p in self._params}

    def _bind(self, ctx: ToolContext, arguments: dict[str, Any]) -> functools.partial[Any]:
        positional = [ctx] if self.takes_ctx else []
        positional.extend(arguments[name] for name in self._positional)
        keywords = {k: v for k, v in arguments.items() if k not in self._positional}
        return functools.partial(self.function, *positional, **keywords)

    async def call(
        self, ctx: ToolContext, arguments: dict[str, Any], *, executor: Executor | None = None
    ) -> Any:
        """A sync tool runs on `executor` when one is given (workers do: a blocking tool
        must not stall the event loop), else in the caller's thread."""
        bound = self._bind(ctx, arguments)
        if executor is not None and not self.is_async:
            # Like asyncio.to_thread: the tool sees the caller's context (activity info).
            context = contextvars.copy_context()
            return await asyncio.get_running_loop().run_in_executor(executor, context.run, bound)
        result = bound()
        if inspect.isawaitable(result):
            result = await result
        return result


@dataclass(frozen=True)
class _Param:
    name: str
    field: str
    positional: bool


def _target(function: Any) -> Any:
    """What decides how a tool is called: the function inside a partial, the `__call__` of
    a callable object."""
    while isinstance(function, functools.partial):
        function = function.func
    plain = (inspect.isfunction, inspect.ismethod, inspect.isbuiltin, inspect.isclass)
    if callable(function) and not any(check(function) for check in plain):
        return type(function).__call__
    return function


def _function_name(function: Any) -> str:
    inner = function
    while isinstance(inner, functools.partial):
        inner = inner.func
    name = getattr(inner, "__name__", None) or type(inner).__name__
    if not isinstance(name, str) or not name or name == "<lambda>":
        raise UserError(
            f"cannot name the tool {function!r}; pass a name: Tool(fn, name='my_tool') or "
            "AgentBuilder.tool(fn, name='my_tool')"
        )
    return name
