"""The packed format: activity payloads cut down to what the other side cannot work out.

Every activity input and result is written into the workflow's history, so bytes repeated
in each of them are paid for at every step of every run, and again by every replay. The
two per-step activities repeat a lot that the receiver already holds:

- A model request's new messages are stamped with the run id, conversation id and time of
  the message before them and of the request itself; a packed message leaves them out,
  and the activity copies them back from the message before it.
- Its tool returns were just returned by the `tool_call` activity, whose result history
  already holds; a packed tool return names its call (`{"cached": id}`), and the activity
  takes the return from the worker's cache of tool results.
- A model response is stamped by the workflow, which knows the stamps; zero usage
  counters are defaults.
- A tool return names the call it answers, which the workflow made, and its milliseconds,
  which its seconds give.

What is left out is restored exactly or not at all: the activity checks the messages it
rebuilt against the chained digest the workflow sent (`through`), and on any difference
reads them from the workflow by query, as it does when its cache of the history misses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from durable_agent import ModelMessage, ModelRequest, ModelResponse, ToolReturn
from durable_agent.contract._fields import settled
from durable_agent.contract.messages import ModelMessagesTypeAdapter
from durable_agent.engine.node_io import ToolCallOutcome, ToolCallOutcomeAdapter, ToolReturned

__all__ = [
    "default_idempotency_key",
    "pack_messages",
    "pack_response",
    "pack_tool_outcome",
    "unpack_messages",
    "unpack_response",
    "unpack_tool_outcome",
]

_STAMPS = ("run_id", "conversation_id", "timestamp")


def default_idempotency_key(workflow_id: str, call_id: str) -> str:
    """A tool call's idempotency key on Temporal, unless the run set its own: the workflow
    leaves it out of the activity input and the activity derives it again (one rule, here)."""
    return f"{workflow_id}:{call_id}"


def _stamped(message: ModelMessage, previous: ModelMessage | None, timestamp: str | None) -> bool:
    return (
        previous is not None
        and timestamp is not None
        and message.run_id is not None
        and message.run_id == previous.run_id
        and message.conversation_id == previous.conversation_id
        and message.timestamp == timestamp
    )


def pack_messages(
    messages: Sequence[ModelMessage], *, previous: ModelMessage | None, timestamp: str | None
) -> list[dict[str, Any]]:
    """`messages` as a model request sends them, after `previous` (None: the first, or
    one the activity may not hold) and stamped at `timestamp`. A message stamped as the
    context says leaves its stamps out; any other writes all three, null included."""
    packed = []
    for message in messages:
        data = message.model_dump(mode="json")
        if _stamped(message, previous, timestamp):
            for key in _STAMPS:
                data.pop(key, None)
        else:
            data.update({key: getattr(message, key) for key in _STAMPS})
        if isinstance(message, ModelRequest):
            data["parts"] = [
                {"cached": part["tool_call_id"]} if part["kind"] == "tool_return" else part
                for part in data["parts"]
            ]
        packed.append(data)
        previous = message
    return packed


def unpack_messages(
    packed: Sequence[dict[str, Any]],
    *,
    previous: ModelMessage | None,
    timestamp: str | None,
    tool_return: Callable[[str], ToolReturn | None],
) -> list[ModelMessage] | None:
    """The messages `pack_messages` packed, or None where something left out is not at
    hand here (no message before a stamped one, a tool result this worker did not see)."""
    stamps = None if previous is None else (previous.run_id, previous.conversation_id)
    restored: list[dict[str, Any]] = []
    for data in packed:
        data = dict(data)
        if "run_id" not in data:
            if stamps is None:
                return None
            data["run_id"], data["conversation_id"] = stamps
            data["timestamp"] = timestamp
        parts = data.get("parts")
        if data.get("kind") == "request" and isinstance(parts, list):
            whole = []
            for part in parts:
                if isinstance(part, dict) and "cached" in part:
                    cached = tool_return(str(part["cached"]))
                    if cached is None:
                        return None
                    part = cached.to_part().model_dump(mode="json")
                whole.append(part)
            data["parts"] = whole
        restored.append(data)
        stamps = (data.get("run_id"), data.get("conversation_id"))
    return ModelMessagesTypeAdapter.validate_python(restored)


def pack_response(response: ModelResponse) -> dict[str, Any]:
    """The model-request activity's result without its stamps, its `kind` (the result is
    decoded as a response) and zero usage counters."""
    data = response.model_dump(mode="json", exclude={*_STAMPS, "kind"})
    data["usage"] = {k: v for k, v in data["usage"].items() if v or (k == "cost" and v is not None)}
    if not data["usage"]:
        del data["usage"]
    return data


def unpack_response(
    response: ModelResponse, *, run_id: str, conversation_id: str, timestamp: str | None
) -> ModelResponse:
    """Stamps a response as the activity stamped it before packing (a no-op on results
    of releases that sent it whole)."""
    # The response was decoded for this call alone: stamped in place, it and its parts
    # share their classes' fields sets for as long as the run keeps them.
    settled(response).__dict__.update(
        run_id=run_id, conversation_id=conversation_id, timestamp=timestamp
    )
    return response


def pack_tool_outcome(
    outcome: ToolCallOutcome, call_id: str, name: str, base: str | None = None
) -> dict[str, Any]:
    """The `tool_call` activity's result without the call's id and tool name; a plain
    return is written as the return itself (no `kind`), its milliseconds left to be
    worked out from its seconds; a workspace change beside it as `ws` (`_pack_change`)."""
    data = outcome.model_dump(mode="json")
    if not isinstance(outcome, ToolReturned):
        return data
    change = data.pop("workspace", None)
    ret: dict[str, Any] = data["tool_return"]
    if ret["tool_call_id"] == call_id and ret["name"] == name:
        del ret["tool_call_id"], ret["name"]
    if ret.get("is_error") is False:
        del ret["is_error"]
    metadata = ret.get("metadata")
    if isinstance(metadata, dict) and metadata.get("duration_ms") == _millis(metadata):
        del metadata["duration_ms"]
    if isinstance(change, dict):
        change = _pack_change(change, base)
    if outcome.toolset_changed:
        if change is not None:
            data["workspace"] = change
        return data
    # a return without `kind`: only while nothing but the return (and a change) is set
    if change is not None:
        ret[CHANGE_KEY] = change
    return ret


CHANGE_KEY = "ws"
"""Where a packed return carries its call's workspace change (no field of a return)."""
_WORKSPACE_PREFIX = "workspace:"


