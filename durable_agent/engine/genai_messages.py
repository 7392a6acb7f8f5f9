"""Messages and values as the OpenTelemetry GenAI conventions put them on spans.

`gen_ai.input.messages` / `gen_ai.output.messages` hold JSON lists of `{"role", "parts"}`
objects; tool arguments and results are JSON or text. Kept apart from the spans themselves
(`telemetry`) because this is the conventions' format, which changes on its own schedule.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["as_json", "as_text", "genai_message"]


def as_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else as_json(value)


def genai_message(message: Any) -> dict[str, Any]:
    """A message in the conventions' shape: `{"role", "parts": [{"type", ...}]}`."""
    if message.kind == "response":
        parts: list[dict[str, Any]] = []
        for part in message.parts:
            if part.kind == "text":
                parts.append({"type": "text", "content": part.text})
            elif part.kind == "thinking":
                parts.append({"type": "reasoning", "content": part.text})
            elif part.kind == "tool_call":
                parts.append(
                    {
                        "type": "tool_call",
                        "id": part.id,
                        "name": part.name,
                        "arguments": part.arguments,
                    }
                )
        out: dict[str, Any] = {"role": "assistant", "parts": parts}
        if message.finish_reason:
            out["finish_reason"] = message.finish_reason
        return out
    role = "user"
    parts = []
    for part in message.parts:
        kind = part.kind
        if kind in ("system_prompt", "instruction"):
            role = "system"
            parts.append({"type": "text", "content": as_text(getattr(part, "content", ""))})
        elif kind == "tool_return":
            role = "tool"
            parts.append(
                {"type": "tool_call_response", "id": part.tool_call_id, "response": part.content}
            )
        elif kind == "retry_prompt":
            parts.append({"type": "text", "content": as_text(part.content)})
        else:
            content = getattr(part, "content", "")
            if isinstance(content, list):
                content = " ".join(getattr(c, "text", "") for c in content)
            parts.append({"type": "text", "content": as_text(content)})
    return {"role": role, "parts": parts}
