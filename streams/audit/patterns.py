"""Many regular expressions over one text in one pass: RE2's multi-pattern set as a prefilter.

A rule checker holds a dozen patterns and a step has several spans; testing each pattern with
Python's ``re`` rescans the text once per pattern. :class:`PatternSet` first asks an RE2
``Set`` (linear time, one scan for all patterns) which patterns occur, then runs Python's
``re`` only on those, so the match objects and their semantics are exactly ``re``'s. RE2
cannot compile look-arounds or back-references: such patterns are always run with ``re``.
RE2's ``\\d``, ``\\w`` and ``\\b`` are ASCII, Python's are Unicode, so non-ASCII text skips the
prefilter rather than risk a miss.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from functools import cache

try:
    import re2
except ImportError:  # the prefilter is an optimisation; ``re`` alone gives the same answers
    re2 = None

_INLINE_FLAGS = ((re.MULTILINE, "m"), (re.DOTALL, "s"))


class PatternSet:
    """Compiled patterns answering "which of them match this text, and where"."""

    def __init__(self, patterns: Sequence[re.Pattern[str]]) -> None:
        self.patterns = list(patterns)
        self._set = None
        self._by_slot: list[int] = []
        self._always: list[int] = list(range(len(self.patterns)))
        if re2 is not None and self.patterns:
            self._build_set()

    def _build_set(self) -> None:
        flags = {p.flags & ~re.UNICODE for p in self.patterns}
        if len(flags) != 1 or flags.pop() & ~(re.IGNORECASE | re.MULTILINE | re.DOTALL):
            return  # mixed or unsupported flags (e.g. VERBOSE): plain ``re`` for all
        first = self.patterns[0].flags
        options = re2.Options()
        options.case_sensitive = not first & re.IGNORECASE
        options.log_errors = False  # refused patterns are expected; they run with ``re``
        inline = "".join(letter for flag, letter in _INLINE_FLAGS if first & flag)
        prefix = f"(?{inline})" if inline else ""
        regex_set = re2.Set.SearchSet(options)
        always = []
        for index, pattern in enumerate(self.patterns):
            try:
                regex_set.Add(prefix + pattern.pattern)
            except Exception:  # look-around, back-reference: RE2 refuses it
                always.append(index)
            else:
                self._by_slot.append(index)
        regex_set.Compile()
        self._set = regex_set
        self._always = always

    def search(self, text: str) -> Iterator[tuple[int, re.Match[str]]]:
        """``(pattern index, match)`` for every pattern found in ``text``, in pattern order."""
        if self._set is None or not text.isascii():
            candidates: Sequence[int] = range(len(self.patterns))
        else:
            hits = self._set.Match(text) or ()
            candidates = sorted({*(self._by_slot[slot] for slot in hits), *self._always})
        for index in candidates:
            match = self.patterns[index].search(text)
            if match:
                yield index, match


@cache
def pattern_set(patterns: tuple[re.Pattern[str], ...]) -> PatternSet:
    """The :class:`PatternSet` of ``patterns``, built once per process."""
    return PatternSet(patterns)
