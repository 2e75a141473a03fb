"""Every command the docs show is one this checkout has: each ``safactory`` line of every
shell block in README.md and docs/*.md is parsed by the CLI itself (the command exists, every
option exists and takes its value, every checker named exists), every script and module a
block runs exists, and the blocks that only show a shape say so with a reason.

A block is marked with an HTML comment on the line before it:
``<!-- doc: illustrative: REASON -->`` (placeholders, another machine, a GPU). Values in
``<angle brackets>`` are placeholders and are not checked; ``a|b`` in a subcommand's place
is each of ``a`` and ``b``.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest
import typer

from safactory.cli.main import app
from safactory.streams.audit import registry

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(
    r"(?:<!-- doc: (?P<mark>[^>]*?) -->\n)?```(?:bash|sh|shell|console)\n(.*?)```", re.S
)
ALTERNATIVES = re.compile(r"(?<=[\w-])\|(?=[\w-])")
"""``status|logs|down``: one word naming alternatives (a pipe has spaces around it)."""
SEPARATORS = {"&&", "||", ";", "|", "&"}
NOT_OURS = {"curl", "vllm", "pip", "export", "cd", "grep", "echo", "kill"}
"""Other tools' commands: their lines are not ours to check."""


def blocks() -> list[tuple[str, str | None, str]]:
    """(where, mark, text) of every shell block of the docs."""
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start(2))
            found.append((f"{doc.relative_to(ROOT)}:{line}", m.group("mark"), m.group(2)))
    return found


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


def parse(args: list[str]) -> None:
    """Parse ``safactory ARGS`` as the CLI would, without running it (``--help`` ends it)."""
    command = typer.main.get_command(app)
    ctx = command.make_context("safactory", list(args), resilient_parsing=False)
    while isinstance(command, typer.core.TyperGroup):
        rest = [*ctx._protected_args, *ctx.args]
        if not rest:
            return
        name, sub, rest = command.resolve_command(ctx, rest)
        assert sub is not None, f"no command {name!r}"
        command = sub
        if "--help" in rest:
            return
        ctx = command.make_context(name or "", rest, parent=ctx)
    chosen = ctx.params.get("checkers") or ""
    for name in (chosen if isinstance(chosen, str) else ",".join(chosen)).split(","):
        name = name.removeprefix("-")  # -NAME: the defaults less that one
        assert not name or name in registry.available(), f"no checker {name!r}"


def expanded(words: list[str]) -> list[list[str]]:
    """``a|b`` alternatives in a subcommand's place (before any option), each on its own."""
    for i, word in enumerate(words):
        if word.startswith("-"):
            break
        if "¦" in word:
            alternatives = [[*words[:i], alt, *words[i + 1 :]] for alt in word.split("¦")]
            return [w for alt in alternatives for w in expanded(alt)]
    return [words]


CASES = blocks()


@pytest.mark.parametrize(("where", "mark", "text"), CASES, ids=[c[0] for c in CASES])
def test_every_command_in_the_docs_is_one_this_checkout_has(
    where: str, mark: str | None, text: str
) -> None:
    if mark is not None:
        assert mark.startswith("illustrative: ") and len(mark) > 24, f"{where}: say why"
        return
    for words in commands(text):
        if any(w.startswith("<") for w in words):
            words = [w for w in words if not w.startswith("<")]  # a placeholder's value
        program = words[0]
        if program == "safactory":
            for args in expanded(words[1:]):
                try:
                    parse(args)
                except (typer.Exit, SystemExit):
                    pass  # --help
                except Exception as exc:  # the CLI's own usage error, or ours
                    raise AssertionError(f"{where}: `safactory {' '.join(args)}`: {exc}") from None
        elif program in ("bash", "sh", "source"):
            assert (ROOT / words[1]).is_file(), f"{where}: no script {words[1]}"
        elif program in ("python", "python3"):
            if words[1] == "-m":
                module = words[2]
                assert importlib.util.find_spec(module) is not None, f"{where}: no module {module}"
            elif not words[1].startswith("-"):
                assert (ROOT / words[1]).is_file(), f"{where}: no script {words[1]}"
        else:
            assert program in NOT_OURS, f"{where}: `{program}` is neither ours nor known"


def test_the_checker_finds_a_missing_command_option_or_checker() -> None:
    for bad in (
        ["replay", "audit", "--checkers", "heuristic.unrequested_destruction"],
        ["audit", "x.json", "--without", "rule.pii"],
        ["worker", "audot"],
    ):
        with pytest.raises(Exception):  # noqa: B017 - any of the CLI's usage errors
            parse(bad)
    parse(["replay", "audit", "--checkers", "rule.pii", "--show", "4"])
    assert commands("A=1 safactory x --y \\\n  z && b | c # note") == [
        ["safactory", "x", "--y", "z"],
        ["b"],
        ["c"],
    ]
