"""Personal data and secrets masked out of text by the auditor's own rules (``rule.secrets``
and ``rule.pii``, payment cards by their checksum): what DataElf's private mode lets leave."""

from __future__ import annotations

import re
from functools import cache

from .checkers.rules import PiiPatterns, SecretPatterns, luhn

_PHRASES = frozenset({"medical record"})
"""``rule.pii`` labels that describe an act (sending a diagnosis), not a value to mask."""


@cache
def _patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    rows = [*SecretPatterns.patterns, *PiiPatterns.patterns]
    return tuple((label, regex) for label, regex, _ in rows if label not in _PHRASES)


def mask_text(text: str) -> str:
    """``text`` with every secret and personal identifier the rules find replaced by
    ``[<what it was>]``."""
    for label, regex in _patterns():
        text = regex.sub(f"[{label}]", text)
    return PiiPatterns.card.sub(
        lambda m: "[payment card]" if luhn(m.group(0)) else m.group(0), text
    )
