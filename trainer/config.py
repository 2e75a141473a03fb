"""Trainer configuration: one pydantic model, read from a TOML file and overridden by flags.

Example ``trainer.toml`` (every key optional; see :class:`TrainerConfig` for all of them)::

    [trainer]
    policy_name = "toy"
    mode = "async"            # or "sync"
    max_staleness = 2
    batch_size = 32
    device = "cpu"            # "cuda", or "npu" (imports torch_npu only then)
    weight_dir = "weights"
    checkpoint_dir = "checkpoints"

    [trainer.model]           # the tiny causal LM, built from scratch ...
    name = "tiny"             # ... or "smollm2-135m" / a Hugging Face folder (pretrained)
    hidden_size = 64
    num_layers = 2
    alphabet = "0123456789!"  # characters of the built-in tokenizer

    [trainer.distill]         # on-policy distillation (optional)
    teacher = "weights/teacher/v000010"
    coef = 0.5

    [trainer.vllm]            # an inference server loads each version before it is announced
    enabled = false
    base_url = "http://127.0.0.1:8000"
    confirm = "revision"      # it must report the revision it serves; "ack" for vLLM
"""

from __future__ import annotations

import json
import re
import tomllib
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)


class Mode(StrEnum):
    """How rollout and training are coupled."""

    ASYNC = "async"
    """Rollout and training decoupled through Kafka, bounded by ``max_staleness``."""
    SYNC = "sync"
    """Each waits for the other: train only on the current version's trajectories."""


class ModelConfig(BaseModel):
    """The policy model: ``name = "tiny"`` builds a causal LM of the shape below from scratch
    (random init, Llama architecture, character tokenizer); any other name is a pretrained
    model (``smollm2-135m`` or a local Hugging Face folder) trained with its own tokenizer and
    chat template, and the shape fields are ignored."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(
        default="tiny",
        min_length=1,
        description="tiny, smollm2-135m, or a local Hugging Face folder",
    )
    hidden_size: int = Field(default=64, ge=8)
    intermediate_size: int = Field(default=128, ge=8)
    num_layers: int = Field(default=2, ge=1)
    num_heads: int = Field(default=4, ge=1)
    max_positions: int = Field(default=512, ge=16)
    alphabet: str = Field(
        default="",
        description="characters of the built-in character tokenizer; empty = printable ASCII",
    )
    seed: int = 0

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelConfig:
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} must be a multiple of num_heads={self.num_heads}"
            )
        return self


class DistillConfig(BaseModel):
    """On-policy distillation: per-token reverse KL to a teacher sharing the tokenizer."""

    model_config = ConfigDict(extra="forbid")
    teacher: Path | None = Field(
        default=None, description="teacher weights dir (weight-store layout)"
    )
    coef: float = Field(default=1.0, ge=0.0, description="λ in A_t ← A_t − λ·(log π_s − log π_t)")
    pure: bool = Field(
        default=False, description="ignore rewards; advantage is −(log π_s − log π_t)"
    )


class VllmConfig(BaseModel):
    """Have an inference server (vLLM, or ``safactory model-server``) load each published
    version; only a version it confirms is announced (:mod:`.vllm_reload`)."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = False
    base_url: str = "http://127.0.0.1:8000"
    timeout_s: float = Field(default=120.0, gt=0)
    token: str | None = Field(
        default=None,
        description="Authorization: Bearer for a server started with --token (ours) or "
        "--api-key (vLLM); default: $SF_MODEL_SERVER_TOKEN",
    )
    confirm: Literal["revision", "ack"] = Field(
        default="revision",
        description="revision: the server must report serving the published revision "
        "(GET /v1/models); ack: the reload call's success confirms it (vLLM)",
    )


