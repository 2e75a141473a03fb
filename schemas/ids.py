"""Event ids: random for primary facts, deterministic for derived ones (DESIGN.md).

A processor that re-emits after a restart must emit the same id, so sinks can deduplicate;
derived ids therefore hash the input event ids together with the producer's name and version.
"""

from __future__ import annotations

import hashlib
import uuid


def new_id() -> str:
    """A fresh random id for a primary event (an agent step, a task)."""
    return uuid.uuid4().hex


def derive_id(producer: str, version: str | int, *inputs: str | int) -> str:
    """Deterministic id of an event derived by ``producer``@``version`` from ``inputs``."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{producer}@{version}".encode())
    for item in inputs:
        digest.update(b"\x1f")
        digest.update(str(item).encode())
    return digest.hexdigest()


def step_id(episode_id: str, step_index: int) -> str:
    """Id of step ``step_index`` of an episode: re-publishing a step yields the same id."""
    return derive_id("step", 1, episode_id, step_index)
