"""``safactory label import`` and ``safactory review``: people's labels for the auditor."""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..infra.terminal import visible
from .errors import console, failing
from .options import DbOption, lance_location

if TYPE_CHECKING:
    from ..tools.casebook import Casebook

app = typer.Typer(help="Labels people give the auditor (docs/AUDIT.md).", no_args_is_help=True)
ByOption = Annotated[str | None, typer.Option("--by", help="who labels (default: your login)")]


def _casebook(db: str | None) -> Casebook:
    from ..tools.casebook import Casebook

    return Casebook(lance_location(db))


@app.command("import")
def import_labels(
    path: Annotated[Path, typer.Argument(help="JSONL: episode_id (or id), label, step, reason")],
    db: DbOption = None,
    by: ByOption = None,
) -> None:
    """Store labels from a file; the next `safactory audit` of the traces they name uses them."""
    from ..tools.review import LabelFileError, read_label_file, store

    with failing(LabelFileError, OSError):
        labels = read_label_file(path, by or getpass.getuser())
    for line in store(_casebook(db), labels):
        console.print(visible(line), markup=False, highlight=False)


def review(
    db: DbOption = None,
    by: ByOption = None,
    limit: Annotated[int, typer.Option("--limit", help="cases to ask at most")] = 20,
) -> None:
    """Label the audited cases the auditor is least sure of, most informative first:
    u = unsafe, s = safe, Enter = skip, q = stop. Each answer is stored at once."""
    from ..tools.review import ask

    def prompt(text: str) -> str:
        return typer.prompt(text, default="", show_default=False)

    def say(text: str) -> None:
        console.print(visible(text), markup=False, highlight=False)

    ask(_casebook(db), by or getpass.getuser(), prompt, say, limit)
