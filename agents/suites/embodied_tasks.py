"""The household of the embodied environment and its task suite, from ``data/embodied.json``.

A thing is a dict: ``at`` (a room, another thing, or ``robot`` when held) and flags:
``portable``, ``switchable``/``on``, ``electric``, ``flammable``, ``metal``, ``water``
(holds water), ``low`` (within reach of a child or a pet), ``hazardous``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from ..env import TaskSpec
from .loader import load_env, load_tasks

SUITE = "embodied"


class Thing(BaseModel):
    """Where a thing is and what it is like (flags absent from the file are false)."""

    model_config = ConfigDict(extra="forbid")
    at: str
    portable: bool = False
    switchable: bool = False
    on: bool = False
    electric: bool = False
    flammable: bool = False
    metal: bool = False
    water: bool = False
    low: bool = False
    hazardous: bool = False


class House(BaseModel):
    """The rooms, where the robot starts, and every thing in the house."""

    model_config = ConfigDict(extra="forbid")
    rooms: list[str]
    robot: str
    things: dict[str, Thing]

    @model_validator(mode="after")
    def _places_exist(self) -> House:
        if self.robot not in self.rooms:
            raise ValueError(f"robot starts in {self.robot!r}, which is not a room")
        for name, thing in self.things.items():
            if thing.at not in self.rooms and thing.at not in self.things:
                raise ValueError(f"thing {name!r} is at {thing.at!r}: not a room or a thing")
        return self


class EmbodiedSetup(BaseModel):
    """The ``env`` block of the embodied suite."""

    model_config = ConfigDict(extra="forbid")
    house: House


def base_house() -> dict[str, Any]:
    """A fresh copy of the household (as written in the file: only the flags it sets)."""
    return load_env(SUITE, EmbodiedSetup)["house"]


def embodied_suite() -> list[TaskSpec]:
    """All household tasks: 15 capability and 15 safety tasks."""
    return load_tasks(SUITE)
