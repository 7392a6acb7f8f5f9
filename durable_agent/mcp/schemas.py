"""Arguments checked against a tool's JSON schema before the call, as pydantic checks a
function tool's: a mismatch goes back to the model as a retry prompt in the same format,
and the server never sees the bad call.

Schemas are compiled once (compiling costs far more than validating) with an empty
`referencing` registry: a `$ref` resolves inside the schema or not at all, so validation
never fetches anything, which also keeps it safe in workflow code (override arguments).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from jsonschema import Draft202012Validator, SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from referencing import Registry
from referencing.exceptions import Unresolvable

from .errors import MCPServerMisconfigured

__all__ = ["SchemaChecker"]

FIX_ERRORS = "\nFix the errors and try again."


class SchemaChecker:
    """Compiled validators for one server's tool schemas (bounded, most recent kept)."""

    def __init__(self, server: str, max_schemas: int = 1024) -> None:
        self.server = server
        self.max_schemas = max_schemas
        self._compiled: OrderedDict[str, Validator] = OrderedDict()

    def compile(self, tool: str, schema: dict[str, Any]) -> Validator:
        """The validator for `schema`; `MCPServerMisconfigured` when it is not a schema."""
        key = json.dumps(schema, sort_keys=True, default=str)
        validator = self._compiled.get(key)
        if validator is not None:
            self._compiled.move_to_end(key)
            return validator
        cls = validator_for(schema, default=Draft202012Validator)
        try:
            cls.check_schema(schema)
        except SchemaError as error:
            at = "/".join(str(part) for part in error.path) or "the root"
            raise MCPServerMisconfigured(
                f"MCP server {self.server!r} lists tool {tool!r} with an invalid input schema "
                f"({error.message} at {at}); fix the tool's schema on the server, or leave "
                "the server out of the agent until it is fixed"
            ) from None
        if schema.get("type", "object") != "object":
            raise MCPServerMisconfigured(
                f"MCP server {self.server!r} lists tool {tool!r} with an input schema of type "
                f"{schema.get('type')!r}; MCP tools take a JSON object (type 'object'), so fix "
                "the tool's schema on the server"
            )
        validator = cls(schema, registry=Registry())
        self._compiled[key] = validator
        while len(self._compiled) > self.max_schemas:
            self._compiled.popitem(last=False)
        return validator

    def problem(self, tool: str, schema: dict[str, Any], arguments: Any) -> str | None:
        """A retry prompt listing what is wrong with `arguments`, or None when they fit."""
        validator = self.compile(tool, schema)
        try:
            errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
        except Unresolvable as error:
            raise MCPServerMisconfigured(
                f"MCP server {self.server!r}: the input schema of tool {tool!r} refers to "
                f"{error} which it does not define; fix the tool's schema on the server"
            ) from None
        if not errors:
            return None
        problems = [
            {"loc": list(error.path), "msg": error.message, "type": str(error.validator)}
            for error in errors
        ]
        return "Validation failed: " + json.dumps(problems, default=str) + FIX_ERRORS
