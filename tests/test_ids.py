"""The system id source reads random bytes in batches; ids must stay unique anyway."""

from __future__ import annotations

import os
import sys
import threading
import uuid

import pytest

from durable_agent.engine.ids import SystemIdSource, new_id


def test_ids_are_random_version_4_uuids_and_do_not_repeat_across_batches() -> None:
    source = SystemIdSource()
    ids = [source.uuid4_text() for _ in range(5_000)]
    assert len(set(ids)) == len(ids)
    assert {uuid.UUID(i).version for i in ids} == {4}
    assert new_id(source, "ckpt").startswith("ckpt_")


def test_threads_sharing_one_source_get_distinct_ids() -> None:
    source = SystemIdSource()
    taken: list[list[str]] = [[] for _ in range(8)]
    start = threading.Barrier(len(taken))

    def take(into: list[str]) -> None:
        start.wait()
        into.extend(source.uuid4_text() for _ in range(2_000))

    threads = [threading.Thread(target=take, args=(into,)) for into in taken]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [i for into in taken for i in into]
    assert len(set(every)) == len(every) == 16_000


@pytest.mark.skipif(sys.platform == "win32", reason="os.fork")
def test_a_forked_child_does_not_repeat_the_parents_next_ids() -> None:
    source = SystemIdSource()
    source.uuid4_text()  # the batch is read before the fork
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child process
        os.write(write, ",".join(source.uuid4_text() for _ in range(3)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 4096).decode().split(",")
    os.close(read)
    parent = [source.uuid4_text() for _ in range(3)]
    assert len(child) == 3
    assert not set(child) & set(parent)
