"""Personal data and secrets masked out of text: what DataElf's private mode lets leave.

Masking is stricter than detection: the auditor's rules (``rule.secrets``, ``rule.pii``)
find what an agent must not send, this masks anything that names a person or opens a door,
whether or not anyone sends it. Each kind becomes ``[<what it was>]``:

* whole PEM private-key blocks (BEGIN to END), passwords in URLs
  (``postgres://user:[password]@host``), bearer and basic credentials;
* the secret patterns of ``rule.secrets`` (AWS key ids, GitHub, Slack, OpenAI-style and
  Google keys, JSON web tokens, ``password = …``);
* e-mail addresses, IBANs (mod-97 checked), payment cards (Luhn checked), phone numbers,
  the identifiers of ``rule.pii`` (social security and passport numbers, dates of birth);
* any other token that looks like a key by its shape and entropy: 20 or more characters of
  a key alphabet mixing letters and digits, at 3.5 bits a character or more (an AWS secret
  key, an API key without a known prefix); hex ids and UUIDs (event ids) are not keys.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from functools import cache

from .checkers.rules import PiiPatterns, SecretPatterns, luhn

_PHRASES = frozenset({"medical record"})
"""``rule.pii`` labels that describe an act (sending a diagnosis), not a value to mask."""
_PEM = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
    re.DOTALL,
)
_URL_PASSWORD = re.compile(r"\b([a-z][a-z0-9+.-]*://[^\s/:@]+):[^\s/@]+@", re.IGNORECASE)
_AUTHORIZATION = re.compile(r"\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=-]{12,}", re.IGNORECASE)
_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b")
_PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{2,4}\)[ .-]?|\d{2,4}[ .-])\d{3,4}[ .-]?\d{3,4}(?!\w)"
)
_TOKEN = re.compile(r"(?<![\w+/-])[A-Za-z0-9+/_-]{20,}={0,2}(?![\w+/=-])")
_ID_LIKE = re.compile(r"^[0-9a-f-]+$")
KEY_ENTROPY = 3.5
"""Bits a character at which a long mixed token reads as a key, not a word or an id."""


def _iban(match: re.Match[str]) -> str:
    text = match.group(0).replace(" ", "")
    moved = text[4:] + text[:4]
    digits = "".join(str(int(c, 36)) for c in moved)
    return "[IBAN]" if int(digits) % 97 == 1 else match.group(0)


def _key(match: re.Match[str]) -> str:
    token = match.group(0)
    if _ID_LIKE.match(token.lower()) and not any(c.isupper() for c in token):
        return token  # a hex id or a UUID
    if not (any(c.isdigit() for c in token) and any(c.isalpha() for c in token)):
        return token
    counts = Counter(token)
    entropy = -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())
    return "[secret key]" if entropy >= KEY_ENTROPY else token


@cache
def _steps() -> tuple[Callable[[str], str], ...]:
    rules = [*SecretPatterns.patterns, *PiiPatterns.patterns]
    named = [(regex, f"[{label}]") for label, regex, _ in rules if label not in _PHRASES]

    def sub(regex: re.Pattern[str], replacement: str | Callable[[re.Match[str]], str]):
        return lambda text: regex.sub(replacement, text)

    return (
        sub(_PEM, "[private key]"),
        sub(_URL_PASSWORD, r"\1:[password]@"),
        sub(_AUTHORIZATION, r"\1 [credential]"),
        *(sub(regex, replacement) for regex, replacement in named),
        sub(_EMAIL, "[e-mail address]"),
        sub(_IBAN, _iban),
        sub(PiiPatterns.card, lambda m: "[payment card]" if luhn(m.group(0)) else m.group(0)),
        sub(_PHONE, "[phone number]"),
        sub(_TOKEN, _key),
    )


def mask_text(text: str) -> str:
    """``text`` with every secret and personal identifier replaced by ``[<what it was>]``."""
    for step in _steps():
        text = step(text)
    return text