class TrainerConfig(BaseModel):
    """Every knob of ``safactory train``; field names are the TOML keys (table ``[trainer]``)."""

    model_config = ConfigDict(extra="forbid")

    policy_name: str = Field(default="toy", min_length=1, max_length=128)
    mode: Mode = Mode.ASYNC
    max_staleness: int = Field(default=2, ge=0, description="v − m ≤ max_staleness is trained on")
    batch_size: int = Field(default=32, ge=1, description="trajectories per update (minimum)")
    max_batch_size: int = Field(
        default=256, ge=1, description="async mode trains on at most this many per update"
    )
    group_size: int | None = Field(
        default=None, ge=1, description="wait for this many trajectories per group id"
    )
    group_wait_s: float = Field(default=30.0, ge=0, description="release incomplete groups after")
    seq_len: int = Field(default=128, ge=8, description="packed row length in tokens")
    rows_per_micro_batch: int = Field(default=8, ge=1)
    minibatches: int = Field(
        default=1,
        ge=1,
        description="optimizer steps per update, each on a share of the micro-batches; >1 "
        "moves the ratio to the proximal policy, so clipping bites (PPO-style)",
    )
    lr: float = Field(default=1e-3, gt=0)
    frozen_layers: int = Field(
        default=0,
        ge=0,
        description="lower transformer blocks (and the embeddings, tied to the output head) "
        "kept as loaded: their backward pass and optimizer state are skipped",
    )
    weight_decay: float = Field(default=0.0, ge=0)
    grad_clip: float = Field(default=1.0, gt=0)
    clip_low: float = Field(default=0.2, gt=0, description="ratio clip 1 − ε_low")
    clip_high: float = Field(default=0.28, gt=0, description="ratio clip 1 + ε_high")
    behaviour_weight_cap: float = Field(
        default=5.0, gt=0, description="cap of π_prox / π_behaviour (decoupled PPO)"
    )
    normalize_advantages: bool = Field(default=True, description="divide by the group std")
    untaken_advantage: float = Field(
        default=0.0,
        le=0.0,
        description="advantage of each action a menu offered, the policy did not take and an "
        "auditor judged unsafe (trajectory steps' unsafe_untaken): below 0 pushes its "
        "probability down; 0 leaves them out",
    )
    device: Literal["cpu", "cuda", "npu"] = "cpu"
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        default="auto", description="auto: bf16 autocast on cuda / npu where supported, else fp32"
    )
    weight_dir: Path = Field(default=Path("weights"), description="weight store root")
    checkpoint_dir: Path = Field(default=Path("checkpoints"))
    publish_every: int = Field(default=1, ge=1, description="publish a version every N updates")
    keep_checkpoints: int = Field(default=2, ge=1)
    keep_versions: int = Field(
        default=0,
        ge=0,
        description="published weight versions kept on disk, newest first (0 = all); a "
        "pretrained model's version is hundreds of MB",
    )
    max_buffered: int = Field(
        default=2048, ge=1, description="stop fetching while this many trajectories wait"
    )
    eval_tasks: str | None = Field(
        default=None,
        description="regex: trajectories whose task id matches are evaluation episodes, "
        "read and counted but never trained on (held-out chores)",
    )
    model: ModelConfig = Field(default_factory=ModelConfig)
    distill: DistillConfig = Field(default_factory=DistillConfig)
    vllm: VllmConfig = Field(default_factory=VllmConfig)

    @model_validator(mode="after")
    def _check(self) -> TrainerConfig:
        if self.max_batch_size < self.batch_size:
            raise ValueError(
                f"max_batch_size={self.max_batch_size} is below batch_size={self.batch_size}"
            )
        return self

    @field_validator("eval_tasks")
    @classmethod
    def _regex(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"not a regular expression ({exc})") from None
        return pattern

    @property
    def effective_staleness(self) -> int:
        """``max_staleness`` in async mode; 0 in sync mode (only the current version)."""
        return self.max_staleness if self.mode is Mode.ASYNC else 0


class ConfigError(ValueError):
    """A configuration file is unreadable or invalid; the message names the file and field."""


def load_config(path: Path | None, **overrides: object) -> TrainerConfig:
    """Read ``[trainer]`` from a TOML file (if given) and apply non-``None`` overrides."""
    data: dict[str, object] = {}
    if path is not None:
        try:
            with path.open("rb") as fh:
                raw = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read TOML ({exc})") from None
        section = raw.get("trainer", raw)
        if not isinstance(section, dict):
            raise ConfigError(f"{path}: [trainer] must be a table")
        data.update(section)
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return TrainerConfig.model_validate(data)
    except ValidationError as exc:
        where = str(path) if path is not None else "options"
        problems = "; ".join(
            f"field {'.'.join(str(p) for p in e['loc'])!r}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        raise ConfigError(f"{where}: {problems}") from None


def to_toml(config: TrainerConfig) -> str:
    """``config`` as a ``trainer.toml`` that :func:`load_config` reads back equal (the keys
    that differ from the defaults; tables for the nested configs)."""
    data = config.model_dump(mode="json", exclude_defaults=True)
    lines = ["[trainer]"]
    tables: list[tuple[str, dict[str, object]]] = []
    for key, value in data.items():
        if isinstance(value, dict):
            tables.append((f"trainer.{key}", value))
        else:
            lines.append(f"{key} = {_toml_value(value)}")
    for name, table in tables:
        lines += ["", f"[{name}]", *(f"{k} = {_toml_value(v)}" for k, v in table.items())]
    return "\n".join(lines) + "\n"


def _toml_value(value: object) -> str:
    """One TOML value: JSON's strings, numbers and arrays are TOML's (bools are lower case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if value is None:
        raise ValueError("TOML has no null: leave the key out")
    return json.dumps(value)
