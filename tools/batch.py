"""Batch audit of recorded traces: the live engine over imported records, one record at a
time, and the metrics of the labelled ones, counted as they go."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from rich.table import Table

from ..schemas import Decision
from ..streams.audit.engine import FIRED, AuditEngine, StepAudit, TrajectoryResult
from ..streams.audit.explain import Explanation, explain
from ..streams.audit.memory import QUIET_PRIOR, case_vector, combine
from ..streams.audit.text import trajectory_text
from ..streams.audit.user_rules import ALLOW
from .importers import AuditRecord, ImportFormatError, SkippedRecord

if TYPE_CHECKING:  # lancedb loads only when labels are used
    from .casebook import AuditedCase, Casebook


def audit_record(
    runner: asyncio.Runner, engine: AuditEngine, record: AuditRecord
) -> tuple[TrajectoryResult, list[StepAudit]]:
    """Audit one record (a whole episode): its trajectory result, and each step's audit."""
    audits = runner.run(engine.audit_episode(record.steps))
    return TrajectoryResult.of(record.id, audits), audits


def explained(record: AuditRecord, audits: list[StepAudit]) -> list[Explanation]:
    """Why each step of a record was judged as it was (steps where something fired)."""
    return [
        explain(audit, record.steps[:index])
        for index, audit in enumerate(audits)
        if any(v.decision in FIRED or v.checker == ALLOW for v in audit.verdicts)
    ]


@contextmanager
def stop_on_interrupt() -> Iterator[threading.Event]:
    """Within the block, a first Ctrl-C (SIGINT) sets the returned event, so a batch loop
    stops after the record in hand and keeps what it wrote; a second one interrupts at
    once. Outside the main thread the event is never set."""
    requested = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield requested
        return

    def on_interrupt(signum: int, frame: object) -> None:
        if requested.is_set():
            raise KeyboardInterrupt
        requested.set()

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield requested
    finally:
        signal.signal(signal.SIGINT, previous)


@dataclass(frozen=True, slots=True)
class Metrics:
    """Confusion counts and the derived rates (percent)."""

    tp: int
    fp: int
    tn: int
    fn: int

    @classmethod
    def of(cls, labels: Sequence[bool], predictions: Sequence[bool]) -> Metrics:
        """Count a labelled set of predictions."""
        pairs = list(zip(labels, predictions, strict=True))
        return cls(
            sum(y and p for y, p in pairs),
            sum(not y and p for y, p in pairs),
            sum(not y and not p for y, p in pairs),
            sum(y and not p for y, p in pairs),
        )

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.tn + self.fn

    @property
    def precision(self) -> float:
        return 100.0 * self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return 100.0 * self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    @property
    def accuracy(self) -> float:
        return 100.0 * (self.tp + self.tn) / self.n if self.n else 0.0

    @property
    def false_positive_rate(self) -> float:
        return 100.0 * self.fp / (self.fp + self.tn) if self.fp + self.tn else 0.0

    def row(self) -> dict[str, float | int]:
        """The figures as a flat dict (rounded)."""
        return {
            "n": self.n,
            "precision": round(self.precision, 1),
            "recall": round(self.recall, 1),
            "f1": round(self.f1, 1),
            "accuracy": round(self.accuracy, 1),
            "fpr": round(self.false_positive_rate, 1),
        }


@dataclass
class LabelTally:
    """Labels and predictions of the labelled records, per group (R-Judge category,
    AgentDojo suite), per attack kind (``attack=...``) and overall (``all``), counted one
    record at a time."""

    groups: dict[str, tuple[list[bool], list[bool]]] = field(default_factory=dict)

    def add(self, record: AuditRecord, result: TrajectoryResult) -> None:
        """Count one audited record (nothing when it carries no label)."""
        if record.unsafe is None:
            return
        names = [record.group] if record.group else []
        if record.attack:
            names.append(f"attack={record.attack}")
        for name in [*names, "all"]:
            labels, predictions = self.groups.setdefault(name, ([], []))
            labels.append(record.unsafe)
            predictions.append(result.unsafe)

    def table(self) -> Table:
        """The metrics per group as a table (percent; FPR = flagged among safe)."""
        table = Table(title="trajectory level (percent; FPR = flagged among safe)")
        for column in ("group", "n", "P", "R", "F1", "Acc", "FPR"):
            table.add_column(column, justify="left" if column == "group" else "right")
        for name, m in self.metrics().items():
            figures = (m.precision, m.recall, m.f1, m.accuracy, m.false_positive_rate)
            table.add_row(name, str(m.n), *(f"{x:.1f}" for x in figures))
        return table

    def metrics(self) -> dict[str, Metrics]:
        """The metrics per group, groups first, attack kinds next, ``all`` last."""
        groups = self.groups
        order = sorted(groups, key=lambda g: (g == "all", g.startswith("attack="), g))
        return {g: Metrics.of(*groups[g]) for g in order}


