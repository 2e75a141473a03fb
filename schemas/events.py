"""Pydantic models for every Safactory event (DESIGN.md, "Topics").

Events are facts: appended, never updated. Each model names its schema (``sf-schema``),
the catalogue topic it goes to, and the record key that keeps related events in order.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, model_validator

from .chat import ChatMessage, ToolCall
from .ids import new_id, step_id

WIRE_CONFIG = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan="constants")
"""Every event model's config. Non-finite floats (a ``-inf`` logprob, a ``nan`` reward) are
written as the JSON constants ``NaN``/``Infinity``, which decoding reads back; the default
(``null``) made such an event encode fine and then fail to decode everywhere."""


class Event(BaseModel):
    """Base of every event: an id, when it was produced, and an optional trace id."""

    model_config = WIRE_CONFIG

    SCHEMA_NAME: ClassVar[str]
    SCHEMA_VERSION: ClassVar[int] = 1
    READS_VERSIONS: ClassVar[tuple[int, ...]] = ()
    """Earlier versions of this schema the model still decodes: a version only adds optional
    fields, so an old record validates as the new model with the defaults (an old reader
    meets the new version's ``sf-schema`` and dead-letters it as unknown, saying so,
    instead of failing on a field it has never heard of)."""
    TOPIC: ClassVar[str]
    """Catalogue name of the topic (``steps`` → ``sf.steps`` by default)."""

    event_id: str = Field(default_factory=new_id, min_length=1, max_length=128)
    produced_at: float = Field(default_factory=time.time, ge=0)
    trace_id: str | None = Field(default=None, max_length=64)

    @classmethod
    def schema_id(cls) -> str:
        """The ``sf-schema`` header value, e.g. ``step/1``."""
        return f"{cls.SCHEMA_NAME}/{cls.SCHEMA_VERSION}"

    @classmethod
    def schema_ids(cls) -> tuple[str, ...]:
        """Every ``sf-schema`` value this model decodes: its own, then :attr:`READS_VERSIONS`."""
        return (cls.schema_id(), *(f"{cls.SCHEMA_NAME}/{v}" for v in cls.READS_VERSIONS))

    def key(self) -> str:
        """Record key; events of one episode share a key and so a partition."""
        return self.event_id

    def header_policy_version(self) -> int | None:
        """Value for ``sf-policy-version``, where the event has one."""
        return getattr(self, "policy_version", None)

    def header_episode(self) -> str | None:
        """Value for ``sf-episode``, where the event belongs to an episode."""
        return getattr(self, "episode_id", None)

    def header_env(self) -> str | None:
        """Value for ``sf-env``, where the event names an environment."""
        return getattr(self, "env", None)


class EpisodeEvent(Event):
    """An event keyed by its episode id."""

    episode_id: str = Field(min_length=1, max_length=128)

    def key(self) -> str:
        return self.episode_id


# --------------------------------------------------------------------------- tasks


class AttackPlan(BaseModel):
    """What to inject into an episode, and where (ground truth for the auditor)."""

    model_config = WIRE_CONFIG
    injector: str
    at_step: NonNegativeInt | None = None
    params: dict[str, Any] = Field(default_factory=dict)


class Task(Event):
    """Work for a simulation worker."""

    SCHEMA_NAME: ClassVar[str] = "task"
    TOPIC: ClassVar[str] = "tasks"

    task_id: str = Field(min_length=1, max_length=128)
    env: str = Field(min_length=1, max_length=64)
    spec: dict[str, Any] = Field(default_factory=dict, description="environment-specific task")
    seed: int = 0
    group_id: str | None = Field(default=None, max_length=128)
    attack: AttackPlan | None = None
    policy: str | None = Field(default=None, description="policy name to run, if not the worker's")

    def key(self) -> str:
        return self.task_id


# --------------------------------------------------------------------------- steps


class Action(BaseModel):
    """What the agent did: free text, a tool call, or both."""

    model_config = WIRE_CONFIG
    text: str | None = None
    tool_call: ToolCall | None = None


class Injection(BaseModel):
    """Ground truth of an attack injected into this step's observation or tool output."""

    model_config = WIRE_CONFIG
    injector: str
    kind: str = Field(description="e.g. indirect_prompt_injection, jailbreak, misleading")
    location: str = Field(description="where: observation, tool_result, user_message")
    payload: str
    goal: str | None = Field(default=None, description="what the attacker wants done")


class Timing(BaseModel):
    """Wall-clock timing of one step, in milliseconds."""

    model_config = WIRE_CONFIG
    started_at: float = Field(ge=0, description="unix seconds")
    policy_ms: float = Field(default=0.0, ge=0)
    env_ms: float = Field(default=0.0, ge=0)


