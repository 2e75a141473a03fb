"""Every command the docs show is one this checkout has: each ``safactory`` line of every
shell block in README.md and docs/*.md is parsed by the CLI itself (the command exists, every
option exists and takes its value, every checker named exists), every script and module a
block runs exists, and the blocks that only show a shape say so with a reason (the marks:
tests/support/doc_blocks.py). Values in ``<angle brackets>`` are placeholders and are not
checked; ``a|b`` in a subcommand's place is each of ``a`` and ``b``.
"""

from __future__ import annotations

import importlib.util

import pytest
import typer
from doc_blocks import ROOT, Block, blocks, commands, expanded

from safactory.cli.main import app
from safactory.streams.audit import registry

NOT_OURS = {"curl", "vllm", "pip", "export", "cd", "grep", "echo", "kill"}
"""Other tools' commands: their lines are not ours to check."""
MARKS = {"illustrative", "parsed only", "given"}


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


CASES = blocks()


@pytest.mark.parametrize("block", CASES, ids=[c.where for c in CASES])
def test_every_command_in_the_docs_is_one_this_checkout_has(block: Block) -> None:
    where = block.where
    assert block.kind is None or block.kind in MARKS, f"{where}: no mark {block.kind!r}"
    if block.kind in ("illustrative", "parsed only"):
        assert len(block.value) > 12, f"{where}: say why the block is {block.kind}"
    if block.kind == "illustrative":
        return
    for words in commands(block.text):
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
