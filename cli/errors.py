"""Where the commands print (``console``, and ``err`` for stderr), their progress bars, and
their one-line errors: the broker hint only where it helps, bad settings named."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn

from ..infra import config
from ..infra.failures import broker_failure as broker_failure  # every command's one line
from ..infra.failures import settings_failure

console = Console()
err = Console(stderr=True, soft_wrap=True)

Errors = type[BaseException] | tuple[type[BaseException], ...]


def progress(*more: ProgressColumn, **options: Any) -> Progress:
    """A progress bar: the task's description, its bar, done of total, then ``more``."""
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn())
    return Progress(*columns, *more, **options)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``error: message`` on one line (brackets are not markup; control characters from
    the input are escaped) and return the exit to raise."""
    printable = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
    err.print(f"[red]error:[/red] {escape(printable)}")
    return typer.Exit(code=code)


@contextmanager
def failing(*errors: type[BaseException], broker: Errors = (), code: int = 1) -> Iterator[None]:
    """Inside, an exception of ``errors`` exits with its message as the one line, and one of
    ``broker`` (``OSError``; ``Exception`` around Kafka clients) with :func:`broker_failure`'s."""
    try:
        yield
    except typer.Exit:
        raise
    except errors as exc:
        raise fail(str(exc), code) from None
    except broker as exc:
        raise fail(broker_failure(exc, get_settings().kafka_bootstrap), code) from None


def get_settings() -> config.Settings:
    """The process-wide settings; a bad ``SF_*`` variable or config file exits with one line
    naming it (the CLI reads settings only through this)."""
    try:
        return config.get_settings()
    except (ValidationError, OSError, ValueError) as exc:  # TOML and UTF-8 errors included
        raise fail(settings_failure(exc)) from None
