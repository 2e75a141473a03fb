"""Text from traces and records shown on a terminal: control characters made visible.

A trace can hold escape sequences (clear the screen, move the cursor, set the window title,
recolour): printed raw they repaint the user's terminal. Every text that came from outside
and reaches a terminal goes through :func:`visible` first.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with every control character but newline and tab written as an escape
    (``\\x1b``), so a terminal shows it instead of obeying it."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
