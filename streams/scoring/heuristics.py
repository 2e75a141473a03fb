"""Cheap text heuristics: how complex an instruction is, how well-formed a response is."""

from __future__ import annotations

import math
import re
import zlib

WORD = re.compile(r"[A-Za-z][A-Za-z'-]*|\d+")


def words(text: str) -> list[str]:
    """Lower-cased word tokens."""
    return [w.lower() for w in WORD.findall(text)]


def complexity(instruction: str) -> float:
    """0..1: grows with length (log-scaled) and vocabulary richness of the instruction."""
    tokens = words(instruction)
    if not tokens:
        return 0.0
    length = min(1.0, math.log1p(len(tokens)) / math.log1p(200))
    richness = len(set(tokens)) / len(tokens)
    return round(0.6 * length + 0.4 * richness, 6)


def quality(response: str) -> float:
    """0..1: a response made of real words, not repetitive, not empty, not noise.

    The product of: share of characters that are letters, digits, spaces or punctuation;
    share of dictionary-shaped words (vowels, sane length); compressibility (repetition
    compresses away); and distinct-word ratio.
    """
    text = response.strip()
    if not text:
        return 0.0
    tokens = words(text)
    if not tokens:
        return 0.0
    printable = sum(c.isalnum() or c.isspace() or c in ".,;:!?'\"()-%$" for c in text) / len(text)
    wordlike = sum(_wordlike(w) for w in tokens) / len(tokens)
    raw = text.encode()
    compress = min(1.0, len(zlib.compress(raw)) / len(raw) * 1.6) if len(raw) > 40 else 1.0
    distinct = len(set(tokens)) / len(tokens)
    distinct = 1.0 if len(tokens) < 4 else min(1.0, distinct * 1.5)
    return round(printable * wordlike * compress * distinct, 6)


def _wordlike(word: str) -> bool:
    if word.isdigit():
        return True
    return 1 <= len(word) <= 20 and bool(re.search(r"[aeiouy]", word))
