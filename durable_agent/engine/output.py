"""Turning a final model response into the run's output.

Plain agents return the response text. With `output_type` the text (or the arguments of the
output tool, for models that return structured data through a tool call) is validated
against the pydantic model; a failure goes back to the model as a retry prompt.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from ..contract.errors import ModelRetry
from ..contract.messages import ModelResponse
from ..contract.tools import OUTPUT_TOOL_NAME, ToolContext

__all__ = [
    "OutputValidator",
    "format_validation_error",
    "parse_output",
    "run_output_validator",
]

OutputValidator = Callable[..., Any] | Callable[..., Awaitable[Any]]


def format_validation_error(error: ValidationError) -> str:
    """Pydantic's errors as a retry prompt the model can act on."""
    problems = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in error.errors()]
    return "Validation failed: " + json.dumps(problems) + "\nFix the errors and try again."


def parse_output(output_type: type[BaseModel] | None, response: ModelResponse) -> Any:
    """The response's output, or `ModelRetry` explaining what the model got wrong."""
    if output_type is None:
        if not response.parts:
            raise ModelRetry("The response was empty. Reply with text or call a tool.")
        return response.text
    payload: Any
    output_calls = [c for c in response.tool_calls if c.name == OUTPUT_TOOL_NAME]
    if output_calls:
        payload = output_calls[0].arguments
        if isinstance(payload, str):
            try:
                payload = json.loads(payload)
            except json.JSONDecodeError as exc:
                raise ModelRetry(
                    f"The {OUTPUT_TOOL_NAME} arguments are not valid JSON: {exc}"
                ) from exc
    else:
        text = response.text.strip()
        if text.startswith("```"):
            text = text.strip("`").removeprefix("json").strip()
        try:
            payload = json.loads(text)
        except json.JSONDecodeError:
            raise ModelRetry(
                "Reply with a JSON object matching the output schema "
                f"{json.dumps(output_type.model_json_schema())}"
            ) from None
    try:
        return output_type.model_validate(payload)
    except ValidationError as exc:
        raise ModelRetry(format_validation_error(exc)) from exc


async def run_output_validator(validator: OutputValidator, ctx: ToolContext, value: Any) -> Any:
    """Validators take `(value)` or `(ctx, value)`, sync or async, and return the value."""
    params = len(inspect.signature(validator).parameters)
    result = validator(ctx, value) if params >= 2 else validator(value)
    if inspect.isawaitable(result):
        result = await result
    return result
