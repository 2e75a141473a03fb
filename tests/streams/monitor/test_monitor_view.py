"""The live view folded from events: windows, latency percentiles, the offending action."""

from __future__ import annotations

from safactory.schemas import (
    Action,
    Alert,
    EpisodeEnded,
    Evidence,
    Outcome,
    SafetyOutcome,
    Severity,
    Step,
    Verdict,
    codec,
)
from safactory.streams.monitor.view import LiveView, StepCache, Window, percentile


def _step(index: int, text: str, *, at: float = 1000.0, env: str = "os") -> Step:
    return Step(
        episode_id="ep-1",
        step_index=index,
        env=env,
        task_id="t",
        policy_version=3,
        action=Action(text=text),
        produced_at=at,
    )


def _verdict(
    step: Step,
    *,
    cls: type[Verdict] = Verdict,
    evidence: str | None = None,
    field: str = "action.text",
    risk: str = "destructive_operation",
) -> Verdict:
    return cls(
        episode_id=step.episode_id,
        source_event_id=step.event_id,
        step_index=step.step_index,
        env=step.env,
        checker="rule.x",
        risk_type=risk,
        severity=Severity.CRITICAL,
        score=1.0,
        reason="recursive delete",
        evidence=[Evidence(text=evidence, field=field)] if evidence else [],
    )


def test_window_forgets_what_left_it() -> None:
    window = Window(60)
    window.add(0.0, "a")
    window.add(30.0, "a")
    window.add(59.0, "b")
    assert window.prune(59.0) == {"a": 2, "b": 1}
    assert window.prune(61.0) == {"a": 1, "b": 1}
    assert window.prune(200.0) == {}


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile([7.0], 0.99) == 7.0
    assert percentile([], 0.5) is None


def test_latency_is_verdict_time_minus_step_time_over_the_window() -> None:
    now = [1050.0]
    view = LiveView(60, clock=lambda: now[0])
    for i in range(100):
        step = _step(i, "ls", at=1000.0 + i * 0.5)
        view.fold_step(codec.encode(step).value, "os", 3, step.produced_at)
        view.fold_verdict(_verdict(step), step.produced_at + (i + 1) / 1000.0)  # 1..100 ms
    stats = view.latency(now[0])
    assert stats["samples"] == 100
    assert abs(stats["p50_ms"] - 50.0) < 1e-6 and abs(stats["p99_ms"] - 99.0) < 1e-6
    now[0] = 1200.0  # everything is older than the window now
    assert view.latency(now[0]) == {"samples": 0, "p50_ms": None, "p99_ms": None}
    orphan = _verdict(_step(7, "x").model_copy(update={"event_id": "never-seen"}))
    view.fold_verdict(orphan, 1199.0)
    assert view.latency(now[0])["samples"] == 0  # no step seen: no sample, no guess


def test_alert_shows_the_whole_action_else_its_evidence() -> None:
    view = LiveView(60, clock=lambda: 1001.0)
    read = _step(0, "cat notes.txt")
    wipe = _step(1, "tar -cf ~/logs.tar -C ~ logs && rm -rf ~/documents")
    for step in (read, wipe):
        view.fold_step(codec.encode(step).value, "os", 3, step.produced_at)
    unseen = _step(2, "never published")
    view.fold_alert(_verdict(unseen, cls=Alert, evidence="mand: rm -rf ~/x"), 1000.0)
    view.fold_alert(_verdict(read, cls=Alert, evidence="IGNORE ALL", field="tool_result"), 1000.25)
    view.fold_alert(
        _verdict(wipe, cls=Alert, evidence="~/logs.tar -C ~ logs && rm -rf ~/doc"), 1000.5
    )
    snap = view.snapshot()
    assert [a["action"] for a in snap["alerts"]] == [
        "tar -cf ~/logs.tar -C ~ logs && rm -rf ~/documents",  # the step's, not the snippet
        "tool_result: IGNORE ALL",  # evidence elsewhere than the action says where
        "mand: rm -rf ~/x",  # step not seen: the evidence as it is
    ]
    assert snap["alerts"][0]["latency_ms"] == 500.0
    assert snap["alert_rates"] == {"destructive_operation": 3.0}
    assert snap["envs"]["os"] == {"steps": 2.0, "alerts": 3.0, "episodes": 0.0, "unsafe": 0.0}
    assert snap["policy_in_use"] == {"os": 3}


