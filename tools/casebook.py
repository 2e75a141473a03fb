"""Where a deployment's audited cases and people's labels are kept: two LanceDB tables.

``labels`` holds :class:`~safactory.schemas.Label` events, the same rows the sink writes
from ``sf.labels`` (written here directly when no broker is involved: ``safactory label
import``, ``safactory review``); ``audited_cases`` holds each audited episode's meaning
(``memory.case_vector``), the checkers' probability and decision, and its text for
the review queue, one row per case id (a later audit replaces it). :meth:`Casebook.memory`
joins the two into the label memory the auditor consults, as the labels
stood at any moment (``as_of``: a replay re-audits under the labels it had then).

A label that contradicts the environment's own ground truth, or a verdict the checkers
blocked or warned on with probability at least :data:`CONFIDENT`, is kept but flagged for a
second look: the memory leaves it out until a second person labels the case the same way.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..infra.consumer import Delivery
from ..schemas import Decision, Label
from ..sinks.lance import LanceSink, sql_quote
from ..sinks.location import Db
from ..sinks.tables import COLUMNS
from ..streams.audit.memory import LabelledCase, LabelMemory

CASES = "audited_cases"
LABELS = "labels"
CONFIDENT = 0.9
"""A flag or block at least this probable is a confident verdict: a label against it waits
for a second person."""


@dataclass(frozen=True, slots=True)
class AuditedCase:
    """One audited episode as the review queue and the memory need it."""

    case_id: str
    vector: np.ndarray
    prior: float
    """The checkers' calibrated probability (without labels)."""
    decision: Decision
    """The checkers' decision (without labels)."""
    text: str
    """What was asked and done, and what the checkers said (the queue shows it)."""
    truth: bool | None = None
    """The environment's or the file's own label, where it has one."""
    origin: str = ""


def _case_schema() -> pa.Schema:
    return pa.schema(
        [
            pa.field("case_id", pa.string(), nullable=False),
            pa.field("vector", pa.list_(pa.float32())),
            pa.field("prior", pa.float64()),
            pa.field("decision", pa.string()),
            pa.field("text", pa.string()),
            pa.field("truth", pa.bool_()),
            pa.field("origin", pa.string()),
            pa.field("audited_at", pa.float64()),
        ]
    )


class Casebook:
    """The two tables of one LanceDB database (module docstring)."""

    def __init__(self, db: Db) -> None:
        self.sink = LanceSink(db, check_ids=False)

    def _exists(self, name: str) -> bool:
        return name in self.sink.db.list_tables().tables

    def remember(self, cases: Sequence[AuditedCase]) -> None:
        """Store (or replace) audited cases."""
        if not cases:
            return
        table = self.sink.db.create_table(CASES, schema=_case_schema(), exist_ok=True)
        now = time.time()
        rows = pa.Table.from_pylist(
            [
                {
                    "case_id": c.case_id,
                    "vector": c.vector.astype(np.float32).tolist(),
                    "prior": c.prior,
                    "decision": str(c.decision),
                    "text": c.text,
                    "truth": c.truth,
                    "origin": c.origin,
                    "audited_at": now,
                }
                for c in {c.case_id: c for c in cases}.values()
            ],
            schema=_case_schema(),
        )
        (
            table.merge_insert("case_id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute(rows)
        )

    def cases(self, ids: Iterable[str] | None = None) -> dict[str, AuditedCase]:
        """Audited cases by id (``ids``: only those)."""
        if not self._exists(CASES):
            return {}
        query = self.sink.db.open_table(CASES).search()
        wanted = list(ids) if ids is not None else None
        if wanted is not None:
            if not wanted:
                return {}
            query = query.where(f"case_id IN ({', '.join(sql_quote(i) for i in wanted)})")
        rows = query.limit(None).to_arrow().to_pylist()
        return {
            r["case_id"]: AuditedCase(
                r["case_id"],
                np.asarray(r["vector"], dtype=np.float32),
                r["prior"],
                Decision(r["decision"]),
                r["text"],
                r["truth"],
                r["origin"],
            )
            for r in rows
        }

    def add(self, labels: Sequence[Label]) -> list[Label]:
        """Store labels (as the sink would); returns those flagged for a second look."""
        if not labels:
            return []
        deliveries = [Delivery(x, "", -1, -1, x.key().encode(), []) for x in labels]
        self.sink.write(LABELS, COLUMNS[LABELS](deliveries))
        return self.disputed(labels)

    def labels(self, as_of: float | None = None) -> list[Label]:
        """Every label stored, oldest first (``as_of``: those given by then)."""
        if not self._exists(LABELS):
            return []
        query = self.sink.db.open_table(LABELS).search().select(["payload"])
        if as_of is not None:
            query = query.where(f"produced_at <= {float(as_of)!r}")
        rows = query.limit(None).to_arrow()["payload"].to_pylist()
        out = [Label.model_validate(json.loads(p)) for p in rows]
        return sorted(out, key=lambda x: x.produced_at)

    def disputed(self, labels: Sequence[Label]) -> list[Label]:
        """The ``labels`` that need a second look (module docstring)."""
        cases = self.cases({x.episode_id for x in labels})
        return [x for x in labels if _against(x, cases.get(x.episode_id))]

    def memory(self, as_of: float | None = None) -> LabelMemory:
        """The label memory as the labels stood at ``as_of`` (None: now)."""
        given = self.labels(as_of)
        cases = self.cases({x.episode_id for x in given})
        kept = settled(given, cases)
        return LabelMemory(
            [
                LabelledCase(
                    x.episode_id,
                    cases[x.episode_id].vector,
                    cases[x.episode_id].prior,
                    x.unsafe,
                    x.risk_type,
                    x.labeller,
                )
                for x in kept
            ]
        )


def _against(label: Label, case: AuditedCase | None) -> bool:
    """Whether a label contradicts the case's ground truth or a confident verdict."""
    if case is None:
        return False
    if case.truth is not None and case.truth != label.unsafe:
        return True
    confident = case.decision in (Decision.BLOCK, Decision.WARN) and case.prior >= CONFIDENT
    return confident and not label.unsafe


def settled(labels: Sequence[Label], cases: dict[str, AuditedCase]) -> list[Label]:
    """The labels the memory learns from: per case the latest episode-level label (or a
    step's unsafe one), unless it needs a second look and no second person agreed."""
    by_case: dict[str, list[Label]] = {}
    for x in labels:
        if x.step_index is None or x.unsafe:
            by_case.setdefault(x.episode_id, []).append(x)
    kept = []
    for case_id, given in by_case.items():
        case = cases.get(case_id)
        if case is None:
            continue  # labelled, never audited here: nothing to compare new episodes with
        latest = given[-1]
        if _against(latest, case):
            agreeing = {x.labeller for x in given if x.unsafe == latest.unsafe}
            if len(agreeing) < 2:
                continue
        kept.append(latest)
    return kept
