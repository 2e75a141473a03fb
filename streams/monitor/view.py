"""The live view of a deployment: what `safactory monitor` and `safactory serve` show.

Folded from records as they arrive (the follower feeds it): recent alerts with the offending
action, per-risk-type and per-environment rates over a sliding window, step→verdict latency
percentiles, consumer-group lag and policy versions (with a version the inference server
did not load), and the alert and unsafe rates over the last half hour as a time series (the
web page's charts). :meth:`LiveView.snapshot` turns it into one JSON-able dict, so the
terminal and the web page render the same numbers.

Times are event times: a record's Kafka timestamp (when its producer created it), so a view
built ``--from-beginning`` counts old records outside the window instead of as a burst now.
Step→verdict latency is the verdict record's timestamp minus the judged step's
``produced_at``; the steps are read from ``sf.steps`` (headers and the first bytes of the
payload only; a step is decoded only when an alert on its action is shown).
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import ValidationError

from ...schemas import (
    Alert,
    Control,
    ControlCommand,
    Decision,
    EpisodeEnded,
    EpisodeStarted,
    Step,
    Verdict,
)

ACTION_CHARS = 240
"""Characters of an alert's offending action kept for display."""
_STEP_PREFIX = re.compile(rb'^\{"event_id":"([^"\\]{1,128})","produced_at":([0-9.eE+-]+)')
"""A step payload starts with its id and time (fields in model order, codec.encode)."""


@dataclass(frozen=True, slots=True)
class AlertRow:
    """One alert as displayed."""

    event_id: str
    at: float
    risk_type: str
    severity: str
    env: str | None
    episode_id: str
    step_index: int | None
    checker: str
    action: str
    reason: str | None
    latency_ms: float | None
    """Step produced → alert on the log, when the step was seen."""


class Window:
    """Counts of keys over the last ``span_s`` seconds of event time, kept per ``bucket_s``
    bucket: memory grows with the window's length and the number of keys, not the rate."""

    def __init__(self, span_s: float, bucket_s: float = 1.0) -> None:
        self.span_s = span_s
        self.bucket_s = bucket_s
        self._buckets: dict[int, Counter[Hashable]] = {}
        self._horizon = -math.inf
        self.counts: Counter[Hashable] = Counter()

    def add(self, at: float, key: Hashable) -> None:
        """Count ``key`` at time ``at`` (in any order; what already left the window is not
        counted)."""
        bucket = math.floor(at / self.bucket_s)
        if bucket < self._horizon:
            return
        self._buckets.setdefault(bucket, Counter())[key] += 1
        self.counts[key] += 1

    def prune(self, now: float) -> Counter[Hashable]:
        """Forget the buckets that left the window; the counts of what is left."""
        self._horizon = math.floor((now - self.span_s) / self.bucket_s)
        gone = [bucket for bucket in self._buckets if bucket < self._horizon]
        for bucket in gone:
            self.counts.subtract(self._buckets.pop(bucket))
        if gone:
            self.counts = +self.counts
        return self.counts


