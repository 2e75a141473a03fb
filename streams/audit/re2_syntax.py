"""Python ``re`` patterns rewritten for RE2, as prefilters: the rewrite matches wherever the
pattern does (and maybe elsewhere), never the other way round.

RE2 lacks look-arounds (each becomes an empty group) and reads some of Python's syntax
otherwise: ``\\s`` without ``\\v`` and ``\\x1c``-``\\x1f``, ``$`` only at the very end
(Python's also matches before a final newline), ``{,n}`` as text, ``[:`` in a class as a
POSIX class, and ``\\d``, ``\\w``, ``\\b`` as ASCII. For ASCII text (:func:`for_re2`) each is
written as Python reads it there. For any text (``unicode=True``) ``\\w`` and ``\\d`` become
Unicode classes, Python's whitespace is listed, and ``\\b`` and ``\\B``, which RE2 cannot
write for Unicode, are dropped; a negated shorthand (``\\W``, ``\\D``) is refused, as RE2's
Unicode tables may be newer than Python's. Case folding differs only for the Turkish dotted
and dotless i, which :data:`UNFOLDED` names for callers to keep away from RE2.
"""

from __future__ import annotations

import re

UNFOLDED = ("\u0130", "\u0131")
"""Characters Python's ``re.IGNORECASE`` matches to ASCII letters and RE2's does not."""

_FLAGS = ((re.IGNORECASE, "i"), (re.MULTILINE, "m"), (re.DOTALL, "s"))
_LOOKAROUND = ("(?=", "(?!", "(?<=", "(?<!")
_OPEN_REPEAT = re.compile(r"\{,\d*\}")
_ASCII_SPACE = r"\s\x0b\x1c-\x1f"
_SPACE = r"\t-\r\x1c-\x20\x85\xa0\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}"
"""Every character Python's ``\\s`` matches (Unicode 14, as ``str.isspace``)."""
_OUTSIDE = {r"\s": f"[{_ASCII_SPACE}]", r"\Z": r"\z"}
_INSIDE = {r"\s": _ASCII_SPACE}
_UNICODE_OUTSIDE = {
    r"\s": f"[{_SPACE}]",
    r"\S": f"[^{_SPACE}]",
    r"\w": r"[\p{L}\p{N}_]",
    r"\d": r"\p{Nd}",
    r"\b": "(?:)",
    r"\B": "(?:)",
    r"\Z": r"\z",
    r"\W": None,
    r"\D": None,
}
_UNICODE_INSIDE = {
    r"\s": _SPACE,
    r"\w": r"\p{L}\p{N}_",
    r"\d": r"\p{Nd}",
    r"\S": None,
    r"\W": None,
    r"\D": None,
}
_UNICODE_NEGATED = {**_UNICODE_INSIDE, r"\w": None, r"\d": None}


def for_re2(pattern: re.Pattern[str], *, unicode: bool = False) -> str | None:
    """``pattern`` (with its flags inline) as an RE2 prefilter for ASCII text, or with
    ``unicode`` for any text; None where it has no such rewrite (VERBOSE, say)."""
    flags = pattern.flags & ~re.UNICODE
    if flags & ~(re.IGNORECASE | re.MULTILINE | re.DOTALL):
        return None
    letters = "".join(letter for flag, letter in _FLAGS if flags & flag)
    body = _rewrite(pattern.pattern, unicode)
    if body is None:
        return None
    return f"(?{letters}){body}" if letters else body


def _rewrite(pattern: str, unicode: bool) -> str | None:
    outside, inside, negated = (
        (_UNICODE_OUTSIDE, _UNICODE_INSIDE, _UNICODE_NEGATED)
        if unicode
        else (_OUTSIDE, _INSIDE, _INSIDE)
    )
    out: list[str] = []
    i, escapes = 0, outside
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            atom = pattern[i : i + 2]
            written = escapes.get(atom, atom)
            if written is None:
                return None
            out.append(written)
            i += 2
        elif escapes is not outside:  # in a character class
            if char == "]":
                escapes = outside
            out.append(r"\[" if char == "[" else char)  # RE2 reads "[:" as a POSIX class
            i += 1
        elif pattern.startswith(_LOOKAROUND, i):
            out.append("(?:)")
            i = _group_end(pattern, i)
        elif char == "$":
            out.append("(?m:$)")
            i += 1
        elif _OPEN_REPEAT.match(pattern, i):  # Python's {,n} is RE2's {0,n}
            out.append("{0")
            i += 1
        elif char == "[":
            start = i + 1
            escapes = negated if pattern.startswith("^", start) else inside
            start += pattern.startswith("^", start)
            start += pattern.startswith("]", start)  # a leading ']' is a literal
            out.append(pattern[i:start])
            i = start
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _group_end(pattern: str, i: int) -> int:
    """Just past the ')' that closes the group opening at ``i``."""
    depth, j = 0, i
    while j < len(pattern):
        if pattern[j] == "(":
            depth += 1
        elif pattern[j] == ")":
            depth -= 1
            if depth == 0:
                return j + 1
        j = _atom_end(pattern, j)
    return j


def _atom_end(pattern: str, i: int) -> int:
    """Where the piece of ``pattern`` at ``i`` ends: an escape, a character class, or one
    character."""
    if pattern[i] == "\\":
        return i + 2
    if pattern[i] != "[":
        return i + 1
    j = i + 1
    if j < len(pattern) and pattern[j] == "^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1  # a leading ']' is a literal
    while j < len(pattern) and pattern[j] != "]":
        j += 2 if pattern[j] == "\\" else 1
    return j + 1
