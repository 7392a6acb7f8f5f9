"""An MCP `CallToolResult` as a tool return the model can read.

Tool returns are JSON the model sees as text, so:

- text blocks become strings (one block: the string itself);
- structured content (the tool's JSON result) is used when the blocks are only its text
  rendering, as the MCP spec has servers send both;
- images and audio are described (type, MIME type, size), not sent: base64 in a text
  message costs the model tokens and Temporal history bytes without showing it anything;
- embedded text resources keep their text, blob resources are described like images, and
  resource links keep their URI, name and description;
- an `isError` result is an error return (`error_kind="mcp_tool_error"`) carrying its text,
  so the model can read what went wrong and try something else.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from mcp_types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from ..contract.toolsets import ToolsetResult

__all__ = ["MCP_TOOL_ERROR", "to_toolset_result"]

MCP_TOOL_ERROR = "mcp_tool_error"
OMITTED = "binary content; not sent to the model"


def _size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def _resource(resource: TextResourceContents | BlobResourceContents) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "resource", "uri": str(resource.uri)}
    if resource.mime_type:
        out["mime_type"] = resource.mime_type
    if isinstance(resource, TextResourceContents):
        out["text"] = resource.text
    else:
        out["bytes"] = _size(resource.blob)
        out["omitted"] = OMITTED
    return out


def _block(block: ContentBlock) -> Any:
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ImageContent | AudioContent):
        return {
            "type": block.type,
            "mime_type": block.mime_type,
            "bytes": _size(block.data),
            "omitted": OMITTED,
        }
    if isinstance(block, EmbeddedResource):
        return _resource(block.resource)
    if isinstance(block, ResourceLink):
        link: dict[str, Any] = {"type": "resource_link", "uri": str(block.uri), "name": block.name}
        for key in ("title", "description", "mime_type"):
            value = getattr(block, key, None)
            if value:
                link[key] = value
        return link
    return block.model_dump(mode="json", by_alias=True, exclude_none=True)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def to_toolset_result(result: CallToolResult) -> ToolsetResult:
    blocks = [_block(block) for block in result.content]
    if result.is_error:
        text = "\n".join(_text(b) for b in blocks) or "the tool reported an error"
        return ToolsetResult(content=text, is_error=True, error_kind=MCP_TOOL_ERROR)
    only_text = all(isinstance(block, TextContent) for block in result.content)
    content: Any
    if result.structured_content is not None and only_text:
        content = result.structured_content
    elif len(blocks) == 1:
        content = blocks[0]
    elif not blocks:
        content = ""
    else:
        content = blocks
    return ToolsetResult(content=content)
