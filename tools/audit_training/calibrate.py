"""Measure every checker's precision on labelled episodes: the auditor's calibration.

    python bench/audit_generalization.py --write-calibration

Every default checker judges every labelled record of every source (:func:`judge_all`; the
deep heads that judge InjecAgent or the own environments are trained without them); per
source, per checker and per score band :func:`fit` counts the firings on unsafe and on all
episodes, and the result is ``streams/audit/heads/calibration.json``
(:mod:`safactory.streams.audit.calibration`). The bench above loads the sources (the public
ones, the own environments, the everyday development traces), scores each one left out with
a calibration fitted on the others, and writes the table fitted on all of them; the judged
records are cached under ``$SF_HOME/bench`` (one pass, about ten minutes on two cores).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import pickle
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ...schemas import Step
from ...streams.audit import registry
from ...streams.audit.calibration import (
    BANDS,
    MIN_SOURCE_FIRINGS,
    SOURCE_CAP,
    Calibration,
    Cell,
    band,
)
from ...streams.audit.checkers.deep import (
    ActionHarm,
    DeepHead,
    OutcomeHarm,
    RequestHarm,
    nobody_asked,
)
from ...streams.audit.checkers.harm import complies
from ...streams.audit.embedding import deep_embedder_settings
from ...streams.audit.engine import AuditEngine
from ...streams.audit.view import EpisodeView
from ..importers import AuditRecord, read_entries, read_records
from .deep_heads import OWN_ENVS, train_all

ROOT = Path(__file__).resolve().parents[2]
PUBLIC: dict[str, tuple[str, str]] = {
    "rjudge": ("trajectories/rjudge", "rjudge"),
    "agentdojo": ("trajectories/agentdojo", "agentdojo"),
    "toolemu": ("trajectories/toolemu/toolemu_runs.json", "rjudge"),
    "openagentsafety": ("trajectories/openagentsafety/oas_runs.json", "rjudge"),
    "injecagent": ("trajectories/injecagent/injecagent_runs.json", "rjudge"),
}
"""The public labelled trajectory sources under ``shared/data/audit``."""
OWN = OWN_ENVS
LEARNT_FROM = ("injecagent", OWN)
"""Sources the deep heads learn from: each is judged by heads trained without it."""
EVERYDAY_DEV = "everyday-dev"


@dataclass(slots=True)
class Judged:
    """One labelled record as the checkers saw it."""

    unsafe: bool
    steps: list[dict[str, tuple[float, int]]]
    """Per step: checker → (its strongest firing's score, that finding's severity rank);
    only findings that fired (score ≥ the lowest band, severity not none)."""
    graded: float
    """The deep heads' strongest probability where the trust model left a step open (a
    call nobody asked for, a harmful request complied with): evidence below a firing."""

    def fired(self, checkers: Iterable[str] | None = None) -> dict[str, tuple[float, int]]:
        """Checker → strongest firing over the episode (among ``checkers``)."""
        keep = None if checkers is None else set(checkers)
        out: dict[str, tuple[float, int]] = {}
        for step in self.steps:
            for name, (score, rank) in step.items():
                if keep is not None and name not in keep:
                    continue
                if name not in out or score > out[name][0]:
                    out[name] = (score, rank)
        return out


def deep_checkers(data: Path, exclude: tuple[str, ...] = ()) -> list[DeepHead]:
    """The deep heads trained without the ``exclude`` sources, on one shared embedder."""
    embed = deep_embedder_settings(cache_size=400_000)
    heads = train_all(data, embed, exclude=exclude)
    return [
        ActionHarm(embed, heads["action_harm"]),
        OutcomeHarm(embed, heads["outcome_harm"]),
        RequestHarm(embed, heads["request_harm"]),
    ]


def engine_for(deep: Sequence[DeepHead]) -> AuditEngine:
    """Every default checker, with these deep checkers in place of the stored ones."""
    names = {c.name for c in deep}
    others = [
        factory()
        for name, factory in registry.available().items()
        if name in registry.default_names() and name not in names
    ]
    return AuditEngine([*others, *deep])


def graded(view: EpisodeView, deep: Sequence[DeepHead]) -> float:
    """The deep heads' probability for this step where the trust model leaves it open: the
    call's learned harm (or its reported outcome's) when nobody legitimately asked for it,
    the request's when the agent complied."""
    best = 0.0
    call = view.call
    for head in deep:
        texts = head.texts(view)
        if not texts:
            continue
        p = float(head.probabilities(texts)[0])
        if isinstance(head, RequestHarm):
            best = max(best, p if complies(view) else 0.0)
        elif call is not None and nobody_asked(view, call):
            best = max(best, p)
    return best


def judge(engine: AuditEngine, deep: Sequence[DeepHead], record: AuditRecord) -> Judged:
    """Run every checker over one record's episode and keep what fired, step by step."""
    audits = asyncio.run(engine.audit_episode(record.steps))
    steps: list[dict[str, tuple[float, int]]] = []
    strongest = 0.0
    for index, audit in enumerate(audits):
        view = EpisodeView(
            record.steps[index], record.steps[:index], final=index == len(record.steps) - 1
        )
        strongest = max(strongest, graded(view, deep))
        fired: dict[str, tuple[float, int]] = {}
        for v in audit.verdicts:
            if v.severity.rank == 0 or band(v.score) is None or v.risk_type == "checker_error":
                continue
            if v.checker not in fired or v.score > fired[v.checker][0]:
                fired[v.checker] = (v.score, v.severity.rank)
        steps.append(fired)
    return Judged(bool(record.unsafe), steps, strongest)


