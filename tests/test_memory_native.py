"""`benchmarks.memory_native` sorts what heaptrack found live by the kind of code that
allocated it, and takes the growth per run between two processes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from benchmarks.memory_native import kind_of, load_stacks, parse, per_run

CORE = "_RNvMs_NtNtNtNtCs4L9YpRXq1kR_19temporalio_sdk_core6worker8workflow8machines"
SLOTS = "_RINvMs3_NtCsafNm4fhvI5a_7slotmap5basicINtB6_7SlotMap"
GROW = "_RNvMs5_NtCsgFX3jaOk65H_5alloc7raw_vecNtB5_11RawVecInner11finish_grow"
DEQUE = "_RNvMs4_NtNtCsgFX3jaOk65H_5alloc11collections9vec_dequeINtB5_8VecDeque"
H2 = "_RNvMsg_NtNtCs2eYcXu5bcOV_2h25frame7headersNtB5_11HeaderBlock4load"


def stack(*frames: str) -> str:
    """A stack as heaptrack's flame-graph output writes it: outermost first."""
    return ";".join(frames) + ";"


def test_a_stack_is_the_first_kind_whose_marks_it_all_holds() -> None:
    assert kind_of(stack("start_thread", CORE, SLOTS, GROW)) == "core: state machines (slot map)"
    assert kind_of(stack("start_thread", CORE, DEQUE, GROW)) == "core: command queues"
    # a VecDeque outside the core (the HTTP/2 client's) is not the core's
    assert kind_of(stack("start_thread", H2, DEQUE, GROW)) == "other"
    assert kind_of(stack("start_thread", CORE, GROW)) == "core: the rest"
    upb = stack("_PyEval_EvalFrameDefault (ceval.c)", "PyUpb_Message_New", "_upb_Arena_InitSlow")
    assert kind_of(upb) == "protobuf messages Python holds"
    big = stack("_PyEval_EvalFrameDefault (ceval.c)", "_PyObject_Malloc (obmalloc.c)")
    assert kind_of(big) == "Python objects over 512 bytes"
    assert kind_of(stack("_start", "__libc_start_main_impl (libc-start.c)")) == "other"


def test_stacks_are_summed_by_kind_and_the_growth_is_taken_per_run(tmp_path: Path) -> None:
    lines = [
        f"{stack('start_thread', CORE, SLOTS, GROW)} 5120",
        f"{stack('start_thread', CORE, SLOTS, GROW, 'finish_grow')} 5120",
        f"{stack('_start', 'main')} 72704",
        "",
    ]
    first = tmp_path / "first.stacks"
    first.write_text("\n".join(lines))
    kinds = load_stacks(first)
    assert kinds == Counter({"core: state machines (slot map)": 10240, "other": 72704})
    more = Counter({"core: state machines (slot map)": 10240 + 200 * 10240, "other": 72704})
    grown = per_run(kinds, more, 200)
    assert grown == {"core: state machines (slot map)": 10240.0, "other": 0.0}
    assert next(iter(grown)) == "core: state machines (slot map)", "the largest growth first"


def test_no_side_named_means_both_and_a_wrong_one_is_refused() -> None:
    assert parse([]).sides == ["A", "B"]
    assert parse(["A", "--first", "50"]).first == 50
    with pytest.raises(SystemExit):
        parse(["C"])