class Step(EpisodeEvent):
    """One agent step: observation in, action out, tool result back."""

    SCHEMA_NAME: ClassVar[str] = "step"
    SCHEMA_VERSION: ClassVar[int] = 2
    READS_VERSIONS: ClassVar[tuple[int, ...]] = (1,)
    TOPIC: ClassVar[str] = "steps"

    event_id: str = Field(default="", max_length=128)
    step_index: NonNegativeInt
    env: str = Field(min_length=1, max_length=64)
    task_id: str = Field(min_length=1, max_length=128)
    group_id: str | None = Field(default=None, max_length=128)
    policy_version: NonNegativeInt
    observation: str | None = None
    action: Action = Field(default_factory=Action)
    tool_result: str | None = None
    messages: list[ChatMessage] = Field(
        default_factory=list, description="the turns this step added, OpenAI chat format"
    )
    token_ids: list[int] | None = Field(default=None, description="policy-generated tokens")
    logprobs: list[float] | None = Field(default=None, description="behaviour logprob per token")
    prompt_token_ids: list[int] | None = None
    injection: Injection | None = None
    reward: float | None = Field(default=None, description="immediate reward from the env")
    blocked: bool = Field(default=False, description="a guard blocked the action")
    block_reason: str | None = None
    timing: Timing | None = None
    info: dict[str, Any] = Field(default_factory=dict)
    choices: list[str] | None = Field(
        default=None,
        description="the menu the environment offered at this step (ResetOutput.choices), "
        "so an auditor can judge the actions not taken; None where the action space is free "
        "(step/2)",
    )

    @model_validator(mode="after")
    def _check(self) -> Step:
        if not self.event_id:
            object.__setattr__(self, "event_id", step_id(self.episode_id, self.step_index))
        if self.logprobs is not None and (
            self.token_ids is None or len(self.logprobs) != len(self.token_ids)
        ):
            raise ValueError("logprobs must have one entry per token id")
        return self


# --------------------------------------------------------------------------- episodes


class EpisodeStarted(EpisodeEvent):
    """An episode began."""

    SCHEMA_NAME: ClassVar[str] = "episode_started"
    SCHEMA_VERSION: ClassVar[int] = 2
    READS_VERSIONS: ClassVar[tuple[int, ...]] = (1,)
    TOPIC: ClassVar[str] = "episodes"

    task_id: str = Field(min_length=1, max_length=128)
    env: str = Field(min_length=1, max_length=64)
    group_id: str | None = Field(default=None, max_length=128)
    policy_name: str
    policy_version: NonNegativeInt
    seed: int = 0
    prompt: list[ChatMessage] = Field(default_factory=list)
    attack: AttackPlan | None = None
    skills: list[str] = Field(
        default_factory=list,
        description="ids of the skills rendered into the prompt's system turn (experience "
        "injection; the text itself is in prompt) (episode_started/2)",
    )
    parent_episode_id: str | None = Field(
        default=None,
        max_length=128,
        description="the episode this one branched from, restored to an anchor before its "
        "step branch_step (exploration) (episode_started/2)",
    )
    branch_step: NonNegativeInt | None = Field(
        default=None,
        description="the parent's step index this branch replaces: steps before it are the "
        "parent's (episode_started/2)",
    )

    @model_validator(mode="after")
    def _branch(self) -> EpisodeStarted:
        if (self.parent_episode_id is None) != (self.branch_step is None):
            raise ValueError("parent_episode_id and branch_step go together")
        return self


class Outcome(StrEnum):
    """How an episode ended."""

    SUCCESS = "success"
    FAILURE = "failure"
    TRUNCATED = "truncated"
    ERROR = "error"
    ABANDONED = "abandoned"
    HALTED = "halted"
    """Stopped from outside by a control decision (``sf.control``) (episode_ended/2)."""


class SafetyOutcome(BaseModel):
    """Ground-truth safety outcome judged by the environment from its own state."""

    model_config = WIRE_CONFIG
    unsafe: bool
    violations: list[str] = Field(default_factory=list)


class EpisodeEnded(EpisodeEvent):
    """An episode ended (or was closed as abandoned by timeout)."""

    SCHEMA_NAME: ClassVar[str] = "episode_ended"
    SCHEMA_VERSION: ClassVar[int] = 2
    READS_VERSIONS: ClassVar[tuple[int, ...]] = (1,)
    TOPIC: ClassVar[str] = "episodes"

    task_id: str = Field(min_length=1, max_length=128)
    env: str = Field(min_length=1, max_length=64)
    group_id: str | None = Field(default=None, max_length=128)
    outcome: Outcome
    task_reward: float = 0.0
    safety: SafetyOutcome | None = None
    num_steps: NonNegativeInt = 0
    policy_version: NonNegativeInt | None = None
    halted_by: list[str] = Field(
        default_factory=list,
        description="outcome halted: the verdict ids behind the control decision that "
        "stopped it (episode_ended/2)",
    )


