"""A person's side of the label loop: the review queue, and labels brought from elsewhere.

:func:`queue` lists the audited cases a person should label next (labels that need a second
look first, then the review queue's order, ``memory.queue_order``); :func:`label_of`
turns an answer into a :class:`~safactory.schemas.Label`; :func:`read_label_file` reads a
JSONL of labels (``{"episode_id" | "id" | "trace_id", "step", "label", "risk_type",
"reason", "labeller"}``), each bad line named with its field and fix; :class:`Desk` serves
the queue and takes answers for the web monitor (``safactory serve``, ``/review``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..schemas import Decision, Label
from ..streams.audit.memory import combine, queue_order
from .casebook import AuditedCase, Casebook, settled

ID_FIELDS = ("episode_id", "id", "trace_id")
UNSAFE_WORDS = {"unsafe": True, "safe": False, "1": True, "0": False, "true": True, "false": False}


class LabelFileError(ValueError):
    """A label file line that cannot be read; the message names the line, field and fix."""


@dataclass(frozen=True, slots=True)
class Pending:
    """One case waiting for a person: why it is asked, and what the auditor says now."""

    case: AuditedCase
    why: str
    probability: float
    decision: Decision


def queue(casebook: Casebook, limit: int = 20) -> list[Pending]:
    """The cases to label next, most informative first (module docstring)."""
    given = casebook.labels()
    cases = casebook.cases()
    kept = {x.episode_id for x in settled(given, cases)}
    disputed = {x.episode_id for x in given if x.episode_id not in kept and x.episode_id in cases}
    memory = casebook.memory()
    open_cases = [c for cid, c in cases.items() if cid not in kept and cid not in disputed]
    out = [
        Pending(
            cases[cid],
            "a label here disagrees with a confident verdict or the ground "
            "truth: a second person decides",
            cases[cid].prior,
            cases[cid].decision,
        )
        for cid in sorted(disputed)
    ]
    if not open_cases or len(out) >= limit:
        return out[:limit]
    recalls = [memory.recall(c.case_id, c.vector, c.prior) for c in open_cases]
    decisions = [combine(c.decision, r) for c, r in zip(open_cases, recalls, strict=True)]
    vectors = np.stack([c.vector for c in open_cases])
    labelled = np.stack([c.vector for c in memory.cases]) if len(memory) else None
    order = queue_order(
        [r.probability for r in recalls], decisions, vectors, labelled, limit - len(out)
    )
    for i in order:
        why = "uncertain" if decisions[i] == Decision.UNCERTAIN else "least sure"
        out.append(Pending(open_cases[i], why, recalls[i].probability, decisions[i]))
    return out


def label_of(
    case_id: str,
    unsafe: bool,
    labeller: str,
    *,
    reason: str = "",
    risk_type: str = "",
    origin: str = "review",
    step_index: int | None = None,
) -> Label:
    """The label event of one answer."""
    return Label(
        episode_id=case_id,
        step_index=step_index,
        unsafe=unsafe,
        risk_type=risk_type,
        reason=reason,
        labeller=labeller,
        origin=origin,
    )


def read_label_file(path: Path, labeller: str) -> list[Label]:
    """Every label of a JSONL file (see the module docstring); :class:`LabelFileError`
    names the first line that cannot be read."""
    out = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise LabelFileError(
                    f"{where}: not JSON ({exc}); write one object per line"
                ) from None
            if not isinstance(row, dict):
                raise LabelFileError(f"{where}: a {type(row).__name__}, not an object")
            case_id = next((str(row[f]) for f in ID_FIELDS if row.get(f) not in (None, "")), None)
            if case_id is None:
                raise LabelFileError(
                    f"{where}: no episode id; add 'episode_id' (or 'id', 'trace_id': the "
                    "'id' of the `safactory audit` line)"
                )
            raw = row.get("label", row.get("unsafe"))
            unsafe = UNSAFE_WORDS.get(str(raw).lower()) if raw is not None else None
            if unsafe is None:
                raise LabelFileError(
                    f'{where}: field \'label\' is {raw!r}; write "unsafe" or "safe"'
                )
            step = row.get("step", row.get("step_index"))
            if step is not None and not (isinstance(step, int) and step >= 0):
                raise LabelFileError(f"{where}: field 'step' is {step!r}; a step index (0, 1, ...)")
            out.append(
                label_of(
                    case_id,
                    unsafe,
                    str(row.get("labeller") or labeller),
                    reason=str(row.get("reason") or ""),
                    risk_type=str(row.get("risk_type") or ""),
                    origin=f"import:{path.name}",
                    step_index=step,
                )
            )
    return out


def ask(
    casebook: Casebook,
    who: str,
    prompt: Callable[[str], str],
    say: Callable[[str], None],
    limit: int = 20,
) -> int:
    """The terminal review: each queued case shown (``say``), answered (``prompt``): u =
    unsafe, s = safe, empty = skip, q = stop; each answer stored at once. Returns the
    number of labels given."""
    pending = queue(casebook, limit)
    if not pending:
        say("nothing to review: audit traces first (`safactory audit FILE`)")
        return 0
    given = 0
    for n, item in enumerate(pending, 1):
        say(
            f"\n{n}/{len(pending)} {item.case.case_id} ({item.why}; now {item.decision}, "
            f"p={item.probability:.2f})\n{item.case.text}"
        )
        answer = prompt("u/s/Enter/q").strip().lower()
        if answer == "q":
            break
        if answer in ("u", "s"):
            label = label_of(item.case.case_id, answer == "u", who, reason=prompt("why"))
            for x in casebook.add([label]):
                say(f"{x.episode_id}: {SECOND_LOOK}")
            given += 1
    say(f"labels {casebook.memory().version}")
    return given


def store(casebook: Casebook, labels: list[Label]) -> list[str]:
    """Store imported labels; what to tell the person (second looks, ids never audited here,
    what the auditor now learns from)."""
    said = [f"{x.episode_id}: {SECOND_LOOK}" for x in casebook.add(labels)]
    unknown = sorted({x.episode_id for x in labels} - set(casebook.cases()))
    if unknown:
        said.append(
            f"{len(unknown)} ids were never audited here (first: {unknown[0]}): run `safactory "
            "audit` on their file so the labels can teach the auditor"
        )
    memory = casebook.memory()
    said.append(
        f"stored {len(labels)} labels; the auditor learns from {len(memory)} labelled cases "
        f"(labels {memory.version})"
    )
    return said


SECOND_LOOK = (
    "kept for a second look (it disagrees with a confident verdict or the ground truth; a "
    "second person's label settles it)"
)


class Desk:
    """The review queue as JSON for the web page: :meth:`queue` lists the cases to label,
    :meth:`answer` stores one answer and says what the auditor now decides of that case.
    The casebook is opened on first use (LanceDB loads only when the page is used)."""

    def __init__(self, casebook: Callable[[], Casebook]) -> None:
        self._open = casebook
        self._casebook: Casebook | None = None

    @property
    def casebook(self) -> Casebook:
        """The casebook, opened once."""
        if self._casebook is None:
            self._casebook = self._open()
        return self._casebook

    def queue(self, limit: int = 20) -> list[dict[str, Any]]:
        """The cases to label next (:func:`queue`), each with the text a person reads."""
        return [
            {
                "id": item.case.case_id,
                "why": item.why,
                "decision": str(item.decision),
                "p": round(item.probability, 3),
                "text": item.case.text,
            }
            for item in queue(self.casebook, limit)
        ]

    def answer(self, body: dict[str, Any], who: str) -> tuple[Label, dict[str, Any]]:
        """Store one answer (``{"id", "label": "unsafe" | "safe", "reason"}``); the label
        event and what the auditor decides of the case now. ``ValueError`` names a bad
        field and its fix."""
        case_id = str(body.get("id") or "")
        unsafe = UNSAFE_WORDS.get(str(body.get("label", "")).lower())
        if unsafe is None:
            raise ValueError(f'field \'label\' is {body.get("label")!r}; send "unsafe" or "safe"')
        case = self.casebook.cases([case_id]).get(case_id)
        if case is None:
            raise ValueError(f"field 'id' is {case_id!r}: no audited case has it")
        label = label_of(case_id, unsafe, who, reason=str(body.get("reason") or ""))
        second_look = bool(self.casebook.add([label]))
        memory = self.casebook.memory()
        recall = memory.recall(case_id, case.vector, case.prior)
        return label, {
            "id": case_id,
            "label": "unsafe" if unsafe else "safe",
            "second_look": second_look,
            "checkers": str(case.decision),
            "decision": str(combine(case.decision, recall)),
            "labels": memory.version,
        }
