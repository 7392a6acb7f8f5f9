"""`benchmarks.memory_components` splits what only one run keeps between its parts."""

from __future__ import annotations

import sys
import types

import pytest

from benchmarks.memory_components import own_objects, parse, parts, reachable


class Node:
    """An object of the graph under test (its attributes are its references)."""

    def __init__(self, *children: object) -> None:
        self.children = list(children)


def test_what_another_run_reaches_too_is_not_the_runs_own() -> None:
    shared = Node()
    run, other = Node(shared, Node()), Node(shared)
    own = own_objects(run, [other])
    assert id(run) in own
    assert id(shared) not in own
    assert id(run.children[1]) in own


def test_classes_and_functions_are_never_entered() -> None:
    found = reachable(Node(Node, len, types), set())
    assert all(not isinstance(item, (type, types.ModuleType)) for item in found.values())
    assert id(len) not in found


def test_the_first_component_to_reach_an_object_alone_gets_it() -> None:
    common, only_second = Node(), Node()
    first, second = Node(common), Node(common, only_second)
    run = Node(first, second)
    split = {p.name: p for p in parts(own_objects(run, []), [("a", first), ("b", second)], [run])}
    # `a` gets itself, its list and `common` (with common's dict and list)
    assert split["a"].objects == len(reachable(first, set()))
    # `b` gets itself, its list and `only_second`, not `common` again
    assert split["b"].objects == len(reachable(second, {id(common)}))
    assert split["the rest"].objects == len(reachable(run, {id(first), id(second)}))
    total = sum(p.bytes for p in split.values())
    assert total == sum(sys.getsizeof(o) for o in reachable(run, set()).values())


def test_a_component_stops_at_another_and_at_a_coroutine() -> None:
    async def waits() -> None:
        return None

    coroutine = waits()
    try:
        second = Node()
        first = Node(second, coroutine)
        run = Node(first, second)
        split = {p.name: p for p in parts(own_objects(run, []), [("a", first), ("b", second)])}
        # `a` stops at `second` (b's) and at the coroutine
        assert split["a"].objects == len(reachable(first, {id(second), id(coroutine)}))
        assert split["b"].objects == len(reachable(second, set()))
        assert split["the waiting coroutines"].objects == 1
        assert split["the waiting coroutines"].types == [("coroutine", 1)]
        # a component that is itself a coroutine is counted once, as a waiter
        own = own_objects(run, [])
        again = {p.name: p for p in parts(own, [("c", coroutine)])}
        assert "coroutine" not in dict(again["c"].types)
        assert again["the waiting coroutines"].objects == 1
        assert sum(p.objects for p in again.values()) == len(own)
    finally:
        coroutine.close()


def test_fewer_than_three_runs_are_refused() -> None:
    with pytest.raises(SystemExit):
        parse(["--runs", "2"])
    assert parse([]).runs == 20
