"""The RE2 prefilter gives exactly Python ``re``'s answers, look-arounds and Unicode included."""

from __future__ import annotations

import re
import warnings

from hypothesis import given, settings
from hypothesis import strategies as st

from safactory.streams.audit import patterns as patterns_module
from safactory.streams.audit.patterns import PatternSet, Scanner
from safactory.streams.audit.re2_syntax import for_re2

SOURCES = (
    r"\brm\s+-rf\s+/",
    r"\b(?!000)\d{3}-\d{2}-\d{4}\b",  # look-ahead: prefiltered without it
    r"(?<![a-z])(sudo|su)(?![a-z])",  # look-behind too
    r"(ab)\1",  # back-reference: RE2 refuses it, ``re`` runs it
    r"\bshell\s*=\s*true\b",  # RE2's \s lacks \v and \x1c-\x1f
    r"(?:^|[^a-z])cf(?:[^a-z]|$)",  # Python's $ also matches before a final newline
    r"\bpassword\s*[:=]\s*\S+",
    r"^sudo\b",
    r"\w+é",
    r"AKIA[0-9A-Z]{16}",
    r"\bki\w{0,3}\b",  # Unicode \w and \b, case folding (K, İ, ı)
    r"[^\w\s]{2}",  # a negated class with \w: no rewrite for non-ASCII text
    r"x{,2}y",  # Python's {,n}
)
PATTERNS = [re.compile(p, re.IGNORECASE) for p in SOURCES] + [re.compile(SOURCES[10])]
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
    "su",
    "abab",
    "x",
    "xy",
    "shell",
    "=",
    "true",
    "\x0b",
    "\x1c",
    "\xa0",
    "cf",
    "ki",
    "\u212a",  # KELVIN SIGN folds to k
    "\u0130",  # İ folds to i in Python, not in RE2
    "\u0131",
    "\u017f",  # ſ folds to s
    "’",
    "\ud800",  # a lone surrogate: RE2 cannot read it
]


def expected(text: str) -> list[tuple[int, tuple[int, int]]]:
    return [(i, m.span()) for i, p in enumerate(PATTERNS) if (m := p.search(text))]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=8).map("".join))
def test_same_matches_as_re(text: str) -> None:
    found = [(i, m.span()) for i, m in PatternSet(PATTERNS).search(text)]
    assert found == expected(text)


def test_where_re2_reads_otherwise() -> None:
    """Python's whitespace, ``$`` before a final newline, ``{,n}``: RE2 writes them otherwise."""
    matcher = PatternSet([re.compile(p) for p in (r"shell\s=", r"end$", r"ab{,2}c")])
    for text, found in (("shell\x0b=", 0), ("shell\x1c=", 0), ("the end\n", 1), ("ac", 2)):
        assert [i for i, _ in matcher.search(text)] == [found]
        assert [i for i, _ in matcher.search(text + " é")] == ([] if found == 1 else [found])


def test_prefilter_is_used_and_refused_patterns_still_run() -> None:
    matcher = PatternSet(PATTERNS)
    if patterns_module.re2 is None:  # pragma: no cover - google-re2 is a dependency
        return
    assert matcher._lanes[True].always == [3]
    assert matcher._lanes[False].always == [3, 11]
    assert [i for i, _ in matcher.search("ssn 123-45-6789, rm -rf /tmp")] == [0, 1]
    assert [i for i, _ in matcher.search("ssn 000-45-6789, abab")] == [3]
    assert list(matcher.search("nothing to see")) == []
    assert list(matcher.search("nothing to see here ’either’")) == []


def test_each_pattern_keeps_its_flags() -> None:
    mixed = [re.compile("a", re.IGNORECASE), re.compile("^b", re.MULTILINE), re.compile("c")]
    matcher = PatternSet(mixed)
    if patterns_module.re2 is None:  # pragma: no cover - google-re2 is a dependency
        return
    assert matcher._lanes[True].always == []
    assert [i for i, _ in matcher.search("x\nB\nA")] == [0]
    assert [i for i, _ in matcher.search("x\nb\nC")] == [1]
    assert [i for i, _ in matcher.search("c")] == [2]


def test_verbose_patterns_run_with_re() -> None:
    matcher = PatternSet([re.compile("a b  # spaces are not part of it", re.VERBOSE)])
    assert [i for i, _ in matcher.search("xab")] == [0]
    if patterns_module.re2 is not None:
        assert matcher._lanes[True].always == [0]


def test_sets_sharing_a_scanner_answer_as_alone() -> None:
    shared = (Scanner(), Scanner())
    first = PatternSet(PATTERNS[:5], shared)
    second = PatternSet(PATTERNS[5:], shared)
    for text in ("sudo rm -rf /", "cf 123-45-6789", "shell=true, café ki", "x"):
        alone = [(i, m.span()) for i, m in PatternSet(PATTERNS).search(text)]
        both = [(i, m.span()) for i, m in first.search(text)]
        both += [(i + 5, m.span()) for i, m in second.search(text)]
        assert both == alone


def test_for_re2() -> None:
    assert for_re2(re.compile(r"\b(?!000)\d{3}(?<=[)])x")) == r"\b(?:)\d{3}(?:)x"
    assert for_re2(re.compile(r"[(?!]a\(?=b(?=(c))", re.I)) == r"(?i)[(?!]a\(?=b(?:)"
    assert (
        for_re2(re.compile(r"\s[^\s$]\\s$\Z")) == r"[\s\x0b\x1c-\x1f][^\s\x0b\x1c-\x1f$]\\s(?m:$)\z"
    )
    assert for_re2(re.compile(r"\bx\w\d"), unicode=True) == r"(?:)x[\p{L}\p{N}_]\p{Nd}"
    assert for_re2(re.compile(r"\W"), unicode=True) is None
    assert for_re2(re.compile("a", re.VERBOSE)) is None
    assert for_re2(re.compile(r"x{,2}")) == r"x{0,2}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # "possible nested set"
        assert for_re2(re.compile(r"[[:alpha:]]")) == r"[\[:alpha:]]"
