"""The shell blocks of README.md and docs/*.md, and the commands in them, for the tests that
check them (tests/docs/test_doc_commands.py parses each, tests/docs/test_doc_blocks_run.py runs
them).

A block may be marked with an HTML comment on the line before it,
``<!-- doc: KIND: VALUE -->``:

* ``illustrative: REASON``: placeholders only; neither parsed nor run;
* ``parsed only: REASON``: every command is parsed, none run (another machine, a GPU, the
  full demo, a past run's topics);
* ``given: NAME, NAME``: run, in a folder that holds those files the reader is assumed to
  have (``$NAME``: that variable set).

An unmarked block is parsed and run as it stands.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(
    r"(?:<!-- doc: (?P<mark>[^>]*?) -->\n)?```(?:bash|sh|shell|console)\n(.*?)```", re.S
)
ALTERNATIVES = re.compile(r"(?<=[\w-])\|(?=[\w-])")
"""``status|logs|down``: one word naming alternatives (a pipe has spaces around it)."""
SEPARATORS = {"&&", "||", ";", "|", "&"}
PLACEHOLDER = re.compile(r"<[a-z][^<>]*>")
"""``<run>``, ``<a guard model>``: a value the reader fills in."""


@dataclass(frozen=True)
class Block:
    """One shell block of a doc."""

    where: str
    """``docs/X.md:LINE``."""
    kind: str | None
    """The mark's kind (``illustrative``, ``parsed only``, ``given``), or ``None``."""
    value: str
    """The mark's text after its kind."""
    text: str

    @property
    def runs(self) -> bool:
        """Whether the block is run (unmarked or ``given``)."""
        return self.kind in (None, "given")

    @property
    def given(self) -> list[str]:
        """The files and ``$VARIABLES`` the reader is assumed to have."""
        return (
            [n.strip() for n in self.value.split(",") if n.strip()] if self.kind == "given" else []
        )


def blocks() -> list[Block]:
    """Every shell block of the docs, in order."""
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start(2))
            kind, _, value = (m.group("mark") or "").partition(":")
            found.append(
                Block(
                    f"{doc.relative_to(ROOT)}:{line}",
                    kind.strip() or None,
                    value.strip(),
                    m.group(2),
                )
            )
    return found


def lines(text: str) -> list[str]:
    """The command lines of a block as a reader types them: continuations joined, blank and
    comment-only lines dropped."""
    joined = re.sub(r"\\\n", " ", text)
    return [
        line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]


def substituted(text: str) -> str:
    """``text`` with each ``$(...)`` (parentheses balanced) replaced by one word."""
    while (start := text.find("$(")) >= 0:
        depth, end = 0, start + 1
        for end in range(start + 1, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                break
        text = text[:start] + "VALUE" + text[end + 1 :]
    return text


def commands(text: str) -> list[list[str]]:
    """The simple commands of a block: continuation lines joined, comments dropped, split at
    ``&&``, ``|``, ``;``, ``&``, leading ``VAR=value`` assignments removed, ``$(...)`` a
    value."""
    joined = substituted(re.sub(r"\\\n", " ", text))
    out: list[list[str]] = []
    for line in joined.splitlines():
        lexer = shlex.shlex(ALTERNATIVES.sub("¦", line), posix=True, punctuation_chars="&|;")
        lexer.whitespace_split = True
        words: list[str] = []
        for token in [*lexer, "&&"]:
            if token in SEPARATORS:
                while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
                    words.pop(0)
                if words:
                    out.append(words)
                words = []
            else:
                words.append(token)
    return out


def expanded(words: list[str]) -> list[list[str]]:
    """``a|b`` alternatives in a subcommand's place (before any option), each on its own."""
    for i, word in enumerate(words):
        if word.startswith("-"):
            break
        if "¦" in word:
            alternatives = [[*words[:i], alt, *words[i + 1 :]] for alt in word.split("¦")]
            return [w for alt in alternatives for w in expanded(alt)]
    return [words]
