"""What DataElf's operators borrow, wired from the components (the auditor's masker and
re-judging, the data-value scorer, the poisoning audit, diverse selection, MiniLM), and the
private job as the sandbox runs it (``python -m safactory.tools.dataelf_job PLAN DB OUT``)."""

from __future__ import annotations

import sys
from functools import cache
from typing import TYPE_CHECKING

from ..infra.embedding import MiniLM
from ..sinks.dataelf.operators import Services
from ..sinks.dataelf.private import job
from ..streams.audit.mask import mask_text
from ..streams.audit.rejudge import rejudge
from ..streams.poisoning.audit import findings
from ..streams.scoring.diversity import k_center
from ..streams.scoring.value import value_table

if TYPE_CHECKING:  # torch loads only when an operator needs the language model
    from ..streams.scoring.perplexity import LMScorer

JOB = [sys.executable, "-m", __name__]
"""The command line that runs the private job (before its arguments)."""


@cache
def _embedder() -> MiniLM:
    return MiniLM()


@cache
def _lm() -> LMScorer:
    from ..infra.models import ensure_smollm2
    from ..streams.scoring.perplexity import LMScorer

    return LMScorer.load(ensure_smollm2(progress=False))


def services(*, private: bool = False) -> Services:
    """The services a run gets; a private run's also mask what leaves it."""
    return Services(
        mask=mask_text if private else None,
        rejudge=rejudge,
        score=lambda trajectories, lm: value_table(
            trajectories, _embedder(), _lm() if lm else None
        ),
        poison=lambda ids, texts, labels: findings(ids, texts, labels, _embedder()),
        diverse=k_center,
        embed=lambda texts: _embedder().embed(texts),
    )


if __name__ == "__main__":
    job(sys.argv[1:], services(private=sys.argv[4:5] == ["private"]))
