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
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

CHUNK = 1 << 20
"""Bytes read at a time."""
MAX_RECORD = 512 << 20
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


def lines(file: Path) -> Iterator[tuple[int, Any | Bad]]:
    """``(line number, value)`` of each non-blank line of a JSONL file, or :class:`Bad` for
    a line that is not UTF-8 or not JSON."""
    with file.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
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
                if len(self.text) - start > MAX_RECORD:
                    return Bad(f"not valid JSON (a record over {MAX_RECORD >> 20} MiB)")
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
