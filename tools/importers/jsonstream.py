"""Reading trace files a record at a time: memory follows the largest record, not the file.

JSONL is read line by line, each line decoded as UTF-8 on its own, so a bad byte costs its
line only. A JSON file holding a list is read item by item with ``json.JSONDecoder
.raw_decode`` over a window of the file that grows only while an item is cut off at its
edge; an item holding bytes that are not UTF-8 is reported and skipped. A JSON syntax error
inside a list cannot be stepped over (nothing says where the broken item ends), so it ends
the file's records with that error; those read before it stand.

Every value read is clean text: JSON nested too deeply is an error (not a RecursionError),
and unpaired surrogate escapes (``"\\ud800"``: text UTF-8 cannot encode, so no step holding
it could be published or scanned) become U+FFFD.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

CHUNK = 1 << 20
"""Bytes read at a time."""
MAX_RECORD = 64 << 20
"""A single record larger than this is refused (it would be held whole)."""
_BAD_BYTE = re.compile("[\udc80-\udcff]")
"""What ``surrogateescape`` makes of a byte that is not UTF-8."""
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SPACE = re.compile(r"[ \t\n\r]*")


@dataclass(frozen=True, slots=True)
class Bad:
    """A record that could not be read, and why."""

    reason: str


def loads_json(text: str) -> Any:
    """``json.loads`` of one record's text, clean (see the module docstring)."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply to read", text, 0) from None
    return without_surrogates(data) if _SURROGATE_ESCAPE.search(text) else data


def max_record() -> int:
    """The largest record read, in bytes: ``SF_AUDIT_MAX_RECORD_MB`` (default 64)."""
    return int(float(os.environ.get("SF_AUDIT_MAX_RECORD_MB", MAX_RECORD >> 20)) * (1 << 20))


def lines(file: Path) -> Iterator[tuple[int, Any | Bad]]:
    """``(line number, value)`` of each non-blank line of a JSONL file, or :class:`Bad` for
    a line that is not UTF-8, not JSON, or longer than :func:`max_record` (skipped to its
    end a chunk at a time, never held whole)."""
    limit = max_record()
    with file.open("rb") as handle:
        number = 0
        while raw := handle.readline(limit + 1):
            number += 1
            if len(raw) > limit and not raw.endswith(b"\n"):
                while (rest := handle.readline(CHUNK)) and not rest.endswith(b"\n"):
                    pass
                yield (
                    number,
                    Bad(
                        f"a record over {limit >> 20} MiB (SF_AUDIT_MAX_RECORD_MB raises the limit)"
                    ),
                )
                continue
            if not raw.strip():
                continue
            try:
                yield number, loads_json(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                yield number, Bad(f"not UTF-8 (byte {raw[exc.start]:#04x} at {exc.start})")
            except json.JSONDecodeError as exc:
                yield number, Bad(f"not valid JSON ({exc.msg})")


def items(file: Path) -> Iterator[tuple[int | None, Any | Bad]]:
    """A JSON file's records: ``(i, item)`` for each item of a top-level list (0-based), or
    ``(None, value)`` once for any other value; :class:`Bad` for one that cannot be read."""
    decoder = json.JSONDecoder()
    with file.open("rb") as handle:
        window = _Window(handle)
        if window.skip_space() != "[":
            while not window.eof:
                window.grow()
            yield None, window.value(decoder, whole=True)
            return
        window.pos += 1
        index = 0
        while True:
            head = window.skip_space()
            if head == "]":
                return
            if index:
                if head != ",":
                    yield index, Bad(f"not valid JSON (expected ',' or ']' after item {index - 1})")
                    return
                window.pos += 1
                window.skip_space()
            value = window.value(decoder)
            yield index, value
            if isinstance(value, Bad) and value.reason.startswith("not valid JSON"):
                return
            index += 1


class _Window:
    """The part of a file being parsed: decoded text with a read position."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle = handle
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
        self.text = ""
        self.pos = 0
        self.eof = False
        self.grow()

    def grow(self, size: int = CHUNK) -> None:
        """Drop what was parsed and read ``size`` more bytes."""
        chunk = self.handle.read(size)
        self.eof = not chunk
        self.text = self.text[self.pos :] + self.decoder.decode(chunk, final=self.eof)
        self.pos = 0

    def skip_space(self) -> str:
        """The next character that is not white space ('' at the end of the file)."""
        while True:
            self.pos = _SPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.text) or self.eof:
                return self.text[self.pos : self.pos + 1]
            self.grow()

    def value(self, decoder: json.JSONDecoder, *, whole: bool = False) -> Any | Bad:
        """Parse one value at the position, reading more while it is cut off; ``whole``:
        nothing but white space may follow it."""
        size = CHUNK
        while True:
            start = self.pos
            try:
                value, end = decoder.raw_decode(self.text, start)
                cut_off = end == len(self.text) and not self.eof
            except RecursionError:
                return Bad("not valid JSON (nested too deeply to read)")
            except json.JSONDecodeError as exc:
                if self.eof:
                    return Bad(f"not valid JSON ({exc.msg}: line {exc.lineno} column {exc.colno})")
                cut_off = True
            if cut_off:  # parse again with more of the file
                if len(self.text) - start > max_record():
                    return Bad(
                        f"a record over {max_record() >> 20} MiB "
                        "(SF_AUDIT_MAX_RECORD_MB raises the limit)"
                    )
                self.grow(size)
                size = min(size * 2, 64 * CHUNK)
                continue
            self.pos = end
            if whole and self.skip_space():
                return Bad("not valid JSON (extra data after the value)")
            bad = _BAD_BYTE.search(self.text, start, end)
            if bad:
                return Bad(f"not UTF-8 (byte {ord(bad.group()) - 0xDC00:#04x} inside the record)")
            if _SURROGATE_ESCAPE.search(self.text, start, end):
                value = without_surrogates(value)
            return value


def without_surrogates(data: Any) -> Any:
    """``data`` with unpaired surrogates in its strings and keys replaced (in place)."""
    if isinstance(data, str):
        return valid_text(data)
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            fixed = {valid_text(k): v for k, v in node.items()}
            node.clear()
            node.update(fixed)
        elif not isinstance(node, list):
            continue
        for key, value in node.items() if isinstance(node, dict) else enumerate(node):
            if isinstance(value, str):
                node[key] = valid_text(value)
            else:
                stack.append(value)
    return data


def valid_text(text: str) -> str:
    """``text`` with unpaired surrogates replaced by U+FFFD."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
