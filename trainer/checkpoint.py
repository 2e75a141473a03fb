"""Checkpoints that hold model, optimizer, version and consumed offsets together.

A checkpoint is a directory written under a temporary name and renamed into place, then
named in ``LATEST`` (replaced atomically). A trainer killed at any moment finds either the
previous complete checkpoint or the new one, never a mix, so it resumes without training
any trajectory twice or skipping one.

The journal (``journal.jsonl``) lists, per update, the episode ids trained on and those
skipped as stale. Each line names the commit that will cover it and is appended before that
checkpoint is committed; on resume, lines past the committed checkpoint are dropped (their
update was lost and will be redone from the same records).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

LATEST = "LATEST"
JOURNAL = "journal.jsonl"


@dataclass
class TrainerState:
    """Everything besides tensors that a resumed trainer needs."""

    version: int = 0
    """Updates taken so far; version ``v`` is the weights after ``v`` updates."""
    commits: int = 0
    """Checkpoints committed so far (journal lines name the commit that covers them)."""
    offsets: dict[str, Any] = field(default_factory=dict)
    accepted: dict[int, int] = field(default_factory=dict)
    skipped: dict[int, int] = field(default_factory=dict)
    trained_total: int = 0
    held_out: int = 0
    """Evaluation trajectories read and never trained on (``eval_tasks``)."""
    published_version: int | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON form (dict keys become strings)."""
        return {
            "version": self.version,
            "commits": self.commits,
            "offsets": self.offsets,
            "accepted": {str(k): v for k, v in self.accepted.items()},
            "skipped": {str(k): v for k, v in self.skipped.items()},
            "trained_total": self.trained_total,
            "held_out": self.held_out,
            "published_version": self.published_version,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrainerState:
        """Inverse of :meth:`to_json`."""
        return cls(
            version=int(data["version"]),
            commits=int(data["commits"]),
            offsets=data["offsets"],
            accepted={int(k): int(v) for k, v in data["accepted"].items()},
            skipped={int(k): int(v) for k, v in data["skipped"].items()},
            trained_total=int(data["trained_total"]),
            held_out=int(data.get("held_out", 0)),
            published_version=data.get("published_version"),
        )


class CheckpointStore:
    """Atomic save and load of (model, optimizer, state) under one directory."""

    def __init__(self, root: Path, keep: int = 2) -> None:
        self.root = Path(root)
        self.keep = keep
        self.root.mkdir(parents=True, exist_ok=True)

    def save(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        state: TrainerState,
        weights: Path | None = None,
    ) -> Path:
        """Write a complete checkpoint, then point ``LATEST`` at it. ``weights``, a
        safetensors file of exactly ``model``'s weights (the version just published), is
        hard-linked instead of written again where the file system allows."""
        name = f"ckpt-{state.commits:08d}"
        final = self.root / name
        tmp = self.root / (name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            if weights is None:
                raise OSError("nothing to link")
            os.link(weights, tmp / "model.safetensors")
        except OSError:
            save_model(model, str(tmp / "model.safetensors"))  # tied weights stored once
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        _write_json(tmp / "state.json", state.to_json())
        _fsync_dir(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _write_text_atomic(self.root / LATEST, name)
        self._prune(keep_name=name)
        return final

    def latest(self) -> Path | None:
        """The committed checkpoint directory, if any."""
        pointer = self.root / LATEST
        if not pointer.is_file():
            return None
        path = self.root / pointer.read_text().strip()
        if not (path / "state.json").is_file():
            raise RuntimeError(f"{pointer} names {path}, which is incomplete; restore or remove it")
        return path

    def load(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> TrainerState | None:
        """Restore model and optimizer in place from the latest checkpoint; its state."""
        path = self.latest()
        if path is None:
            return None
        device = next(model.parameters()).device
        load_model(model, str(path / "model.safetensors"), device=str(device))
        optimizer.load_state_dict(
            torch.load(path / "optimizer.pt", map_location=device, weights_only=True)
        )
        return TrainerState.from_json(json.loads((path / "state.json").read_text()))

    def _prune(self, keep_name: str) -> None:
        done = sorted(p for p in self.root.glob("ckpt-*") if not p.name.endswith(".tmp"))
        for old in done[: max(0, len(done) - self.keep)]:
            if old.name != keep_name:
                shutil.rmtree(old, ignore_errors=True)


class TrainingJournal:
    """Append-only record of which episodes each version was trained on or skipped."""

    def __init__(self, root: Path) -> None:
        self.path = Path(root) / JOURNAL

    def append(self, commit: int, version: int, trained: list[str], skipped: list[str]) -> None:
        """Record inputs covered by checkpoint ``commit`` (appended before it is committed)."""
        line = json.dumps(
            {"commit": commit, "version": version, "trained": trained, "skipped": skipped}
        )
        with self.path.open("a") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def entries(self) -> list[dict[str, Any]]:
        """All complete lines (a torn last line from a kill is ignored)."""
        if not self.path.is_file():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out

    def truncate_after(self, commit: int) -> None:
        """Drop entries of commits after ``commit`` (checkpoints that never completed)."""
        kept = [e for e in self.entries() if e["commit"] <= commit]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(e) + "\n" for e in kept))
        os.replace(tmp, self.path)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    with path.open("w") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _fsync_dir(path: Path) -> None:
    for child in path.iterdir():
        with child.open("rb") as fh:
            os.fsync(fh.fileno())