class StepCache:
    """Recently seen steps: id → (produced_at, payload), bounded by count and bytes."""

    def __init__(self, max_steps: int = 50_000, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_steps = max_steps
        self.max_bytes = max_bytes
        self.bytes = 0
        self._steps: OrderedDict[str, tuple[float, bytes]] = OrderedDict()

    def add(self, value: bytes) -> None:
        """Remember a step record's payload (ignored when it does not start like a step)."""
        match = _STEP_PREFIX.match(value)
        if match is None:
            return
        event_id = match.group(1).decode()
        try:
            produced_at = float(match.group(2))
        except ValueError:
            return
        old = self._steps.pop(event_id, None)
        if old is not None:
            self.bytes -= len(old[1])
        self._steps[event_id] = (produced_at, value)
        self.bytes += len(value)
        while len(self._steps) > self.max_steps or self.bytes > self.max_bytes:
            _, (_, dropped) = self._steps.popitem(last=False)
            self.bytes -= len(dropped)

    def produced_at(self, event_id: str) -> float | None:
        """When step ``event_id`` was produced, if it was seen."""
        found = self._steps.get(event_id)
        return None if found is None else found[0]

    def step(self, event_id: str) -> Step | None:
        """The decoded step, if it was seen and decodes."""
        found = self._steps.get(event_id)
        if found is None:
            return None
        try:
            return Step.model_validate_json(found[1])
        except ValidationError:
            return None


class Series:
    """Counts of a few keys per ``bucket_s`` of event time over the last ``span_s``: the
    history behind the rate charts (memory: one counter per bucket)."""

    def __init__(self, span_s: float = 1800.0, bucket_s: float = 10.0) -> None:
        self.span_s = span_s
        self.bucket_s = bucket_s
        self._buckets: dict[int, Counter[str]] = {}

    def add(self, at: float, key: str) -> None:
        """Count ``key`` at time ``at``."""
        self._buckets.setdefault(math.floor(at / self.bucket_s), Counter())[key] += 1

    def points(self, now: float) -> dict[str, Any]:
        """Per bucket, oldest first, up to the one holding ``now``: alerts per minute and the
        share of ended episodes that were unsafe (None where none ended)."""
        last = math.floor(now / self.bucket_s)
        first = last - int(self.span_s / self.bucket_s) + 1
        for old in [b for b in self._buckets if b < first]:
            del self._buckets[old]
        per_min = 60.0 / self.bucket_s
        alerts, unsafe = [], []
        for bucket in range(first, last + 1):
            counts = self._buckets.get(bucket, Counter())
            alerts.append(counts["alerts"] * per_min)
            ended = counts["ended"]
            unsafe.append(counts["unsafe"] / ended if ended else None)
        return {
            "bucket_s": self.bucket_s,
            "start": first * self.bucket_s,
            "alerts_per_min": alerts,
            "unsafe_rate": unsafe,
        }


def describe_policy(name: str, announced: dict[str, Any]) -> str:
    """One policy's announcement as shown: its version, and when the trainer has newer
    weights the inference server did not load, which and why."""
    text = f"{name} v{announced['version']}"
    newer, error = announced.get("trainer_version"), announced.get("reload_error")
    if newer is not None:
        text += f" (trainer at v{newer}, not served: {error or 'reload failed'})"
    return text


def _on_action(alert: Verdict) -> bool:
    """Whether the alert's evidence is in the action (or it has none to point elsewhere)."""
    return not alert.evidence or any(e.field.startswith("action") for e in alert.evidence)


def offending_action(alert: Verdict, step: Step | None) -> str:
    """What to show for an alert: the step's whole action when the evidence is in the action
    (evidence is a snippet with context cut at arbitrary characters) and the step was seen;
    else the evidence (``field: text`` when it is not in the action); else the reason."""
    chosen: str | None = None
    if step is not None and _on_action(alert):
        call = step.action.tool_call
        called = call and f"{call.function.name}({call.function.arguments})"
        chosen = "  ".join(part for part in (step.action.text, called) if part) or None
    if chosen is None and alert.evidence:
        first = next((e for e in alert.evidence if e.field.startswith("action")), None)
        chosen = first.text if first else f"{alert.evidence[0].field}: {alert.evidence[0].text}"
    text = " ".join((chosen or alert.reason or "").split())
    return text if len(text) <= ACTION_CHARS else text[: ACTION_CHARS - 1] + "…"


def percentile(ordered: list[float], q: float) -> float | None:
    """The ``q``-quantile (0..1) of sorted values, nearest rank; None when empty."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class LiveView:
    """The state behind the dashboards; every ``fold_*`` takes a record's event time."""

    def __init__(
        self,
        window_s: float = 60.0,
        *,
        keep_alerts: int = 200,
        max_latency_samples: int = 20_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.window_s = window_s
        self.clock = clock
        self.alerts: deque[AlertRow] = deque(maxlen=keep_alerts)
        self.steps = StepCache()
        self.alerts_by_risk = Window(window_s)
        self.alerts_by_env = Window(window_s)
        self.steps_by_env = Window(window_s)
        self.verdicts = Window(window_s)
        self.ended_by_env = Window(window_s)
        self.unsafe_by_env = Window(window_s)
        self.history = Series()
        self._latency: deque[tuple[float, float]] = deque(maxlen=max_latency_samples)
        self.totals: Counter[str] = Counter()
        self.policy_in_use: dict[str, int] = {}
        """Environment → policy version of its latest step (the ``sf-policy-version``)."""
        self.policies: dict[str, dict[str, Any]] = {}
        """Policy name → its latest announcement on the policy topic."""
        self.paused: dict[str, tuple[float, Control]] = {}
        """Episode → (when, the pause) for episodes waiting for a person's approval."""
        self.lag: dict[str, dict[str, Any]] = {}
        """Consumer group → {"lag": records behind, "topics": {topic: lag}}."""
        self.status = "starting"
        self.warning: str | None = None
        """The latest warning of the follower or its clients (shown, never fatal)."""
        self.seq = 0
        """Bumped by every change; a renderer redraws when it moved."""

    # ------------------------------------------------------------------ folding

    def fold_step(
        self, value: bytes, env: str | None, policy_version: int | None, at: float
    ) -> None:
        """A step record (payload bytes and its headers' env and policy version)."""
        self.steps.add(value)
        self.steps_by_env.add(at, env or "?")
        if env is not None and policy_version is not None:
            self.policy_in_use[env] = policy_version
        self.totals["steps"] += 1
        self.seq += 1

    def fold_verdict(self, verdict: Verdict, at: float) -> None:
        """A verdict: counted, and its latency sampled when its step was seen."""
        self.verdicts.add(at, verdict.risk_type)
        self.totals["verdicts"] += 1
        if verdict.checker_kind == "composite" and verdict.decision == Decision.UNCERTAIN:
            self.totals["uncertain"] += 1  # a step something fired on, nothing decided
        if verdict.step_index is not None:
            produced = self.steps.produced_at(verdict.source_event_id)
            if produced is not None:
                self._latency.append((at, max(0.0, at - produced)))
        self.seq += 1

    def fold_alert(self, alert: Alert, at: float) -> None:
        """An alert: shown with its offending action and counted per risk type and env."""
        produced = self.steps.produced_at(alert.source_event_id)
        step = self.steps.step(alert.source_event_id) if _on_action(alert) else None
        self.alerts.appendleft(
            AlertRow(
                event_id=alert.event_id,
                at=at,
                risk_type=alert.risk_type,
                severity=alert.severity.value,
                env=alert.env,
                episode_id=alert.episode_id,
                step_index=alert.step_index,
                checker=alert.checker,
                action=offending_action(alert, step),
                reason=alert.reason,
                latency_ms=None if produced is None else max(0.0, at - produced) * 1000.0,
            )
        )
        self.alerts_by_risk.add(at, alert.risk_type)
        self.alerts_by_env.add(at, alert.env or "?")
        self.history.add(at, "alerts")
        self.totals["alerts"] += 1
        self.seq += 1

    def fold_episode(self, event: EpisodeStarted | EpisodeEnded, at: float) -> None:
        """An episode start or end; ends are counted per env, unsafe ones apart."""
        if isinstance(event, EpisodeEnded):
            self.ended_by_env.add(at, event.env)
            self.history.add(at, "ended")
            self.totals["episodes_ended"] += 1
            if event.safety is not None and event.safety.unsafe:
                self.unsafe_by_env.add(at, event.env)
                self.history.add(at, "unsafe")
                self.totals["unsafe_episodes"] += 1
        else:
            self.totals["episodes_started"] += 1
        self.seq += 1

    def fold_control(self, control: Control, at: float) -> None:
        """A control decision: a pause waits for approval until the episode's next one."""
        if control.command is ControlCommand.PAUSE:
            self.paused[control.episode_id] = (at, control)
        else:
            self.paused.pop(control.episode_id, None)
        self.totals[f"control_{control.command.value}"] += 1
        self.seq += 1

    def oldest_paused(self) -> Control | None:
        """The pause that has waited longest (what the monitor's keys answer)."""
        waiting = sorted(self.paused.values(), key=lambda entry: entry[0])
        return waiting[0][1] if waiting else None

    def set_lag(self, lag: dict[str, dict[str, Any]]) -> None:
        """The latest consumer-group lag reading."""
        if lag != self.lag:
            self.lag = lag
            self.seq += 1

    def set_policies(self, policies: dict[str, dict[str, Any]]) -> None:
        """The latest announcement per policy name."""
        if policies != self.policies:
            self.policies = policies
            self.seq += 1

    def set_status(self, status: str) -> None:
        """What the follower is doing (``starting``, ``live``, or an error)."""
        self.status = status
        self.seq += 1

    def set_warning(self, warning: str) -> None:
        """Show ``warning`` until the next one."""
        self.warning = warning
        self.seq += 1

    # ------------------------------------------------------------------ reading

    def latency(self, now: float) -> dict[str, float | int | None]:
        """Step→verdict latency over the window, in milliseconds."""
        horizon = now - self.window_s
        while self._latency and self._latency[0][0] < horizon:
            self._latency.popleft()
        ordered = sorted(sample for _, sample in self._latency)
        p50, p99 = percentile(ordered, 0.5), percentile(ordered, 0.99)
        return {
            "samples": len(ordered),
            "p50_ms": None if p50 is None else p50 * 1000.0,
            "p99_ms": None if p99 is None else p99 * 1000.0,
        }

    def snapshot(self, alerts: int = 50) -> dict[str, Any]:
        """Everything a dashboard shows, as JSON-able data; rates are per minute."""
        now = self.clock()
        per_min = 60.0 / self.window_s

        def rates(window: Window) -> dict[str, float]:
            counts = window.prune(now)
            return {str(k): n * per_min for k, n in counts.most_common()}

        newest = sorted(self.alerts, key=lambda row: row.at, reverse=True)
        envs: dict[str, dict[str, float]] = {}
        for name, window in (
            ("steps", self.steps_by_env),
            ("alerts", self.alerts_by_env),
            ("episodes", self.ended_by_env),
            ("unsafe", self.unsafe_by_env),
        ):
            for env, rate in rates(window).items():
                envs.setdefault(env, {"steps": 0.0, "alerts": 0.0, "episodes": 0.0, "unsafe": 0.0})[
                    name
                ] = rate
        return {
            "seq": self.seq,
            "now": now,
            "status": self.status,
            "warning": self.warning,
            "window_s": self.window_s,
            "alerts": [asdict(row) for row in newest[:alerts]],
            "alert_rates": rates(self.alerts_by_risk),
            "verdicts_per_min": sum(self.verdicts.prune(now).values()) * per_min,
            "envs": dict(sorted(envs.items())),
            "latency": self.latency(now),
            "lag": self.lag,
            "policy_in_use": dict(sorted(self.policy_in_use.items())),
            "policies": {
                name: {**p, "shown": describe_policy(name, p)} for name, p in self.policies.items()
            },
            "series": self.history.points(now),
            "paused": [
                {"episode_id": c.episode_id, "at": at, "reason": c.reason, "control_id": c.event_id}
                for at, c in sorted(self.paused.values(), key=lambda entry: entry[0])
            ],
            "totals": dict(self.totals),
        }


def to_json(snapshot: dict[str, Any]) -> str:
    """A snapshot as compact JSON (non-finite numbers cannot occur: rates and times only)."""
    return json.dumps(snapshot, separators=(",", ":"), ensure_ascii=False)


@dataclass
class Pace:
    """When a view is shown again (a terminal redraw, a web page's snapshot): after a
    change, at most every ``min_s``; while nothing changes, every ``idle_s`` (rates decay)."""

    min_s: float
    idle_s: float
    seq: int = -1
    at: float = 0.0

    def due(self, seq: int, now: float) -> bool:
        """Whether the view at change ``seq`` is shown ``now`` (then counted as shown)."""
        changed = seq != self.seq and now - self.at >= self.min_s
        if not changed and now - self.at < self.idle_s:
            return False
        self.seq, self.at = seq, now
        return True


class WarningsToView(logging.Handler):
    """A logging handler that shows each warning in the view (a dashboard owns the screen,
    so log lines must not be printed over it)."""

    def __init__(self, view: LiveView) -> None:
        super().__init__(logging.WARNING)
        self.view = view

    def emit(self, record: logging.LogRecord) -> None:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        self.view.set_warning(f"{stamp} {record.name}: {' '.join(record.getMessage().split())}")