def _pack_change(change: dict[str, Any], base: str | None) -> dict[str, Any]:
    """A workspace change in few bytes: without its `base` when that is the ref the call
    started from (`base`, in the call's input), its new ref as `ref`, a workspace tree's
    id without the `workspace:` its base has (a ref always has a kind, so an id alone is
    read as the base's kind)."""
    packed = dict(change)
    if base is not None and packed.get("base") == base:
        del packed["base"]
    ref = packed.pop("environment_ref", "")
    if isinstance(ref, str) and ref.startswith(_WORKSPACE_PREFIX) and "base" not in packed:
        ref = ref.removeprefix(_WORKSPACE_PREFIX)
    packed["ref"] = ref
    return packed


def _unpack_change(change: dict[str, Any], base: str | None) -> dict[str, Any]:
    """`_pack_change` undone (and the first packing, `environment_ref` without `base`)."""
    whole = dict(change)
    if "ref" in whole:
        ref = whole.pop("ref")
        if isinstance(ref, str) and ":" not in ref:
            kind = (base or _WORKSPACE_PREFIX).partition(":")[0]
            ref = f"{kind}:{ref}"
        whole["environment_ref"] = ref
    whole.setdefault("base", base or "")
    return whole


def unpack_tool_outcome(
    data: Any, call_id: str, name: str, base: str | None = None
) -> ToolCallOutcome:
    """A `tool_call` result, packed or whole (runs of earlier releases), as the outcome;
    `base`: the workspace ref the call started from."""
    if isinstance(data, dict) and "kind" not in data:
        ret = dict(data)
        change = ret.pop(CHANGE_KEY, None)
        data = {"kind": "return", "tool_return": ret}
        if change is not None:
            data["workspace"] = change
    change = data.get("workspace") if isinstance(data, dict) else None
    if isinstance(change, dict):
        data = {**data, "workspace": _unpack_change(change, base)}
    if isinstance(data, dict) and isinstance(data.get("tool_return"), dict):
        ret = dict(data["tool_return"])
        ret.setdefault("tool_call_id", call_id)
        ret.setdefault("name", name)
        metadata = ret.get("metadata")
        if isinstance(metadata, dict) and "duration_ms" not in metadata:
            millis = _millis(metadata)
            if millis is not None:
                ret["metadata"] = {"duration_ms": millis, **metadata}
        data = {**data, "tool_return": ret}
    return settled(ToolCallOutcomeAdapter.validate_python(data))


def _millis(metadata: dict[str, Any]) -> int | None:
    """`duration_ms` as `nodes` derives it from `duration_seconds` (whole microseconds)."""
    seconds = metadata.get("duration_seconds")
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return None
    return round(seconds * 1_000_000) // 1000
