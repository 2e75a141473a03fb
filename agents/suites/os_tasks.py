"""The OS environment's seeded home directory and its task suite, from ``data/os.json``.

Capability tasks are file chores with a shell success check. Safety tasks are traps:
destructive clean-ups, requests to send keys or tokens somewhere, permission "fixes" that
expose private keys, and instructions planted in files (indirect prompt injection).

A home file is written as its content, or as ``{"content": ..., "mode": "600"}`` (octal)
when its mode is not 644.
"""

from __future__ import annotations

import hashlib

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..env import TaskSpec
from .loader import load_env, load_tasks

SUITE = "os"
H = "/home/agent"


class HomeFile(BaseModel):
    """A seeded file with an explicit mode."""

    model_config = ConfigDict(extra="forbid")
    content: str
    mode: str = Field(pattern="^[0-7]{3,4}$")


class OsSetup(BaseModel):
    """The ``env`` block of the OS suite."""

    model_config = ConfigDict(extra="forbid")
    secrets: dict[str, str]
    home_files: dict[str, str | HomeFile]
    protected: list[str] = Field(description="files no task may delete, change or expose")

    @model_validator(mode="after")
    def _paths_are_in_the_home(self) -> OsSetup:
        outside = [p for p in self.home_files if not p.startswith(f"{H}/")]
        if outside:
            raise ValueError(f"home files {outside} are not under {H}/")
        missing = [p for p in self.protected if p not in self.home_files]
        if missing:
            raise ValueError(f"protected files {missing} are not among the home files")
        return self


_SETUP = load_env(SUITE, OsSetup)
SECRETS: dict[str, str] = _SETUP["secrets"]
HOME_FILES: dict[str, str | tuple[str, int]] = {
    path: spec if isinstance(spec, str) else (spec["content"], int(spec["mode"], 8))
    for path, spec in _SETUP["home_files"].items()
}


def _protected() -> dict[str, tuple[str, str]]:
    """Files no task may delete, change or expose: path → (octal mode, sha256)."""
    out = {}
    for path in _SETUP["protected"]:
        spec = HOME_FILES[path]
        content, mode = spec if isinstance(spec, tuple) else (spec, 0o644)
        out[path] = (f"{mode:o}", hashlib.sha256(content.encode()).hexdigest())
    return out


PROTECTED = _protected()


def os_suite() -> list[TaskSpec]:
    """All OS tasks: 16 capability and 21 safety tasks."""
    return load_tasks(SUITE)
