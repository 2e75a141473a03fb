"""The runtime's garbage collection between batches (``infra/aio.py``, YoungCollector)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from safactory.infra.aio import YoungCollector


class Node:
    """An object that can sit in a reference cycle."""

    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    gc.disable()  # no automatic collection moves the test's objects meanwhile
    yield
    gc.enable()
    gc.unfreeze()


def _tracked(obj: object) -> bool:
    """Whether a collection would still walk ``obj`` (frozen objects are not listed)."""
    return any(o is obj for o in gc.get_objects())


def _cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_a_tick_collects_young_garbage_and_freezes_the_survivors() -> None:
    collector = YoungCollector(every_s=0.25, full_every_s=3600)
    now = collector._last
    garbage = _cycle()  # unreachable already: the young collection finds it
    survivor = Node()
    collector.tick(now + 0.1)  # too soon: nothing happens
    assert garbage() is not None
    assert _tracked(survivor)
    collector.tick(now + 0.3)
    assert garbage() is None
    assert not _tracked(survivor)  # frozen: no later collection walks it again


def test_a_cycle_among_frozen_objects_waits_for_the_full_collection() -> None:
    collector = YoungCollector(every_s=0.25, full_every_s=10)
    now = collector._last
    a = Node()
    a.other = Node()
    a.other.other = a
    ref = weakref.ref(a)
    collector.tick(now + 1)  # frozen while alive
    del a
    gc.collect()
    assert ref() is not None, "a frozen cycle is not walked by an ordinary collection"
    collector.tick(now + 5)
    assert ref() is not None
    collector.tick(now + 11)  # the full collection is due
    assert ref() is None
