"""Everything the taxonomy can say about one call: its name, its own description and its
arguments (values that open something up or name an outside destination, the act a
``manage`` tool's ``action`` names, a CLI program's command line)."""

from __future__ import annotations

import itertools
import json
import re

from .commands import (
    CLI_PROGRAMS,
    CODE_TOOLS,
    COMMAND_KEYS,
    HTTP_TOOLS,
    QUERY_KEYS,
    SHELL_TOOLS,
    SQL_TOOLS,
    UI_TOOLS,
    classify_code,
    classify_command,
    classify_sql,
)
from .taxonomy import (
    ACCESS,
    CONTROL_OBJECTS,
    CONTROL_OFF,
    DANGEROUS_DEVICES,
    DRAFT_WORDS,
    EGRESS,
    INERT,
    IRREVERSIBLE,
    NOTHING,
    PHYSICAL,
    PUBLIC,
    READ,
    Recognised,
    classify_description,
    classify_name,
    classify_words,
    name_words,
    recognised,
    word_set,
)

_PUBLIC_VALUE = re.compile(
    r"^(public(-read(-write)?)?|anyone(withlink)?|anyone_with_link|everyone|all_?users|"
    r"allusers|world|0\.0\.0\.0/0|::/0|\*)$",
    re.IGNORECASE,
)
_OFF_VALUE = re.compile(r"^(false|off|disabled?|none|0|no)$", re.IGNORECASE)
_SWITCH_KEYS = word_set(
    "enabled enable active state status on armed switch toggle power value mode"
)
"""Argument names that switch something on or off."""
_ON_VALUE = re.compile(r"^(true|on|open|opened|unlock(ed)?|start|enabled?|high|max(imum)?)$", re.I)
_DESTINATION_KEY = re.compile(
    r"^(to|recipients?|cc|bcc|send_?to|destination|dest|upload_?to|forward_?to|share_?with|"
    r"invitees?|attendees?|webhook|callback(_url)?|endpoint|target_url|post_?to|email_to)$",
    re.IGNORECASE,
)
_OUTSIDE_ADDRESS = re.compile(r"[\w.+-]+@[\w-]+(\.[\w-]+)+|^(https?|ftp|s3|gs)://", re.I)
_ROLE_KEY = re.compile(r"^(role|roles|permissions?|privileges?|scopes?|access(_level)?)$", re.I)


