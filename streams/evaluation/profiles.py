"""What a demo run is asked to do: each ``--model``'s profile (its defaults, how its policy
samples, its trainer settings) and one run's options (``streams/evaluation/loop.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .rounds import HELD_OUT


@dataclass(frozen=True)
class Profile:
    """What the demo runs for one ``--model``: its defaults and how the policy samples."""

    model: str
    rounds: int
    episodes: int
    lr: float
    max_new_tokens: int
    decode: str
    """The simulation worker's ``--decode``: auto chooses among the menu's commands."""
    shuffle: bool
    """Shuffle each menu by the episode seed (a policy must read the commands)."""
    trainer: dict[str, Any]
    """Trainer settings for this model (``TrainerConfig`` fields; a run's:
    :meth:`trainer_fields`)."""
    threads: int
    """Torch threads of the simulate and train workers (they mostly take turns)."""
    skills: int
    """Skills injected per task in the injection-only round (0: no such round)."""

    def trainer_fields(
        self, workdir: Path, episodes: int, lr: float, labels: str
    ) -> dict[str, Any]:
        """The trainer's settings (``TrainerConfig`` fields) for a run in ``workdir``: one
        update per training round of ``episodes``, evaluated on the held-out chores; a
        character tokenizer is given the menu's ``labels`` to spell."""
        fields = self.trainer
        if fields["model"]["name"] == "tiny":
            fields = fields | {"model": fields["model"] | {"alphabet": labels}}
        return fields | {
            "mode": "async",
            "max_staleness": 1,
            "batch_size": episodes,
            "max_batch_size": episodes,
            "lr": lr,
            "eval_tasks": HELD_OUT,
            "weight_dir": workdir / "weights",
            "checkpoint_dir": workdir / "checkpoints",
        }


PROFILES = {
    "smollm2-135m": Profile(
        model="smollm2-135m",
        rounds=5,
        episodes=24,
        lr=1e-4,
        max_new_tokens=16,
        decode="auto",
        shuffle=True,
        trainer={
            "seq_len": 512,
            "rows_per_micro_batch": 2,
            "minibatches": 1,
            "keep_checkpoints": 1,
            "keep_versions": 2,
            "frozen_layers": 8,
            "model": {"name": "smollm2-135m"},
        },
        threads=2,
        skills=3,
    ),
    "tiny": Profile(
        model="tiny",
        rounds=5,
        episodes=24,
        lr=0.02,
        max_new_tokens=1,
        decode="free",
        shuffle=False,
        trainer={
            "seq_len": 384,
            "minibatches": 2,
            "model": {
                "name": "tiny",
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_layers": 2,
                "num_heads": 4,
                "max_positions": 512,
            },
        },
        threads=1,
        skills=1,
    ),
}


@dataclass(frozen=True)
class DemoOptions:
    """The knobs of one run (the command's options)."""

    profile: Profile
    episodes: int
    rounds: int
    seed: int
    lr: float
    concurrency: int
    stage_timeout: float
    verdict_wait: float
    embed: bool
    keep_running: bool
    skills: int

    @classmethod
    def of(
        cls,
        profile: Profile,
        episodes: int | None,
        rounds: int | None,
        lr: float | None,
        skills: int | None,
        **given: Any,
    ) -> DemoOptions:
        """The options given, with the profile's defaults where one is None."""
        return cls(
            profile,
            episodes=episodes or profile.episodes,
            rounds=rounds or profile.rounds,
            lr=profile.lr if lr is None else lr,
            skills=profile.skills if skills is None else skills,
            **given,
        )
