"""Exploration from safety anchors: where an action is flagged, try K others from that state.

Reinforcement learning only suppresses what the policy happens to try. When the guard or
the flagger (the auditor's fast tier, asked before each action, observing only) flags a
proposed action, the runner has the environment's checkpoint from just before it (the
*anchor*); once the episode ends it restores that anchor into K fresh environments
(:meth:`Environment.branch`) and samples one alternative continuation in each, with seeds
of their own. Each branch is an episode of its own on the topics, naming its parent and the
step it replaces (``EpisodeStarted.parent_episode_id``, ``branch_step``); its prompt is the
conversation up to the anchor, and its steps are numbered from ``branch_step``. The K
siblings share a group id (:func:`anchor_group`), so the assembler and the trainer compare
them with each other for advantages (GRPO): the same state, different actions.

Only the first flagged step of an episode is branched, branches are not branched again, and
an episode with an attack plan is not branched (its injector's state is not forked).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schemas import ChatMessage, Decision, ToolSchema, derive_id
from .env import Anchor
from .guard import Guard

PRODUCER = "explore"
PRODUCER_VERSION = 1


@dataclass(frozen=True)
class Exploration:
    """Branch ``branches`` alternatives at the first flagged step of an episode."""

    branches: int
    flagger: Guard | None = None
    """Asked about every proposed action; a decision other than allow flags it (the action
    still runs unless the runner's guard blocks it). None: only the guard flags."""


@dataclass(frozen=True)
class Flagged:
    """The anchor before a flagged action, and the conversation as it was then."""

    step_index: int
    anchor: Anchor
    messages: list[ChatMessage]
    observation: str
    tools: list[ToolSchema]
    choices: list[str]
    reasons: list[str]


def flags(decision: Decision | None) -> bool:
    """Whether a guard's decision flags an action (anything but allow)."""
    return decision is not None and decision is not Decision.ALLOW


def branch_id(parent_episode_id: str, step_index: int, branch: int) -> str:
    """The episode id of one branch (the same on a re-run of the same parent)."""
    return derive_id(PRODUCER, PRODUCER_VERSION, parent_episode_id, step_index, branch)


def branch_seed(seed: int, branch: int) -> int:
    """The sampling seed of one branch: its own, so siblings try different actions."""
    return int(derive_id(PRODUCER, PRODUCER_VERSION, "seed", seed, branch)[:8], 16)


def anchor_group(parent_episode_id: str, step_index: int) -> str:
    """The group id the siblings of one anchor share."""
    return f"{parent_episode_id}@{step_index}"