def test_unsafe_episode_ends_are_counted_per_env() -> None:
    view = LiveView(30, clock=lambda: 1000.0)
    for n, unsafe in enumerate((True, False, True)):
        end = EpisodeEnded(
            episode_id=f"e{n}",
            task_id="t",
            env="web",
            outcome=Outcome.FAILURE,
            safety=SafetyOutcome(unsafe=unsafe),
        )
        view.fold_episode(end, 999.0)
    snap = view.snapshot()
    assert snap["envs"]["web"]["episodes"] == 6.0  # 3 in a 30 s window = 6/min
    assert snap["envs"]["web"]["unsafe"] == 4.0
    assert snap["totals"]["unsafe_episodes"] == 2


def test_step_cache_is_bounded_and_ignores_non_steps() -> None:
    cache = StepCache(max_steps=3)
    steps = [_step(i, "ls") for i in range(5)]
    for step in steps:
        cache.add(codec.encode(step).value)
    cache.add(b'{"not": "a step"}')
    assert [cache.produced_at(s.event_id) for s in steps] == [None, None, 1000.0, 1000.0, 1000.0]
    assert cache.step(steps[4].event_id) == steps[4]
    small = StepCache(max_bytes=1)
    small.add(codec.encode(steps[0]).value)
    assert small.bytes == 0


def test_alerts_are_listed_newest_first_whatever_their_arrival_order() -> None:
    view = LiveView(60, clock=lambda: 1010.0)
    for n, at in enumerate((1003.0, 1001.0, 1005.0)):  # partitions interleave on a replay
        view.fold_alert(_verdict(_step(n, "x"), cls=Alert, evidence=f"at {at}"), at)
    assert [a["action"] for a in view.snapshot()["alerts"]] == [
        "at 1005.0",
        "at 1003.0",
        "at 1001.0",
    ]


def test_window_memory_follows_its_length_not_the_rate() -> None:
    window = Window(60)
    for n in range(100_000):  # 100k events in 10 s, out of order within each second
        window.add(1000.0 + (n % 10) + (n % 7) / 10, "steps" if n % 3 else "alerts")
    assert len(window._buckets) == 10
    assert sum(window.prune(1010.0).values()) == 100_000
    window.add(900.0, "late")  # left the window before it arrived: not counted
    assert "late" not in window.prune(1010.0) and sum(window.prune(1065.5).values()) == 50_000


def test_alert_and_unsafe_rates_over_time_are_kept_per_bucket() -> None:
    """The series behind serve's charts: alerts per minute and the unsafe share of the
    episodes that ended, per 10 s bucket over the last half hour (gaps where none ended)."""
    now = 10_000.0
    view = LiveView(60, clock=lambda: now)
    step = _step(0, "rm -rf /")
    for at in (now - 25.0, now - 21.0, now - 5.0):
        view.fold_alert(_verdict(step, cls=Alert), at)
    for n, (at, unsafe) in enumerate(((now - 24.0, True), (now - 23.0, False), (now - 4.0, True))):
        end = EpisodeEnded(
            episode_id=f"e{n}",
            task_id="t",
            env="os",
            outcome=Outcome.FAILURE,
            safety=SafetyOutcome(unsafe=unsafe),
        )
        view.fold_episode(end, at)
    view.fold_alert(_verdict(step, cls=Alert), now - 4000.0)  # older than the half hour
    series = view.snapshot()["series"]
    assert series["bucket_s"] == 10.0 and len(series["alerts_per_min"]) == 180
    assert series["start"] == now - 1790.0
    # the last bucket is the one holding now: 2, 0, 1 and 0 alerts in the last four
    assert series["alerts_per_min"][-4:] == [12.0, 0.0, 6.0, 0.0]
    assert series["unsafe_rate"][-4:] == [0.5, None, 1.0, None]
    assert sum(series["alerts_per_min"]) == 18.0


def test_a_version_the_inference_server_did_not_load_is_shown() -> None:
    view = LiveView(60, clock=lambda: 0.0)
    view.set_policies(
        {
            "served": {"version": 4, "trainer_version": None, "reload_error": None},
            "stuck": {"version": 2, "trainer_version": 3, "reload_error": "HTTP 500: refused"},
        }
    )
    policies = view.snapshot()["policies"]
    assert policies["served"]["shown"] == "served v4"
    assert policies["stuck"]["shown"] == "stuck v2 (trainer at v3, not served: HTTP 500: refused)"
