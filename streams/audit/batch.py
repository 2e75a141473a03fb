"""Batch audit of recorded traces: the live engine over imported records, plus metrics."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .engine import AuditEngine, TrajectoryResult
from .importers import AuditRecord


async def audit_records(
    engine: AuditEngine,
    records: Iterable[AuditRecord],
    progress: Callable[[int], None] | None = None,
) -> list[TrajectoryResult]:
    """Audit every record (each a whole episode) and fold each to a trajectory result."""
    out = []
    for record in records:
        audits = await engine.audit_episode(record.steps)
        out.append(TrajectoryResult.of(record.id, audits))
        if progress:
            progress(len(out))
    return out


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


def metrics_by_group(
    records: Sequence[AuditRecord], results: Sequence[TrajectoryResult]
) -> dict[str, Metrics]:
    """Trajectory-level metrics of the labelled records: per group (R-Judge category,
    AgentDojo suite), per attack kind (``attack=...``), then over all of them (``all``)."""
    groups: dict[str, tuple[list[bool], list[bool]]] = {}
    for record, result in zip(records, results, strict=True):
        if record.unsafe is None:
            continue
        names = [record.group] if record.group else []
        if record.attack:
            names.append(f"attack={record.attack}")
        for name in [*names, "all"]:
            labels, predictions = groups.setdefault(name, ([], []))
            labels.append(record.unsafe)
            predictions.append(result.unsafe)
    order = sorted(groups, key=lambda g: (g == "all", g.startswith("attack="), g))
    return {g: Metrics.of(*groups[g]) for g in order}
