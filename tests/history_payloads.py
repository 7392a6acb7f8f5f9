"""Walking the payloads of a raw history, for tests that check what Temporal stores.

Two kinds of payload never pass through the client's data converter, and the tests that
check "every payload is encrypted / in the user's encoding" name them rather than skip
whole events: search attributes (the server must read them to index) and the marker
Temporal's core SDK writes for `workflow.patched`, whose only content is the patch id.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload

__all__ = ["is_patch_marker", "is_search_attribute", "payloads_in"]


def payloads_in(message: Message, path: str = "") -> Iterator[tuple[str, Payload]]:
    """Every `Payload` anywhere in a proto, with the field path that led to it."""
    if isinstance(message, Payload):
        yield path, message
        return
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        where = f"{path}.{field.name}"
        if field.message_type.GetOptions().map_entry:
            if field.message_type.fields_by_name["value"].message_type is not None:
                for key, item in value.items():
                    yield from payloads_in(item, f"{where}[{key}]")
        elif isinstance(value, Message):
            yield from payloads_in(value, where)
        else:  # a repeated message field
            for index, item in enumerate(value):
                yield from payloads_in(item, f"{where}[{index}]")


def is_search_attribute(path: str) -> bool:
    return ".search_attributes." in path


def is_patch_marker(path: str, payload: Payload) -> bool:
    """A `workflow.patched` marker's payload: core writes it as plain JSON holding the patch id
    and nothing else (checked here, so user data hidden in one would still fail a test)."""
    if not path.endswith("marker_recorded_event_attributes.details[patch-data].payloads[0]"):
        return False
    content = json.loads(payload.data)
    return (
        payload.metadata.get("encoding") == b"json/plain"
        and set(content) == {"id", "deprecated"}
        and str(content["id"]).startswith("durable-agent")
    )
