"""One-line errors for the commands: the broker hint only where it helps, bad settings named."""

from __future__ import annotations

import os
import re
import tomllib

import typer
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from ..infra import config
from ..schemas.headers import shown

_UNPARSED_FIELD = re.compile(r'error parsing value for field "(\w+)"')
"""pydantic-settings' message when an ``SF_*`` variable of a structured field is no JSON."""

UNREACHABLE = (KafkaConnectionError, KafkaTimeoutError, ConnectionError, TimeoutError)
"""Exceptions that mean the broker could not be reached (not that the input was wrong)."""

_err = Console(stderr=True, soft_wrap=True)


def broker_failure(exc: BaseException, bootstrap: str) -> str:
    """What went wrong, in one line: "cannot reach the broker …" with how to start one when
    the broker was unreachable, else the error itself (a bad record, a bad config file)."""
    if isinstance(exc, UNREACHABLE):
        return (
            f"cannot reach the Kafka broker at {bootstrap} ({type(exc).__name__}: {exc}); "
            "start one with `safactory broker up`, or point SF_KAFKA_BOOTSTRAP at yours"
        )
    return f"{type(exc).__name__}: {exc}"


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``error: message`` on one line (brackets are not markup; control characters from
    the input are escaped) and return the exit to raise."""
    printable = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
    _err.print(f"[red]error:[/red] {escape(printable)}")
    return typer.Exit(code=code)


def get_settings() -> config.Settings:
    """The process-wide settings; a bad ``SF_*`` variable or config file exits with one line
    naming it (the CLI reads settings only through this)."""
    try:
        return config.get_settings()
    except (ValidationError, OSError, ValueError) as exc:  # TOML and UTF-8 errors included
        raise fail(settings_failure(exc)) from None


def settings_failure(exc: Exception) -> str:
    """One line naming the ``SF_*`` variable or config-file field that is wrong, and why."""
    try:
        path = config.config_file()
    except OSError as missing:
        return str(missing)
    where = f"config file {path}" if path is not None else "settings"
    if isinstance(exc, ValidationError):
        first = exc.errors(include_url=False)[0]
        field = ".".join(str(p) for p in first["loc"])
        var = f"SF_{field.upper()}"
        if var in os.environ:
            source = f"{var}={shown(os.environ[var])}"
        else:
            source = f"{where}: field {shown(field)}"
            if "input" in first:
                source += f"={shown(first['input'])}"
        more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        return f"{source}: {first['msg']}{more}; fix it or unset it"
    parsed = _UNPARSED_FIELD.search(str(exc))
    if parsed and f"SF_{parsed.group(1).upper()}" in os.environ:  # a structured field's JSON
        var = f"SF_{parsed.group(1).upper()}"
        return f"{var}={shown(os.environ[var])}: not valid JSON for this field; fix it or unset it"
    if isinstance(exc, tomllib.TOMLDecodeError | UnicodeDecodeError):
        return f"{where}: not valid TOML ({' '.join(str(exc).split())[:200]})"
    return f"{where}: {' '.join(str(exc).split())[:300]}"