# --------------------------------------------------------------------------- audit


class Severity(StrEnum):
    """Verdict severity, lowest first."""

    NONE = "none"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        """Order of severities: none=0 … critical=4."""
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {severity: index for index, severity in enumerate(Severity)}


class Decision(StrEnum):
    """What a verdict asks for (guard mode and alerts). ``block`` and ``warn`` only where
    the checker's precision was measured to reach its target; ``uncertain``: it found
    something, but its precision there is lower or unmeasured (escalated to the judge tier
    where one is configured); ``undecided``: a checker that could not answer in time."""

    ALLOW = "allow"
    WARN = "warn"
    BLOCK = "block"
    UNCERTAIN = "uncertain"
    UNDECIDED = "undecided"
    CHECKER_ERROR = "checker_error"

    @property
    def acted_on(self) -> bool:
        """Block or warn: a decision made where precision was measured, the only ones that
        halt, penalise or teach."""
        return self in (Decision.BLOCK, Decision.WARN)


class Evidence(BaseModel):
    """The span of text that a verdict rests on."""

    model_config = WIRE_CONFIG
    text: str
    field: str = Field(description="where: action, observation, tool_result, messages[i]")
    start: NonNegativeInt | None = None
    end: NonNegativeInt | None = None


class Verdict(EpisodeEvent):
    """A checker's judgement of one step (``step_index`` set) or a whole episode."""

    SCHEMA_NAME: ClassVar[str] = "verdict"
    SCHEMA_VERSION: ClassVar[int] = 3
    READS_VERSIONS: ClassVar[tuple[int, ...]] = (1, 2)
    TOPIC: ClassVar[str] = "verdicts"

    source_event_id: str = Field(description="the step (or episode end) event judged")
    step_index: NonNegativeInt | None = None
    env: str | None = None
    checker: str
    checker_version: str = "1"
    checker_kind: Literal["rule", "heuristic", "model", "llm_judge", "deep", "composite"] = "rule"
    risk_type: str
    severity: Severity = Severity.NONE
    score: float = Field(ge=0.0, le=1.0)
    decision: Decision = Decision.ALLOW
    probability: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="calibrated chance that the episode is unsafe given this finding: the "
        "measured precision of the checker at this score (None: nothing fired, or never "
        "measured) (verdict/3)",
    )
    evidence: list[Evidence] = Field(default_factory=list)
    reason: str | None = None
    latency_ms: float = Field(default=0.0, ge=0)
    policy_version: NonNegativeInt | None = None
    choice: NonNegativeInt | None = Field(
        default=None,
        description="index into the judged step's choices when the verdict judges an action "
        "offered and not taken (it says nothing of what the agent did); None: the step's own "
        "action (verdict/2)",
    )


class Label(Event):
    """A person's judgement of an episode (``step_index`` None) or one of its steps: safe or
    unsafe, with why. The auditor's memory of labelled cases (``streams/audit/memory.py``)
    learns from these; a later label of the same episode and step replaces an earlier one."""

    SCHEMA_NAME: ClassVar[str] = "label"
    TOPIC: ClassVar[str] = "labels"

    episode_id: str = Field(
        min_length=1, max_length=128, description="the episode, or the audited trace's id"
    )
    step_index: NonNegativeInt | None = None
    unsafe: bool
    risk_type: str = Field(default="", max_length=64)
    reason: str = Field(default="", max_length=2000)
    labeller: str = Field(min_length=1, max_length=128, description="who said so")
    answers: str | None = Field(
        default=None, max_length=128, description="the verdict this label answers, if any"
    )
    origin: str = Field(
        default="review",
        max_length=256,
        description="review (the queue), monitor (the web monitor), or import:<file>",
    )

    def key(self) -> str:
        return self.episode_id


class Alert(Verdict):
    """A verdict at or above alert severity, republished for live monitoring."""

    SCHEMA_NAME: ClassVar[str] = "alert"
    TOPIC: ClassVar[str] = "alerts"


# --------------------------------------------------------------------------- training data


class TrajectoryStep(BaseModel):
    """A step as the trainer needs it: the turns, and the policy's own tokens if recorded."""

    model_config = WIRE_CONFIG
    step_index: NonNegativeInt
    messages: list[ChatMessage] = Field(default_factory=list)
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    prompt_token_ids: list[int] | None = None
    policy_version: NonNegativeInt
    blocked: bool = False
    choices: list[str] | None = Field(
        default=None, description="the menu offered at this step (Step.choices) (trajectory/2)"
    )
    unsafe_untaken: list[NonNegativeInt] = Field(
        default_factory=list,
        description="indices of choices not taken that an auditor judged unsafe (a blocking "
        "verdict with Verdict.choice): negatives a trainer may push down (trajectory/2)",
    )


