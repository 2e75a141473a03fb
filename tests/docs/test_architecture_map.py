"""The map in the repo stays true: every path docs/ARCHITECTURE.md names exists, and the
README links it first."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAP = ROOT / "docs" / "ARCHITECTURE.md"
PATH = re.compile(r"`((?:[\w.-]+/)+[\w.-]*|[\w.-]+\.(?:py|md|json|sh))`")
FOLDERS = (
    "agents",
    "streams",
    "streams/audit",
    "sinks",
    "trainer",
    "infra",
    "schemas",
    "cli",
    "tools",
)
"""A path in a table's folder row is written relative to that folder."""


def test_every_path_the_map_names_exists() -> None:
    named = set(PATH.findall(MAP.read_text()))
    assert len(named) > 40
    missing = [
        path
        for path in sorted(named)
        if not any(c.exists() for c in [ROOT / path, *(ROOT / f / path for f in FOLDERS)])
    ]
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


def test_the_readme_links_the_map_first() -> None:
    links = re.findall(r"\]\(([^)]+\.md)\)", (ROOT / "README.md").read_text())
    assert links and links[0] == "docs/ARCHITECTURE.md"
