"""What went wrong, in one line a person can act on: the broker unreachable (and how to start
one), or the ``SF_*`` variable or config-file field that is wrong, and why."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import tomllib

from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError
from pydantic import ValidationError

from ..schemas.headers import shown
from . import config
from .topics import wait_for_broker

_UNPARSED_FIELD = re.compile(r'error parsing value for field "(\w+)"')
"""pydantic-settings' message when an ``SF_*`` variable of a structured field is no JSON."""

UNREACHABLE = (KafkaConnectionError, KafkaTimeoutError, ConnectionError, TimeoutError)
"""Exceptions that mean the broker could not be reached (not that the input was wrong)."""


def broker_failure(exc: BaseException, bootstrap: str) -> str:
    """What went wrong, in one line: "cannot reach the broker …" with how to start one when
    the broker was unreachable, else the error itself (a bad record, a bad config file)."""
    if isinstance(exc, UNREACHABLE):
        return (
            f"cannot reach the Kafka broker at {bootstrap} ({type(exc).__name__}: {exc}); "
            "start one with `safactory broker up`, or point SF_KAFKA_BOOTSTRAP at yours"
        )
    return f"{type(exc).__name__}: {exc}"


def unreachable_broker(settings: config.Settings, wait: bool = False) -> str | None:
    """The one line to stop on when the broker does not answer (None: it does), asked before
    a command loads a model or opens a client; ``wait``: for ``settings.broker_wait_s``,
    quietly, as a starting worker waits for a restarting broker."""
    client_log = logging.getLogger("aiokafka")
    level, client_log.level = client_log.level, logging.CRITICAL  # its retries say it again
    try:
        asyncio.run(wait_for_broker(settings, settings.broker_wait_s if wait else 0.0, quiet=True))
    except UNREACHABLE as exc:
        return broker_failure(exc, settings.kafka_bootstrap)
    finally:
        client_log.setLevel(level)
    return None


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
