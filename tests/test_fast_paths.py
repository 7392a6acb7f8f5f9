"""The speed-ups that rely on pydantic's internals, pinned (issue 25, item 4).

`durable_agent._fields` is the one module that touches pydantic's private slots
(`trusted`, `shallow_copy`, `settled`); this test fails loudly when a pydantic release changes what
they rely on, and `pyproject.toml` allows only the releases it has passed on.
"""

from __future__ import annotations

import re
import tomllib
import types
from pathlib import Path

import pydantic
import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from pydantic import BaseModel

from durable_agent import Usage
from durable_agent.contract._fields import replaced, settled, shallow_copy, trusted
from durable_agent.contract.decisions import PendingToolApproval
from durable_agent.contract.messages import ModelResponse, TextPart, ToolCall, ToolCallPart
from durable_agent.contract.state import AgentRunState
from durable_agent.temporal.wire import AgentWorkflowInput
from durable_agent.temporal.workflow.inputs import read_input

ROOT = Path(__file__).resolve().parent.parent
VERIFIED_MINORS = ("2.12", "2.13", "2.14")
"""The pydantic minor releases this test has passed on; raise pyproject's bound with it."""


def _state(model: BaseModel) -> tuple[object, ...]:
    return (
        model.model_dump(mode="json"),
        model.model_fields_set,
        model.__pydantic_extra__,
        model.__pydantic_private__,
    )


def test_the_slots_written_directly_are_pydantics_slot_descriptors() -> None:
    for name in (
        "__dict__",
        "__pydantic_fields_set__",
        "__pydantic_extra__",
        "__pydantic_private__",
    ):
        descriptor = BaseModel.__dict__[name]
        assert isinstance(descriptor, types.MemberDescriptorType | types.GetSetDescriptorType), name


@pytest.mark.parametrize(
    ("cls", "fields"),
    [
        (ToolCall, {"id": "c1", "name": "deploy", "arguments": {"env": "prod"}}),
        (
            Usage,
            {name: 0 for name in Usage.model_fields} | {"requests": 2, "input_tokens": 7},
        ),
    ],
    ids=["extra-allowed", "plain"],
)
def test_trusted_builds_what_validation_builds(
    cls: type[BaseModel], fields: dict[str, object]
) -> None:
    built = trusted(cls, **fields)
    validated = cls.model_validate(fields)
    assert built == validated
    assert _state(built) == _state(validated)
    assert built.model_dump_json() == validated.model_dump_json()
    assert cls.model_validate_json(built.model_dump_json()) == validated
    assert built.model_copy(update={}) == validated


def test_shallow_copy_is_a_model_copy_with_a_fields_set_of_its_own() -> None:
    state = AgentRunState(run_id="r", conversation_id="c", metadata={"k": 1})
    copy = shallow_copy(state)
    assert _state(copy) == _state(state.model_copy())
    assert copy.model_fields_set is not state.model_fields_set
    copy.metadata = {"k": 2}
    assert state.metadata == {"k": 1}


def test_pyproject_allows_only_verified_pydantic_releases() -> None:
    installed = Version(pydantic.VERSION)
    assert f"{installed.major}.{installed.minor}" in VERIFIED_MINORS, (
        f"pydantic {installed} is not among the releases the fast paths were verified on; "
        "run this test on it and add it to VERIFIED_MINORS"
    )
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    spec = next(d for d in project["dependencies"] if re.match(r"pydantic\b", d))
    allowed = SpecifierSet(spec.removeprefix("pydantic"))
    newest = Version(VERIFIED_MINORS[-1])
    next_minor = Version(f"{newest.major}.{newest.minor + 1}")
    assert next_minor not in allowed, f"{spec} allows {next_minor}, which nothing verified"
    for minor in VERIFIED_MINORS:
        assert Version(minor) in allowed or Version(f"{minor}.1") in allowed, (spec, minor)


def test_replaced_is_a_model_copy_with_an_update() -> None:
    call = ToolCall(id="c1", name="deploy", arguments={"env": "prod"})
    update = {"id": "c2", "arguments": {"env": "dev"}}
    copy = replaced(call, **update)
    assert _state(copy) == _state(call.model_copy(update=update))
    assert copy.model_fields_set is not call.model_fields_set
    assert call.id == "c1"


def test_settled_models_share_their_classes_fields_set_and_dump_as_before() -> None:
    data = {
        "parts": [
            {"kind": "tool_call", "id": "c1", "name": "deploy", "arguments": {"env": "prod"}},
            {"kind": "text", "text": "deploying"},
        ],
        "usage": {"requests": 1, "input_tokens": 7},
        "model_name": "test",
    }
    validated = ModelResponse.model_validate(data)
    response = settled(ModelResponse.model_validate(data))
    assert response == validated
    assert response.model_dump_json() == validated.model_dump_json()
    call, text = response.parts
    assert isinstance(call, ToolCallPart)
    assert isinstance(text, TextPart)
    built = trusted(ModelResponse, **response.__dict__)
    # one set per class, the one `trusted` gives, naming every field
    assert response.model_fields_set is built.model_fields_set
    assert response.model_fields_set == set(ModelResponse.model_fields)
    assert response.usage.model_fields_set is settled(Usage()).model_fields_set
    assert call.model_fields_set == set(ToolCallPart.model_fields)
    # a change to a field of one leaves the others' sets as they were
    call.name = "rollback"
    assert call.model_fields_set == set(ToolCallPart.model_fields)
    # a model with extra fields keeps its own set, which names them
    extra = settled(ToolCall.model_validate({"id": "c", "name": "n", "arguments": {}, "x": 1}))
    assert extra.model_fields_set == {"id", "name", "arguments", "x"}


def test_what_a_run_keeps_for_long_shares_its_classes_fields_set() -> None:
    call = ToolCall(id="c1", name="deploy", arguments={"env": "prod"})
    first = PendingToolApproval.for_call(call, "risky")
    second = PendingToolApproval.for_call(call)
    assert first.model_fields_set is second.model_fields_set
    assert (
        first.model_dump_json()
        == PendingToolApproval(
            tool_call_id="c1", tool_name="deploy", arguments={"env": "prod"}, reason="risky"
        ).model_dump_json()
    )
    one, _ = read_input({"agent": "a", "prompt": "go"})
    other, _ = read_input({"agent": "b"})
    assert one.model_fields_set is other.model_fields_set
    assert one == AgentWorkflowInput(agent="a", prompt="go")


def test_copies_of_a_settled_state_share_its_fields_set_until_a_change_names_more() -> None:
    history = [ModelResponse.model_validate({"parts": [{"kind": "text", "text": "hi"}]})]
    own = history[0].model_fields_set
    state = settled(
        AgentRunState(run_id="r", conversation_id="c", message_history=history), deep=False
    )
    assert history[0].model_fields_set is own, "deep=False leaves the models in its fields"
    copy = shallow_copy(state)
    assert copy.model_fields_set is state.model_fields_set
    assert _state(copy) == _state(state.model_copy())
    changed = replaced(state, run_step=3)
    assert changed.model_fields_set is state.model_fields_set
    assert changed.run_step == 3
    assert state.run_step == 0
    # a change naming what the shared set does not name gets a set of its own
    extra = replaced(state, note="x")
    assert extra.model_fields_set is not state.model_fields_set
    assert "note" in extra.model_fields_set
    assert "note" not in state.model_fields_set
