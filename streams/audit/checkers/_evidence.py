"""Building ``Evidence`` from a regex match inside a step's text."""

from __future__ import annotations

import re

from ....schemas import Evidence
from ..text import Span


def evidence(span: Span, match: re.Match[str], pad: int = 40) -> Evidence:
    """The matched text with a little context, and where it sits in the field."""
    start, end = match.start(), match.end()
    text = span.text[max(0, start - pad) : end + pad]
    return Evidence(text=text[:500], field=span.field, start=start, end=end)


def whole(span: Span, limit: int = 500) -> Evidence:
    """A whole (short) span as evidence."""
    return Evidence(text=span.text[:limit], field=span.field)