def skipped_line(entry: SkippedRecord) -> dict[str, object]:
    """The audit line of a record that could not be read."""
    return {
        "id": entry.id,
        "unsafe": None,
        "decision": None,
        "probability": None,
        "score": None,
        "risk_types": [],
        "first_unsafe_step": None,
        "error": entry.reason,
    }


class LabelledAudit:
    """People's labels in a batch audit: each record is judged by the label memory of the
    casebook beside the checkers (``streams/audit/memory.py``), and remembered there so a
    later label of it can teach the next audit."""

    BATCH = 64
    """Audited cases are written this many at a time."""

    def __init__(self, casebook: Casebook, origin: str) -> None:
        from ..streams.audit.embedding import deep_embedder

        self.casebook = casebook
        self.origin = origin
        self.memory = casebook.memory()
        self.embedder = deep_embedder()
        self._pending: list[AuditedCase] = []

    def apply(
        self, record: AuditRecord, result: TrajectoryResult, line: dict[str, Any]
    ) -> TrajectoryResult:
        """The result under the labels (``line`` gets ``labels`` and, where they changed
        the decision, ``checkers_decision`` and ``by_labels``)."""
        from .casebook import AuditedCase

        vector = case_vector(record.steps, self.embedder)
        prior = result.probability if result.probability is not None else QUIET_PRIOR
        text = f"{trajectory_text(record.steps)}\nthe checkers: {result.decision}"
        self._pending.append(
            AuditedCase(record.id, vector, prior, result.decision, text, record.unsafe, self.origin)
        )
        if len(self._pending) >= self.BATCH:
            self.flush()
        line["labels"] = self.memory.version
        if not len(self.memory):
            return result
        recall = self.memory.recall(record.id, vector, prior)
        decision = combine(result.decision, recall)
        if decision == result.decision:
            return result
        line["checkers_decision"] = str(result.decision)
        line["by_labels"] = recall.reason(self.memory.version)
        line["decision"] = str(decision)
        line["unsafe"] = decision == Decision.BLOCK
        line["probability"] = round(recall.probability, 4)
        return replace(
            result,
            decision=decision,
            unsafe=decision == Decision.BLOCK,
            probability=line["probability"],
        )

    def flush(self) -> None:
        """Write the cases audited so far."""
        self.casebook.remember(self._pending)
        self._pending = []


@dataclass(frozen=True, slots=True)
class Audited:
    """One input record's audit line, the skip reasons to say before it, and for an audited
    record its result and (``explain``) why its steps were judged as they were."""

    line: dict[str, Any]
    said: list[str]
    record: AuditRecord | None = None
    result: TrajectoryResult | None = None
    steps: list[Explanation] | None = None


@dataclass
class BatchAudit:
    """A batch audit, record by record: each record's line, the counts, the labelled tally,
    and the reasons of records that could not be read, said once a record is read (a run
    that reads none ends in one error naming them: :meth:`nothing_read`)."""

    engine: AuditEngine
    explain: bool = False
    strict: bool = False
    """Stop (ImportFormatError) at the first record that cannot be read."""
    labels: LabelledAudit | None = None
    """The casebook's labels, consulted and added to (None: the checkers alone)."""
    tally: LabelTally = field(default_factory=LabelTally)
    audited: int = 0
    skipped: int = 0
    unread: list[str] = field(default_factory=list)

    def lines(
        self, runner: asyncio.Runner, entries: Iterable[AuditRecord | SkippedRecord]
    ) -> Iterator[Audited]:
        """Audit ``entries`` in order, one :class:`Audited` each."""
        for entry in entries:
            if isinstance(entry, SkippedRecord):
                if self.strict:
                    raise ImportFormatError(entry.reason)
                self.skipped += 1
                if not self.audited:
                    self.unread.append(entry.reason)
                yield Audited(skipped_line(entry), [entry.reason] if self.audited else [])
                continue
            said, self.unread = self.unread, []
            result, audits = audit_record(runner, self.engine, entry)
            line = result.as_json()
            if self.labels is not None:
                result = self.labels.apply(entry, result, line)
            self.tally.add(entry, result)
            self.audited += 1
            steps = explained(entry, audits) if self.explain else None
            if steps is not None:
                line["steps"] = [e.as_json() for e in steps]
            yield Audited(line, said, entry, result, steps)

    def nothing_read(self) -> str | None:
        """The one error of a run where no record could be read (else None)."""
        if not self.skipped or self.audited:
            return None
        more = f" (and {len(self.unread) - 1} more records)" if len(self.unread) > 1 else ""
        return f"no record could be read: {self.unread[0]}{more}"
