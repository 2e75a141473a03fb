"""Admission's capacity rule (``infra.staleness``): pure, no broker."""

from __future__ import annotations

import json

import pytest

from safactory.infra.staleness import Admission, StalenessController
from safactory.schemas import PolicyVersion, codec

START, RELOAD, WAIT = Admission.START, Admission.RELOAD, Admission.WAIT


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _admit_all(c: StalenessController, version: int, consumed: int, in_flight: int) -> int:
    """How many episodes ``c`` starts in a row (each adds one to in flight)."""
    n = 0
    while c.admit_episode(version, version, in_flight + n, consumed=consumed) is START:
        n += 1
        assert n < 1000
    return n


def test_capacity_is_areals_get_capacity_when_each_update_takes_one_batch() -> None:
    # (max_staleness + v + 1) × batch − (accepted + running), v = consumed / batch
    c = StalenessController(max_staleness=2, batch_size=4)
    assert c.capacity(0, 0, consumed=0) == 12
    assert _admit_all(c, 0, consumed=0, in_flight=0) == 12
    assert c.admit_episode(0, 0, 12, consumed=0) is WAIT
    # one update took one batch: room for exactly one more batch
    assert c.capacity(1, 1, consumed=4) == (2 + 1 + 1) * 4 - 12
    assert _admit_all(c, 1, consumed=4, in_flight=8) == 4
    # an update that took three batches (async trainer) frees three
    assert c.capacity(2, 2, consumed=16) == 16 + 3 * 4 - 16 == 12
    assert c.started == 16


def test_episodes_start_on_the_latest_weights_under_the_capacity_rule() -> None:
    header_only = StalenessController(max_staleness=2)
    capacity = StalenessController(max_staleness=2, batch_size=4)
    assert header_only.admit_episode(3, 4, 0, consumed=4) is START  # lag 1 is allowed
    assert capacity.admit_episode(3, 4, 0, consumed=4) is RELOAD  # a newer version: reload
    assert capacity.admit_episode(1, 4, 0, consumed=4) is RELOAD  # the version rule as before
    # on older weights an episode has fewer versions left: (2 + 1 − lag) batches
    assert capacity.capacity(3, 4, consumed=4) == 2 * 4
    assert capacity.capacity(4, 4, consumed=4) == 3 * 4


def test_no_announced_count_or_no_batch_size_is_the_version_rule_alone() -> None:
    old_trainer = StalenessController(max_staleness=1, batch_size=2)
    assert all(old_trainer.admit_episode(5, 6, n) is START for n in range(50))
    assert old_trainer.started == 0
    rule_off = StalenessController(max_staleness=1)
    assert all(rule_off.admit_episode(5, 5, n, consumed=0) is START for n in range(50))
    with pytest.raises(ValueError, match="capacity needs batch_size"):
        rule_off.capacity(5, 5, consumed=0)


def test_workers_split_the_budget_and_never_exceed_it_together() -> None:
    fleet = [StalenessController(max_staleness=2, batch_size=8, workers=4) for _ in range(4)]
    started = [_admit_all(c, 0, consumed=100, in_flight=0) for c in fleet]
    assert started == [6, 6, 6, 6] and sum(started) <= 3 * 8
    # each counts from the trainer's count when it joined: a late worker inherits nothing
    late = StalenessController(max_staleness=2, batch_size=8, workers=4)
    assert _admit_all(late, 0, consumed=10_000, in_flight=0) == 6


def test_a_worker_with_nothing_in_flight_may_always_start_one() -> None:
    c = StalenessController(max_staleness=0, batch_size=2)
    assert _admit_all(c, 0, consumed=0, in_flight=0) == 2
    assert c.admit_episode(0, 0, 1, consumed=0) is WAIT
    # the two never reached the trainer (dead letters): admission still makes progress
    assert c.admit_episode(0, 0, 0, consumed=0) is START
    # episodes admitted with a key count as in flight before the caller counts them
    keyed = StalenessController(max_staleness=0, batch_size=2)
    assert [keyed.admit_episode(0, 0, 0, consumed=0, key=k) for k in "abc"] == [START, START, WAIT]


def test_a_trainer_count_that_goes_back_restarts_the_count_at_the_episodes_in_flight() -> None:
    c = StalenessController(max_staleness=0, batch_size=4)
    assert _admit_all(c, 7, consumed=500, in_flight=0) == 4
    assert c.capacity(0, 0, consumed=0, in_flight=3) == 4 - 3  # a fresh trainer checkpoint
    assert (c.consumed_base, c.started) == (0, 3)


def test_an_episode_in_flight_is_protected_until_it_is_a_straggler() -> None:
    clock = Clock()
    c = StalenessController(max_staleness=2, batch_size=4, protect_quantile=0.5, clock=clock)
    for key in range(4):  # four episodes of 1 s each teach the controller their duration
        assert c.admit_episode(0, 0, 0, consumed=0, key=key) is START
    clock.now = 1.0
    for key in range(4):
        c.episode_ended(key)
    assert c.admit_episode(0, 0, 0, consumed=0, key="slow") is START  # started at v0, t=1
    clock.now = 1.5
    # the trainer reached v2 on 8 trajectories: "slow" is fresh for one more update only,
    # so new starts may not add up to a batch besides it and what is outstanding
    assert c.capacity(2, 2, consumed=8) == 8 + 1 * 4 - 5 == 7
    clock.now = 2.5  # older than the typical episode now: a straggler, no longer protected
    assert c.capacity(2, 2, consumed=8) == 8 + 3 * 4 - 5 == 15
    c.episode_ended("slow")
    c.episode_ended("never admitted")  # ignored
    assert c.capacity(2, 2, consumed=8) == 15


def test_bad_settings_say_how_to_fix_them() -> None:
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        StalenessController(batch_size=0)
    with pytest.raises(ValueError, match="workers must be >= 1"):
        StalenessController(batch_size=4, workers=0)
    with pytest.raises(ValueError, match=r"protect_quantile must be in \(0, 1\]"):
        StalenessController(batch_size=4, protect_quantile=0)


def test_the_trainer_counts_what_it_finished_with_for_the_announcement() -> None:
    c = StalenessController(max_staleness=1)
    for trainer, behaviour in [(3, 3), (3, 2), (3, 1), (4, 1)]:
        c.consume(trainer, behaviour)
    assert c.accepted == {0: 1, 1: 1} and c.skipped == {2: 1, 3: 1}
    assert c.consumed_total == 4


def test_announcements_without_a_consumed_count_still_decode() -> None:
    new = PolicyVersion(policy_name="p", policy_version=3, uri="u", sha256="a" * 64, consumed=9)
    record = codec.encode(new)
    assert codec.decode(record.value, record.headers) == new
    old_value = json.loads(record.value)  # as an older trainer wrote it: no such field
    del old_value["consumed"]
    old = codec.decode(json.dumps(old_value).encode(), record.headers)
    assert isinstance(old, PolicyVersion) and old.consumed is None
