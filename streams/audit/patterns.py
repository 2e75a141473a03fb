"""Many regular expressions over one text in one pass: RE2's multi-pattern set as a prefilter.

A rule checker holds a dozen patterns and a step has several spans; testing each pattern with
Python's ``re`` rescans the text once per pattern. :class:`PatternSet` first asks an RE2
``Set`` (linear time, one scan for all patterns) which patterns occur, then runs Python's
``re`` only on those, so the match objects and their semantics are exactly ``re``'s. RE2
reads each pattern as :mod:`.re2_syntax` rewrites it, which matches wherever ``re`` would
(the prefilter may say yes more often, never no): one rewrite for ASCII text, one for any
text; a pattern without one (a back-reference) is always run with ``re``. The sets
:func:`pattern_set` makes share one RE2 set (a :class:`Scanner`), so the rule checkers
reading the same span scan it once.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from functools import cache

from .re2_syntax import UNFOLDED, for_re2

try:
    import re2
except ImportError:  # the prefilter is an optimisation; ``re`` alone gives the same answers
    re2 = None


class Scanner:
    """One RE2 set holding the patterns of many :class:`PatternSet` objects, and its answers
    for the last few texts (a step's spans are asked about by several checkers)."""

    REMEMBERED = 32
    """Texts whose answers are kept."""

    def __init__(self) -> None:
        self._sources = [""]
        """Slot 0 matches every text: an answer without it means RE2 gave up (out of memory)."""
        self._set = None
        self._answers: dict[str, Sequence[int]] = {}

    def add(self, source: str) -> int | None:
        """The slot of one more pattern, in RE2's syntax; None where RE2 refuses it."""
        try:
            _new_set().Add(source)
        except Exception:  # a back-reference
            return None
        self._sources.append(source)
        self._set = None
        self._answers.clear()
        return len(self._sources) - 1

    def slots(self, text: str) -> Sequence[int] | None:
        """The slots of the patterns found in ``text``; None when RE2 cannot tell."""
        found = self._answers.get(text)
        if found is None:
            if self._set is None:
                compiled = _new_set()
                for source in self._sources:
                    compiled.Add(source)
                compiled.Compile()
                self._set = compiled
            try:
                found = self._set.Match(text) or ()
            except UnicodeEncodeError:  # a lone surrogate
                found = ()
            if len(self._answers) >= self.REMEMBERED:
                del self._answers[next(iter(self._answers))]
            self._answers[text] = found
        return found if 0 in found else None


def _new_set() -> re2.Set:
    options = re2.Options()
    options.log_errors = False  # refused patterns are expected; they run with ``re``
    return re2.Set.SearchSet(options)


class _Lane:
    """How a :class:`PatternSet` prefilters one kind of text (ASCII, or any)."""

    __slots__ = ("always", "by_slot", "scanner")

    def __init__(self, patterns: Sequence[re.Pattern[str]], scanner: Scanner, unicode: bool):
        self.scanner = scanner
        self.by_slot: dict[int, int] = {}
        """The scanner's slot of each pattern it holds → the pattern's index."""
        self.always: list[int] = []
        """Patterns it cannot prefilter."""
        for index, pattern in enumerate(patterns):
            source = for_re2(pattern, unicode=unicode)
            slot = None if source is None else scanner.add(source)
            if slot is None:
                self.always.append(index)
            else:
                self.by_slot[slot] = index


class PatternSet:
    """Compiled patterns answering "which of them match this text, and where"."""

    def __init__(
        self, patterns: Sequence[re.Pattern[str]], scanners: tuple[Scanner, Scanner] | None = None
    ) -> None:
        """``scanners``: the RE2 sets for ASCII and for other text (default: its own)."""
        self.patterns = list(patterns)
        self._lanes: dict[bool, _Lane] = {}
        """By whether the text is ASCII."""
        if re2 is not None and self.patterns:
            ascii_scanner, other_scanner = scanners or (Scanner(), Scanner())
            self._lanes[True] = _Lane(self.patterns, ascii_scanner, unicode=False)
            self._lanes[False] = _Lane(self.patterns, other_scanner, unicode=True)

    def search(self, text: str) -> Iterator[tuple[int, re.Match[str]]]:
        """``(pattern index, match)`` for every pattern found in ``text``, in pattern order."""
        candidates: Sequence[int] = range(len(self.patterns))
        plain = text.isascii()
        lane = self._lanes.get(plain)
        if lane is not None and (plain or not any(c in text for c in UNFOLDED)):
            found = lane.scanner.slots(text)
            if found is not None:
                mine = lane.by_slot
                hits = [mine[slot] for slot in found if slot in mine]
                candidates = sorted({*hits, *lane.always}) if hits else lane.always
        for index in candidates:
            match = self.patterns[index].search(text)
            if match:
                yield index, match


_SHARED = (Scanner(), Scanner())


@cache
def pattern_set(patterns: tuple[re.Pattern[str], ...]) -> PatternSet:
    """The :class:`PatternSet` of ``patterns``, built once per process (all of them share
    one RE2 set)."""
    return PatternSet(patterns, _SHARED)
