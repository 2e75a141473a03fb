"""The RE2 prefilter gives exactly Python ``re``'s answers, look-arounds and Unicode included."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from safactory.streams.audit import patterns as patterns_module
from safactory.streams.audit.patterns import PatternSet

PATTERNS = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\brm\s+-rf\s+/",
        r"\b(?!000)\d{3}-\d{2}-\d{4}\b",  # look-ahead: RE2 refuses it, ``re`` runs it
        r"\bpassword\s*[:=]\s*\S+",
        r"^sudo\b",
        r"\w+é",
        r"AKIA[0-9A-Z]{16}",
    )
]
WORDS = [
    "rm -rf /",
    "123-45-6789",
    "000-12-3456",
    "PASSWORD = x",
    "sudo ls",
    "café",
    "\n",
    "AKIAIOSFODNN7EXAMPLE",
    "hello",
    " ",
    "ß",
    "٣٤٥-٦٧-٨٩٠١",
]


def expected(text: str) -> list[tuple[int, tuple[int, int]]]:
    return [(i, m.span()) for i, p in enumerate(PATTERNS) if (m := p.search(text))]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=8).map("".join))
def test_same_matches_as_re(text: str) -> None:
    found = [(i, m.span()) for i, m in PatternSet(PATTERNS).search(text)]
    assert found == expected(text)


def test_prefilter_is_used_and_refused_patterns_still_run() -> None:
    matcher = PatternSet(PATTERNS)
    if patterns_module.re2 is None:  # pragma: no cover - google-re2 is a dependency
        return
    assert matcher._set is not None
    assert matcher._always == [1]
    assert [i for i, _ in matcher.search("ssn 123-45-6789, rm -rf /tmp")] == [0, 1]
    assert list(matcher.search("nothing to see")) == []


def test_mixed_flags_fall_back_to_re() -> None:
    mixed = [re.compile("a", re.IGNORECASE), re.compile("^b", re.MULTILINE)]
    matcher = PatternSet(mixed)
    assert matcher._set is None
    assert [i for i, _ in matcher.search("x\nB\nA")] == [0]