class Trajectory(EpisodeEvent):
    """An assembled, reward-complete episode ready to train on."""

    SCHEMA_NAME: ClassVar[str] = "trajectory"
    SCHEMA_VERSION: ClassVar[int] = 3
    READS_VERSIONS: ClassVar[tuple[int, ...]] = (1, 2)
    TOPIC: ClassVar[str] = "trajectories"

    group_id: str = Field(min_length=1, max_length=128)
    task_id: str
    env: str
    prompt: list[ChatMessage] = Field(default_factory=list)
    steps: list[TrajectoryStep]
    outcome: Outcome
    safety: SafetyOutcome | None = Field(
        default=None,
        description="the environment's own ground truth (EpisodeEnded.safety), when it "
        "judges safety: what confirms a lesson (trajectory/3)",
    )
    reward: float
    reward_components: dict[str, float] = Field(default_factory=dict)
    reward_rule: str = Field(default="", description="the rule that combined the components")
    verdict_ids: list[str] = Field(default_factory=list)
    completed_by: Literal["verdicts", "timeout", "abandoned"] = "verdicts"
    policy_version: NonNegativeInt = Field(description="oldest policy version in the episode")
    max_policy_version: NonNegativeInt

    def key(self) -> str:
        return self.group_id


class Score(EpisodeEvent):
    """Data-value scores of one episode's trajectory."""

    SCHEMA_NAME: ClassVar[str] = "score"
    TOPIC: ClassVar[str] = "scores"

    scorer: str
    scorer_version: str = "1"
    scores: dict[str, float]
    composite: float


class Skill(Event):
    """A distilled lesson for experience injection."""

    SCHEMA_NAME: ClassVar[str] = "skill"
    TOPIC: ClassVar[str] = "skills"

    skill_id: str = Field(min_length=1, max_length=128)
    title: str
    lesson: str
    applies_when: str = ""
    env: str | None = None
    risk_types: list[str] = Field(default_factory=list)
    source_episode_ids: list[str] = Field(default_factory=list)

    def key(self) -> str:
        return self.skill_id


class PolicyVersion(Event):
    """Announcement of new policy weights (compacted topic: the latest per policy wins)."""

    SCHEMA_NAME: ClassVar[str] = "policy_version"
    SCHEMA_VERSION: ClassVar[int] = 2
    READS_VERSIONS: ClassVar[tuple[int, ...]] = (1,)
    TOPIC: ClassVar[str] = "policy"

    policy_name: str = Field(min_length=1, max_length=128)
    policy_version: NonNegativeInt
    uri: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    base_model: str | None = None
    trained_on: NonNegativeInt = Field(default=0, description="trajectories consumed so far")
    consumed: NonNegativeInt | None = Field(
        default=None,
        description="trajectories trained on or skipped as stale so far (the "
        "workers' admission capacity counts against it); None from older trainers",
    )
    trainer_version: NonNegativeInt | None = Field(
        default=None,
        description="the trainer's newest weights when the inference server did not confirm "
        "loading them (above policy_version, which is still what is served); None when the "
        "announced version is the trainer's newest (policy_version/2)",
    )
    reload_error: str | None = Field(
        default=None,
        max_length=2000,
        description="why the inference server did not load trainer_version (policy_version/2)",
    )

    def key(self) -> str:
        return self.policy_name


class ControlCommand(StrEnum):
    """Commands sent back to running agents; an episode obeys the latest one it got."""

    HALT = "halt"
    """End the episode now (outcome ``halted``); also how a pause is denied."""
    PAUSE = "pause"
    """Take no further action until a person approves (``resume``) or denies (``halt``)."""
    RESUME = "resume"
    """Approve a paused episode: it goes on."""
    BLOCK_ACTION = "block_action"
    """Do not run the next action (the agent is told it was blocked), then go on."""


class Control(EpisodeEvent):
    """A halt / pause / guard decision sent back to an agent."""

    SCHEMA_NAME: ClassVar[str] = "control"
    SCHEMA_VERSION: ClassVar[int] = 2
    READS_VERSIONS: ClassVar[tuple[int, ...]] = (1,)
    TOPIC: ClassVar[str] = "control"

    command: ControlCommand
    reason: str = ""
    source_event_id: str | None = None
    verdict_ids: list[str] = Field(
        default_factory=list, description="the verdicts behind the decision (control/2)"
    )
    decided_by: str = Field(
        default="policy",
        max_length=128,
        description="policy (the control policy of the config), or person:<who> (an "
        "approval given in monitor or serve) (control/2)",
    )


EVENT_TYPES: tuple[type[Event], ...] = (
    Task,
    Step,
    EpisodeStarted,
    EpisodeEnded,
    Verdict,
    Alert,
    Trajectory,
    Score,
    Skill,
    PolicyVersion,
    Control,
    Label,
)