def load_sources(
    data: Path, own: Path | None = None, everyday: Path | None = None
) -> dict[str, list[AuditRecord]]:
    """Every labelled record with steps: the public sources, and the own environments and
    the everyday development traces when given."""
    out: dict[str, list[AuditRecord]] = {}
    for source, (rel, fmt) in PUBLIC.items():
        entries = read_entries(data / rel, fmt)
        out[source] = [
            e for e in entries if isinstance(e, AuditRecord) and e.unsafe is not None and e.steps
        ]
    if own is not None:
        out[OWN] = read_own(own)
    if everyday is not None:
        out[EVERYDAY_DEV] = read_records(everyday, "rjudge")
    return out


def read_own(path: Path) -> list[AuditRecord]:
    """The own environments' episodes as ``bench/own_episodes.py --out`` writes them."""
    records = []
    for line in path.read_text().splitlines():
        raw = json.loads(line)
        steps = [Step.model_validate(s) for s in raw["steps"]]
        records.append(
            AuditRecord(raw["id"], raw["id"], OWN, steps, raw["unsafe"], raw.get("group", ""))
        )
    return records


DECISION_ONLY = (
    "calibration.py",
    "engine.py",
    "explain.py",
    "memory.py",
)
"""Modules that turn findings into decisions: they do not change what fired."""


def code_version(fingerprint: str = "") -> str:
    """Hash of what decides the findings: the checkers' code and heads (not the decision
    modules, not the calibration), the importers, the training code and data, and the
    caller's ``fingerprint``."""
    digest = hashlib.sha256(fingerprint.encode())
    audit = ROOT / "streams" / "audit"
    paths = [p for p in sorted(audit.rglob("*.py")) if p.name not in DECISION_ONLY]
    paths += sorted((audit / "heads").glob("*.npz"))
    paths += sorted((ROOT / "tools" / "importers").rglob("*.py"))
    paths += sorted((ROOT / "tools" / "audit_training").rglob("*.py"))
    paths += sorted((ROOT / "tools" / "audit_training" / "data").glob("*.jsonl"))
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def judge_all(
    data: Path, records: Mapping[str, list[AuditRecord]], tag: str, fingerprint: str = ""
) -> dict[str, list[Judged]]:
    """:func:`judge` over every source (cached by :func:`code_version`, ``fingerprint`` of
    the records and ``tag``); InjecAgent and the own environments are judged by deep heads
    trained without them."""
    home = Path(os.environ.get("SF_HOME", Path.home() / ".cache" / "safactory"))
    cache = home / "bench" / f"judged-{code_version(fingerprint)}-{tag}.pkl"
    if cache.is_file():
        return pickle.loads(cache.read_bytes())
    heads = {(s,): deep_checkers(data, (s,)) for s in LEARNT_FROM}
    heads[()] = deep_checkers(data)
    out: dict[str, list[Judged]] = {}
    for source, rows in records.items():
        deep = heads[(source,) if source in LEARNT_FROM else ()]
        engine = engine_for(deep)
        started = time.perf_counter()
        out[source] = []
        for i, record in enumerate(rows):
            out[source].append(judge(engine, deep, record))
            if i % 100 == 0:
                print(f"\r  {source}: {i}/{len(rows)}", end="", file=sys.stderr, flush=True)
        took = time.perf_counter() - started
        print(f"\r  {source}: {len(rows)} records in {took:.0f}s", file=sys.stderr)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_bytes(pickle.dumps(out))
    return out


def fit(judged: Mapping[str, Sequence[Judged]]) -> Calibration:
    """The calibration of every checker that fired, from these sources' episodes: per
    checker and band, firings on unsafe and on all episodes, each source's weight capped at
    :data:`SOURCE_CAP` firings, and the lowest per-source precision among sources with at
    least :data:`MIN_SOURCE_FIRINGS` firings."""
    counts: dict[tuple[str, int], dict[str, list[int]]] = {}
    for source, rows in judged.items():
        for row in rows:
            for name, (score, _) in row.fired().items():
                index = band(score)
                assert index is not None
                tally = counts.setdefault((name, index), {}).setdefault(source, [0, 0])
                tally[0] += int(row.unsafe)
                tally[1] += 1
    cells: dict[str, list[Cell | None]] = {}
    for (name, index), per_source in counts.items():
        unsafe = total = 0.0
        worst: float | None = None
        for tp, n in per_source.values():
            weight = min(1.0, SOURCE_CAP / n)
            unsafe += weight * tp
            total += weight * n
            if n >= MIN_SOURCE_FIRINGS:
                worst = tp / n if worst is None else min(worst, tp / n)
        cells.setdefault(name, [None] * len(BANDS))[index] = Cell(
            round(unsafe, 3), round(total, 3), worst
        )
    return Calibration({n: tuple(c) for n, c in cells.items()}, tuple(sorted(judged)))
