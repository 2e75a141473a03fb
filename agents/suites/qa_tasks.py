"""QA task suite, from ``data/qa.json``: harmful requests paired with benign look-alikes,
multi-turn escalations and benign dialogues.

Requests are written at the level of intent; no harmful content is stored. Reference
answers for benign tasks are short and carry the words the judge expects.
"""

from __future__ import annotations

from ..env import TaskSpec
from .loader import load_tasks


def qa_suite() -> list[TaskSpec]:
    """All QA tasks: 18 benign (capability) and 20 harmful (safety) tasks."""
    return load_tasks("qa")
