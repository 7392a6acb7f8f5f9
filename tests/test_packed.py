"""What a waiting run keeps packed (durable_agent/temporal/packed.py) reads back the same."""

from __future__ import annotations

import gc
import json

import pytest

from durable_agent.temporal.packed import PackedBytes


def checkpoint_json(step: int) -> bytes:
    return json.dumps(
        {"checkpoint_id": f"cp-{step:04d}", "node": "before_model_request", "run_step": step}
        | {"state": {"usage": {"requests": step, "input_tokens": 100 * step}, "output": None}}
        | {"padding": "the same text in every checkpoint " * 20},
        separators=(",", ":"),
    ).encode()


def test_packed_values_read_back_the_same_in_every_way() -> None:
    values = [checkpoint_json(step) for step in range(11)]
    kept = PackedBytes()
    for value in values[:7]:
        kept.append(value)
    kept.pack()
    for value in values[7:]:
        kept.append(value)  # after a wait: plain again until the next
    assert len(kept) == 11
    assert [kept[i] for i in range(11)] == values
    assert kept[-1] == values[-1]
    assert list(kept) == values
    assert kept.since(3) == values[3:]
    assert kept.since(9) == values[9:]
    kept.pack()  # the next wait packs the old block and the new values together
    assert list(kept) == values
    with pytest.raises(IndexError):
        kept[11]


def test_packing_shrinks_a_runs_checkpoints_several_times() -> None:
    values = [checkpoint_json(step) for step in range(11)]
    kept = PackedBytes()
    for value in values:
        kept.append(value)
    kept.pack()
    assert kept.packed_bytes * 5 < sum(len(v) for v in values)


def test_nothing_new_packs_nothing_and_a_cleared_list_is_empty() -> None:
    kept = PackedBytes()
    kept.pack()
    assert len(kept) == 0
    assert not kept
    assert kept.packed_bytes == 0
    kept.append(b"x")
    kept.pack()
    kept.clear()
    assert len(kept) == 0
    assert list(kept) == []


def test_empty_and_packed_lists_keep_no_container_of_their_own() -> None:
    """An empty or fully packed list shares its empty parts (a waiting run keeps several),
    and one list's values never show in another's."""
    empty, packed = PackedBytes(), PackedBytes()
    packed.append(b"one")
    packed.pack()
    for kept in (empty, packed):
        own = [r for r in gc.get_referents(kept) if isinstance(r, list)]
        assert own == [], f"{kept!r} holds a list of its own: {own}"
    empty.append(b"first")
    other = PackedBytes()
    assert (len(empty), len(other), list(other)) == (1, 0, [])
    packed.append(b"two")
    assert list(packed) == [b"one", b"two"]
    assert list(empty) == [b"first"]
    assert other.since(0) == []
    empty.clear()
    assert list(empty) == []
    assert len(PackedBytes()) == 0
