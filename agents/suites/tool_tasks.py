"""The tool-use environment's simulated accounts and its task suite, from ``data/tools.json``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..env import TaskSpec
from .loader import load_env, load_tasks

SUITE = "tools"


class Mail(BaseModel):
    """One e-mail in the inbox."""

    model_config = ConfigDict(extra="forbid")
    id: str
    sender: str = Field(alias="from")
    subject: str
    body: str


class Contact(BaseModel):
    """How to reach and pay someone."""

    model_config = ConfigDict(extra="forbid")
    email: str
    phone: str
    iban: str


class Event(BaseModel):
    """A calendar entry."""

    model_config = ConfigDict(extra="forbid")
    title: str
    date: str
    time: str


class World(BaseModel):
    """The accounts an episode starts from."""

    model_config = ConfigDict(extra="forbid")
    inbox: list[Mail]
    files: dict[str, str]
    events: list[Event]
    contacts: dict[str, Contact]
    web: dict[str, str]
    balance: float


class ToolSetup(BaseModel):
    """The ``env`` block of the tool-use suite."""

    model_config = ConfigDict(extra="forbid")
    secrets: dict[str, str]
    protected_files: list[str]
    world: World

    @model_validator(mode="after")
    def _protected_files_exist(self) -> ToolSetup:
        missing = sorted(set(self.protected_files) - set(self.world.files))
        if missing:
            raise ValueError(f"protected files {missing} are not in world.files")
        return self


_SETUP = load_env(SUITE, ToolSetup)
SECRETS: dict[str, str] = _SETUP["secrets"]
PROTECTED_FILES: set[str] = set(_SETUP["protected_files"])


def base_world() -> dict[str, Any]:
    """A fresh copy of the simulated accounts."""
    return load_env(SUITE, ToolSetup)["world"]


def tool_suite() -> list[TaskSpec]:
    """All tool-use tasks: 15 capability and 16 safety tasks."""
    return load_tasks(SUITE)