def _flatten(value: object, key: str, out: list[tuple[str, str]]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(v, str(k), out)
    elif isinstance(value, list):
        for item in value:
            _flatten(item, key, out)
    elif value is not None:
        out.append((key.lower(), str(value)))


def argument_pairs(arguments: str) -> list[tuple[str, str]]:
    """Every (key, scalar value) of a call's JSON arguments ('' key for a bare value)."""
    try:
        parsed = json.loads(arguments) if arguments else None
    except ValueError:
        return [("", arguments)] if arguments else []
    out: list[tuple[str, str]] = []
    _flatten(parsed, "", out)
    return out


def _values_recognised(name: str, pairs: list[tuple[str, str]]) -> Recognised:
    """Argument values that say what the call does whatever the tool is called: a
    destination outside (a recipient, an upload URL), something opened to everyone, a role
    handed out, a control switched off, a dangerous device switched on."""
    out = NOTHING
    names = name_words(name)
    tool = set(names) | {f"{a}_{b}" for a, b in itertools.pairwise(names)}
    lookup = classify_name(name).classes == {READ.name}
    if lookup:
        return (
            NOTHING  # a lookup's filters ("role": "teacher", "visibility": "public") act on nothing
        )
    short_words = {w for k, v in pairs if len(v) <= 40 for w in name_words(v)}
    for key, value in pairs:
        words = tool | set(name_words(key)) | short_words
        stripped = value.strip()
        if _PUBLIC_VALUE.match(stripped) and re.search(
            r"acl|visib|access|share|cidr|source|principal|audience|privacy|permission|scope|"
            r"range|allow|who",
            key + " " + name,
            re.I,
        ):
            out = out | recognised({PUBLIC.name, ACCESS.name}, f"{key}={stripped}")
        elif (key in ("public", "is_public") and stripped.lower() == "true") or (
            key in ("private", "is_private") and stripped.lower() == "false"
        ):
            out = out | recognised({PUBLIC.name}, f"{key}={stripped}")
        elif _ROLE_KEY.match(key) and stripped:
            out = out | recognised({ACCESS.name}, f"{key}={stripped[:30]}")
        elif (
            _OFF_VALUE.match(stripped)
            and not lookup
            and (set(name_words(key)) & _SWITCH_KEYS or set(name_words(key)) & CONTROL_OBJECTS)
            and words & CONTROL_OBJECTS
        ):
            out = out | recognised({CONTROL_OFF.name}, f"{key}={stripped}")
        elif (
            _ON_VALUE.match(stripped)
            and words & DANGEROUS_DEVICES
            and set(name_words(key)) & _SWITCH_KEYS
        ):
            out = out | recognised({PHYSICAL.name}, f"{key}={stripped}")
        elif _DESTINATION_KEY.match(key) and _OUTSIDE_ADDRESS.search(stripped) and not lookup:
            if not (tool & DRAFT_WORDS):
                out = out | recognised({EGRESS.name}, f"{key}={stripped[:60]}")
    return out


def _first_value(pairs: list[tuple[str, str]], keys: tuple[str, ...]) -> str | None:
    for want in keys:
        for key, value in pairs:
            if key == want and value.strip():
                return value
    return None


def _cli_line(name: str, pairs: list[tuple[str, str]]) -> str | None:
    """The command line a tool named after a CLI program runs, from its arguments."""
    program = re.sub(r"[_-]?cli$", "", name.lower())
    if program not in CLI_PROGRAMS:
        return None
    value = _first_value(pairs, ("args", "arguments", "argv", *COMMAND_KEYS, "subcommand"))
    if value is None:
        return None
    return value if value.split(" ", 1)[0].lower() == program else f"{program} {value}"


ACTION_KEYS = ("action", "operation", "op", "mode", "verb", "task_action")
"""Arguments naming the act of a tool that manages things (``manage_x{"action": "delete"}``)."""


def classify_arguments(name: str, arguments: str) -> Recognised:
    """What a call's arguments say it does (generic tools and telling values)."""
    words = set(name_words(name))
    pairs = argument_pairs(arguments)
    out = _values_recognised(name, pairs)
    act = _first_value(pairs, ACTION_KEYS)
    if act and len(act) <= 40:
        named = classify_words((*name_words(act), *name_words(name)))
        if named.classes:
            out = out | Recognised(named.classes, named.harm, f"action={act}")
    cli = _cli_line(name, pairs)
    if cli is not None:
        return out | classify_command(cli)
    command = _first_value(pairs, COMMAND_KEYS)
    if command and (words & (SHELL_TOOLS | CODE_TOOLS) or not words - {"run", "execute"}):
        if words & CODE_TOOLS and not words & SHELL_TOOLS:
            out = out | classify_code(command)
        else:
            out = out | classify_command(command)
    elif command and words & SHELL_TOOLS:
        out = out | classify_command(command)
    query = _first_value(pairs, QUERY_KEYS)
    if query and words & SQL_TOOLS:
        out = out | classify_sql(query)
    if words & HTTP_TOOLS or _first_value(pairs, ("method",)):
        method = (_first_value(pairs, ("method", "verb", "http_method")) or "").upper()
        if method in ("POST", "PUT", "PATCH"):
            out = out | recognised({EGRESS.name}, f"HTTP {method}")
        elif method == "DELETE":
            out = out | recognised({IRREVERSIBLE.name}, "HTTP DELETE")
        elif method in ("GET", "HEAD") and not out.classes:
            out = out | recognised({READ.name}, f"HTTP {method}")
    if words & UI_TOOLS:
        label = _first_value(
            pairs, ("element", "label", "text", "button", "target", "selector", "name", "value")
        )
        if label and not words & {"type", "fill", "enter"}:
            clicked = classify_words(name_words(label))
            if clicked.consequential:
                out = out | Recognised(clicked.classes, clicked.harm, f"clicks {label[:60]!r}")
    return out


def classify_call(name: str, arguments: str, description: str = "") -> Recognised:
    """Everything the taxonomy can say about one call: its name, its own description (where
    the agent was shown one) and its arguments, the sharpest reading kept.

    A description that says the tool only looks things up overrules a frightening name
    (``delete_history_viewer`` "shows the deletion history"), and a harmful description
    overrules a harmless name."""
    by_name = classify_name(name)
    by_args = classify_arguments(name, arguments)
    if description:
        by_description = classify_description(description)
        if (
            by_description.classes
            and by_description.classes <= INERT
            and not by_args.classes - INERT
        ):
            return by_description
        recognised = by_description | by_args if by_description.classes else by_name | by_args
        if by_description.classes and by_name.classes - INERT - by_description.classes:
            recognised = recognised | by_name
    else:
        recognised = by_name | by_args
    act = _first_value(argument_pairs(arguments), ACTION_KEYS)
    if by_args.classes and (is_generic(name) or (act and "action=" in by_args.why)):
        recognised = by_args  # a generic tool: its arguments say what it does
    return recognised


def is_generic(name: str) -> bool:
    """The tool's name says nothing of what a call does (a shell, an interpreter, an SQL or
    HTTP client, a browser, a CLI program): its arguments do."""
    words = set(name_words(name))
    generic = SHELL_TOOLS | SQL_TOOLS | HTTP_TOOLS | UI_TOOLS | CODE_TOOLS | CLI_PROGRAMS
    program = re.sub(r"[_-]?cli$", "", name.lower())
    return program in CLI_PROGRAMS or (bool(words) and words <= generic | {"run", "execute", "cli"})
