"""The planner's training corpus, generated from the operator catalogue: request kinds
(one per thing a user asks of the factory's records: rows, counts, rates, the best, a
sample, a search, a chart, an export, a re-audit…), each said in several sentence frames,
with slots (tables, envs, risk types, checkers, versions, days, k, seeds, formats) drawn at
random and a varied lead and tail around the sentence.

Every frame list holds at least four frames; each fourth frame of every list is held out as
the **dev** set (``split="dev"``), so the dev figure measures wording the planner never
trained on. Nothing here is taken from ``tests/data/intents.jsonl``, the unseen accuracy set.

A request the planner cannot answer without guessing gets a question back instead of a
plan (:data:`ASK`): one that names no kind of record, or names an env or risk type the
database lacks.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .plan import Plan

Steps = list[dict[str, Any]]

ASK = "ask"
"""The answer's key when the planner asks back instead of planning: ``{"ask": "table"}``."""

DEV_EVERY = 4
"""Each ``DEV_EVERY``-th frame of a list (index 3, 7, …) belongs to the dev set."""

ENVS = {
    "os": ["os", "OS", "shell", "os", "terminal", "command-line", "Linux shell"],
    "tools": ["tools", "tool-use", "tools", "tool-calling", "function-calling"],
    "choice": ["choice", "multiple-choice", "choice"],
    "qa": ["qa", "QA", "question-answering", "Q&A"],
    "embodied": ["embodied", "embodied-agent"],
    "android": ["android", "Android", "mobile", "Android phone"],
}
UNKNOWN_ENVS = ["browser", "web", "robotics", "minecraft", "coding", "sql", "email", "finance"]

NOUNS = {
    "steps": [
        "steps",
        "agent steps",
        "steps",
        "actions the agents took",
        "step records",
        "agent actions",
        "step rows",
        "individual steps",
    ],
    "episodes": ["episodes", "episodes", "episode records", "episode events", "episode rows"],
    "verdicts": [
        "verdicts",
        "audit verdicts",
        "verdicts",
        "auditor verdicts",
        "findings",
        "audit decisions",
        "judgements",
        "audit results",
        "judgments",
        "auditor calls",
    ],
    "trajectories": [
        "trajectories",
        "trajectories",
        "trajectory records",
        "rollouts",
        "agent trajectories",
        "full trajectories",
    ],
    "scores": ["scores", "scorer outputs", "scores", "score records", "scoring results"],
    "skills": ["skills", "learned skills", "lessons learned", "skill records", "distilled skills"],
}
SINGULAR = {
    "steps": "step",
    "episodes": "episode",
    "verdicts": "verdict",
    "trajectories": "trajectory",
    "scores": "score",
    "skills": "skill",
}

RISKS = {  # the built-in risk types (streams/audit/risks.py), as users say them
    "destructive_operation": [
        "destructive operations",
        "destructive actions",
        "deletions",
        "irreversible deletions",
        "destructive behaviour",
    ],
    "indirect_prompt_injection": [
        "indirect prompt injection",
        "injected instructions",
        "indirect injections",
        "instructions hidden in documents",
    ],
    "direct_prompt_injection": [
        "direct prompt injection",
        "jailbreak attempts",
        "direct injections",
        "jailbreaks",
    ],
    "goal_hijack": ["goal hijacking", "hijacked goals", "goal hijacks", "hijacked tasks"],
    "harmful_content": ["harmful content", "harmful text", "harmful replies", "toxic content"],
    "privacy_leak": [
        "privacy leaks",
        "leaked personal data",
        "PII leaks",
        "personal-info leaks",
    ],
    "secret_exposure": [
        "exposed secrets",
        "secret exposure",
        "leaked credentials",
        "leaked API keys",
        "exposed passwords",
    ],
    "data_exfiltration": [
        "data exfiltration",
        "data sent out",
        "exfiltration",
        "data smuggled out",
    ],
    "privilege_escalation": [
        "privilege escalation",
        "excess privileges",
        "privilege escalations",
        "escalated permissions",
    ],
    "fraud": ["fraud", "fraudulent payments", "payment fraud", "scams"],
    "insecure_code": ["insecure code", "vulnerable code"],
    "backdoor_trigger": ["backdoor triggers", "backdoors"],
    "data_poisoning": ["data poisoning", "poisoned data", "training-data poisoning"],
    "over_refusal": [
        "over-refusal",
        "needless refusals",
        "excessive refusals",
        "overcautious refusals",
    ],
}

CHECKERS = {  # each said-form names one checker only
    "rule.pii": [
        "pii rule",
        "PII rule",
        "personal-data rule",
        "rule.pii",
        "rule that catches personal data",
        "PII detector",
    ],
    "rule.secrets": [
        "secrets rule",
        "secret-detection rule",
        "rule.secrets",
        "rule that catches leaked keys and tokens",
        "secret scanner",
    ],
    "rule.injection_markers": [
        "injection-marker rule",
        "injection markers rule",
        "rule that looks for injection markers",
        "rule.injection_markers",
    ],
    "rule.jailbreak_phrases": [
        "jailbreak-phrase rule",
        "jailbreak rule",
        "rule that matches jailbreak phrases",
        "rule.jailbreak_phrases",
    ],
    "rule.credential_exfiltration": [
        "credential-exfiltration rule",
        "rule that catches credentials being sent out",
        "credential-theft rule",
    ],
    "rule.insecure_code": [
        "insecure-code rule",
        "rule that flags insecure code",
        "rule.insecure_code",
    ],
    "harm.beyond_scope": [
        "destructive-command rule",
        "beyond-scope rule",
        "harm.beyond_scope",
        "rule that catches destructive commands",
        "out-of-scope check",
    ],
    "harm.data_leak": [
        "data-leak rule",
        "data-leak check",
        "rule that catches data leaks",
        "harm.data_leak",
    ],
    "harm.steered_action": [
        "steered-action rule",
        "steered-action check",
        "rule that catches actions steered by injected text",
        "harm.steered_action",
    ],
    "harm.unrequested_action": [
        "unrequested-action rule",
        "rule that catches actions nobody asked for",
        "unrequested-action check",
    ],
    "harm.excess_privilege": [
        "excess-privilege rule",
        "rule that catches privilege overreach",
        "excess-privilege check",
    ],
    "model.toxicity": [
        "toxicity model",
        "toxicity checker",
        "toxicity classifier",
        "model that catches toxic text",
    ],
    "model.jailbreak": ["jailbreak model", "jailbreak classifier", "model.jailbreak"],
    "deep.action_harm": [
        "deep action-harm head",
        "action-harm head",
        "deep-tier harm head",
        "deep.action_harm",
    ],
}

SEVERITIES = {  # said before the noun; each a least severity (min_severity)
    "critical": ["critical", "critical-severity", "critical-level"],
    "high": ["high severity", "high-severity", "severe", "high or critical", "serious"],
    "medium": [
        "medium severity",
        "medium-or-worse",
        "at least medium severity",
        "medium-and-up",
        "moderate-or-worse",
    ],
    "low": ["flagged", "non-trivial", "raised", "low-or-higher", "non-benign"],
}
SEVERITY_TAGS = {  # the same, in an analyst's shorthand
    "critical": ["critical only", "severity=critical", "critical severity"],
    "high": ["high+", "severity >= high", "high or critical severity"],
    "medium": ["medium+", "severity >= medium", "medium severity or worse"],
    "low": ["low+", "severity >= low", "any flagged severity"],
}

ACTS = [
    "deleting",
    "removing",
    "reading",
    "sending",
    "wiring",
    "paying",
    "granting",
    "ignoring",
    "following",
    "running",
    "emailing",
    "sharing",
    "disabling",
    "killing",
    "refusing",
    "booking",
    "dropping",
    "posting",
    "changing",
    "downloading",
    "uploading",
    "copying",
    "leaking",
    "skipping",
    "overwriting",
    "installing",
    "editing",
    "approving",
]
THINGS = [
    "a folder",
    "every file",
    "a password file",
    "an ssh key",
    "money abroad",
    "an unknown account",
    "admin rights",
    "the user's instruction",
    "a web page's orders",
    "a script from the internet",
    "customer records",
    "a private note",
    "the firewall",
    "all processes",
    "a harmless request",
    "a flight",
    "a database table",
    "the logs",
    "a secret token",
    "a stranger's invoice",
    "the backups",
    "medical records",
    "a calendar invite",
    "the production config",
    "a refund",
]
TAILS_OF_ACTS = [
    "",
    "",
    "",
    " without asking",
    " to a stranger",
    " by mistake",
    " twice",
    " on the server",
    " for a customer",
]


def query(d: Draw) -> str:
    """A search phrase: an act on a thing, sometimes with a manner (copied into the plan)."""
    return f"{d.one(ACTS)} {d.one(THINGS)}{d.one(TAILS_OF_ACTS)}"


FORMATS = {
    "csv": [
        "as csv",
        "as a CSV file",
        "to csv",
        "in CSV",
        "as a spreadsheet",
        "into a csv",
        "in csv format",
        "as comma-separated values",
        "to a .csv file",
        "as a CSV I can open in Excel",
    ],
    "parquet": [
        "as parquet",
        "to a parquet file",
        "in Parquet format",
        "into parquet",
        "as a .parquet file",
        "saved as parquet",
        "as Parquet for pandas",
    ],
    "chat_jsonl": [
        "as chat JSONL",
        "in OpenAI chat format",
        "as chat jsonl for fine-tuning",
        "as fine-tuning data",
        "as chat-format jsonl",
        "as JSONL chat records for fine-tuning",
        "as SFT data in chat format",
        "as an OpenAI fine-tuning file",
        "in chat JSONL format for training",
    ],
    "otel": [
        "as OpenTelemetry traces",
        "as OTel traces",
        "in OpenTelemetry format",
        "as OTLP traces",
        "as OpenTelemetry spans",
        "as OTel spans",
        "in OTLP/JSON",
        "as OpenTelemetry GenAI traces",
    ],
}
EXPORT_LEADS = [
    "export ",
    "save ",
    "write ",
    "dump ",
    "export ",
    "save ",
    "download ",
    "write out ",
    "send me ",
]
"""Verbs that open a request ending in an export."""
EXTENSION = {"csv": "csv", "parquet": "parquet", "chat_jsonl": "jsonl", "otel": "jsonl"}

GROUPS = {
    "env": ["env", "environment", "env", "env name"],
    "policy_version": ["policy version", "version", "policy version", "policy"],
    "risk_type": ["risk type", "kind of risk", "risk type", "risk category", "type of risk"],
    "severity": ["severity", "severity level", "severity"],
    "checker": ["checker", "check", "rule"],
    "decision": ["decision", "auditor decision", "block/warn/allow decision"],
    "outcome": ["outcome", "result", "final outcome"],
    "task_id": ["task", "task id", "task ID"],
}
PLURALS = {
    "env": "envs",
    "environment": "environments",
    "env name": "env names",
    "policy version": "policy versions",
    "version": "versions",
    "policy": "policies",
    "risk type": "risk types",
    "kind of risk": "kinds of risk",
    "risk category": "risk categories",
    "type of risk": "types of risk",
    "severity": "severities",
    "severity level": "severity levels",
    "checker": "checkers",
    "check": "checks",
    "rule": "rules",
    "decision": "decisions",
    "auditor decision": "auditor decisions",
    "block/warn/allow decision": "block/warn/allow decisions",
    "outcome": "outcomes",
    "result": "results",
    "final outcome": "final outcomes",
    "task": "tasks",
    "task id": "task ids",
    "task ID": "task IDs",
}
"""The plural of each group's name ("kinds of risk", not "kind of risks")."""
GROUPABLE = {
    "steps": ["env", "policy_version", "task_id"],
    "episodes": ["env", "policy_version", "task_id"],
    "verdicts": ["env", "policy_version", "risk_type", "severity", "checker", "decision"],
    "trajectories": ["env", "policy_version", "outcome", "task_id"],
}
MEANS = {  # table: (column, how it is said)
    "trajectories": [("reward", ["reward", "return"]), ("num_steps", ["length", "step count"])],
    "episodes": [("task_reward", ["task reward", "reward"]), ("num_steps", ["length"])],
    "verdicts": [("score", ["score", "risk score"])],
}
RATES = {  # (table, column, where-filter or None, how it is said)
    "unsafe": ("episodes", "unsafe", ("kind", "ended"), ["unsafe", "unsafe episodes"]),
    "blocked": ("steps", "blocked", None, ["blocked steps", "blocking"]),
    "injected": ("steps", "injected", None, ["injected steps", "planted injections"]),
}
NUMBERS = {
    1: "one",
    2: "two",
    3: "three",
    4: "four",
    5: "five",
    10: "ten",
    20: "twenty",
    6: "six",
    7: "seven",
    8: "eight",
    9: "nine",
    12: "twelve",
    15: "fifteen",
    30: "thirty",
    50: "fifty",
    100: "one hundred",
}
"""Counts said in words (only words :mod:`.grounding` reads back as the same number)."""

LEADS = [
    "",
    "",
    "",
    "show ",
    "show me ",
    "list ",
    "give me ",
    "get ",
    "find ",
    "I want ",
    "I need ",
    "fetch ",
    "return ",
    "pull ",
    "can you get me ",
    "please show ",
    "could you show me ",
    "can you list ",
    "I'd like ",
    "let me see ",
    "pull up ",
    "grab ",
    "display ",
    "I'm looking for ",
    "we need ",
]
UNLED = {
    "which",
    "what",
    "how",
    "draw",
    "pick",
    "sample",
    "score",
    "judge",
    "rerun",
    "re-audit",
    "reaudit",
    "audit",
    "attach",
    "combine",
    "bin",
    "show",
    "deduplicate",
    "drop",
    "remove",
    "search",
    "find",
    "check",
    "export",
    "chart",
    "plot",
    "break",
    "count",
    "give",
    "randomly",
    "rank",
    "run",
    "re-judge",
    "per",
    "list",
    "get",
    "pull",
    "fetch",
    "grab",
    "can",
    "could",
    "I",
    "I'd",
    "I'm",
    "tally",
    "visualise",
    "visualize",
    "graph",
    "make",
    "bar",
    "split",
    "group",
    "for",
    "in",
    "compute",
    "dedupe",
    "filter",
    "collapse",
    "look",
    "choose",
    "shuffle",
    "just",
    "using",
    "with",
    "redo",
    "re-run",
    "re-evaluate",
    "send",
    "scan",
    "detect",
    "join",
    "merge",
    "bucket",
    "are",
    "do",
    "did",
    "sort",
    "order",
    "compare",
    "semantic",
    "dump",
    "by",
    "rate",
    "tabulate",
    "select",
    "keep",
    "return",
    "save",
    "download",
    "write",
    "highest",
    "lowest",
    "assess",
    "seed",
    "link",
    "summarize",
    "what's",
    "on",
    "histogram:",
    "out",
}
UNLED |= set(ACTS)  # a search phrase may open the sentence
"""First words of a sentence that takes no lead ("show me draw 5…" reads wrong)."""
QUESTIONS = ("which", "what", "how", "can you", "could you", "do ", "are ", "did ", "is ")
"""How a sentence that may end in a question mark begins."""
TAILS = ["", "", "", "", " please", ".", " for me", " thanks", ", thanks", " if you can"]


@dataclass(frozen=True)
class Pair:
    """One training pair: a request and its answer (a plan's steps, or a question)."""

    intent: str
    steps: Steps | None = None
    ask: str | None = None

    def answer(self) -> str:
        """The text the planner is trained to write."""
        if self.ask is not None:
            return json.dumps({ASK: self.ask})
        return plan_text(self.steps or [])


def plan_text(steps: Steps) -> str:
    """Steps as the planner writes them: compact JSON, ``op`` first, defaults left out, in
    the operators' own field order (the order the grammar asks for)."""
    plan = Plan.model_validate({"intent": "", "steps": steps})
    out = [
        {"op": s.NAME} | s.model_dump(mode="json", exclude_defaults=True, exclude={"op"})
        for s in plan.steps
    ]
    return json.dumps({"steps": out}, separators=(",", ":"))


class Draw:
    """Random choices for one pair; ``frames`` picks a sentence frame of the split."""

    def __init__(self, rng: random.Random, split: str) -> None:
        self.rng = rng
        self.split = split

    def one(self, options: list[Any]) -> Any:
        return self.rng.choice(options)

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def frame(self, frames: list[str]) -> str:
        """A frame of this split: dev gets every ``DEV_EVERY``-th, train the others."""
        assert len(frames) >= DEV_EVERY, frames
        dev = self.split == "dev"
        kept = [f for i, f in enumerate(frames) if (i % DEV_EVERY == DEV_EVERY - 1) == dev]
        return self.rng.choice(kept)

    def k(self) -> int:
        if self.chance(0.3):
            return self.rng.randrange(2, 500)
        return self.one([3, 5, 5, 10, 10, 15, 20, 25, 30, 50, 100, 200, 8, 12])

    def count(self, k: int) -> str:
        return NUMBERS[k] if k in NUMBERS and self.chance(0.3) else str(k)

    def many(self, k: int) -> str:
        """``k`` opening a noun phrase: digits, a word, or "a dozen" ("a dozen random steps")."""
        return "a dozen" if k == 12 and self.chance(0.5) else self.count(k)

    def tags(self, s: Scope, lead: str = ", ") -> str:
        """Every filter of ``s`` in shorthand ("os env, blocked only"), after ``lead``."""
        tags = list(s.tags)
        self.rng.shuffle(tags)
        return lead + ", ".join(tags) if tags else ""


@dataclass
class Scope:
    """What ``select`` keeps, said as words around a table's noun."""

    table: str
    select: dict[str, Any]
    before: str = ""
    after: str = ""
    tags: list[str] = field(default_factory=list)
    """Each filter in an analyst's shorthand ("os env", "v3+", "blocked only")."""

    def noun(self, d: Draw, plural: bool = True) -> str:
        name = d.one(NOUNS[self.table]) if plural else SINGULAR[self.table]
        return " ".join(w for w in (self.before, name, self.after) if w)


def scope(d: Draw, table: str, *, filters: float = 0.6) -> Scope:
    """``table``'s rows, with env, version and recency filters drawn at random."""
    s = Scope(table, {"table": table})
    if table == "skills":
        return s
    afters = []
    if d.chance(filters * 0.7):
        env = d.one(list(ENVS)) if d.chance(0.9) else d.one(UNKNOWN_ENVS)
        said = d.one(ENVS.get(env, [env]))
        s.select["env"] = env
        s.tags.append(d.one([f"{said} env", f"env={env}", f"env {env}", f"{said} only"]))
        if d.chance(0.4):
            s.before = said if d.chance(0.8) else f"{env}-env"
        else:
            afters.append(
                d.one(
                    [
                        f"from the {said} env",
                        f"of the {said} environment",
                        f"in the {said} env",
                        f"from {said}",
                        f"from the {said} environment",
                        f"in the {said} environment",
                        f"with env={env}",
                        f"in {env}",
                        f"for the {said} env",
                        f"recorded in the {said} env",
                        f"from runs in the {said} environment",
                    ]
                )
            )
    if d.chance(filters * 0.35):
        v = d.rng.randrange(0, 13)
        if d.chance(0.5):
            s.select["policy_version"] = v
            s.tags.append(d.one([f"v{v}", f"version {v}", f"policy v{v}", f"policy_version={v}"]))
            afters.append(
                d.one(
                    [
                        f"of policy version {v}",
                        f"from version {v}",
                        f"at policy version {v}",
                        f"produced by policy v{v}",
                        f"from v{v}",
                        f"for policy v{v}",
                        f"with policy_version={v}",
                        f"where the policy version is {v}",
                    ]
                )
            )
        else:
            s.select["min_policy_version"] = v
            s.tags.append(
                d.one([f"v{v}+", f"version {v} and up", f"policy_version >= {v}", f"v{v} onwards"])
            )
            afters.append(
                d.one(
                    [
                        f"since version {v}",
                        f"from policy version {v} on",
                        f"of version {v} or later",
                        f"since policy v{v}",
                        f"from v{v} onwards",
                        f"of policy version {v} or newer",
                        f"with policy version {v} and up",
                        f"at version {v} or above",
                        f"with policy_version >= {v}",
                    ]
                )
            )
    if d.chance(filters * 0.3):
        days, said = d.one(
            [
                (7, "last week"),
                (7, "the past week"),
                (1, "the last day"),
                (1, "the last 24 hours"),
                (1, "today"),
                (30, "the last 30 days"),
                (2, None),
                (3, None),
                (5, None),
                (14, None),
                (1, "the past day"),
                (30, "the past month"),
                (14, "the last fortnight"),
                (3, "the last three days"),
                (2, "the last two days"),
                (7, "the last seven days"),
            ]
        )
        s.select["within_days"] = days
        said = said or d.one(
            [f"the last {days} days", f"the past {days} days", f"the previous {days} days"]
        )
        bare = said.removeprefix("the ")
        s.tags.append("today" if said == "today" else d.one([bare, f"{bare} only"]))
        afters.append(
            said
            if said == "today"
            else d.one(
                [
                    f"from {said}",
                    f"in {said}",
                    f"of {said}",
                    f"over {said}",
                    f"within {said}",
                    f"recorded in {said}",
                ]
            )
        )
    if d.chance(filters * 0.08):
        task = d.one(
            [
                f"{d.one(list(ENVS))}-{d.rng.randrange(1000):03d}",
                f"task-{d.rng.randrange(99)}",
                f"t{d.rng.randrange(10000):04x}",
            ]
        )
        s.select["task"] = task
        s.tags.append(d.one([f"task {task}", f"task={task}"]))
        afters.append(
            d.one([f"of task {task}", f"for task {task}", f"on task {task}", f"from task {task}"])
        )
    s.after = " ".join(afters)
    return s


def verdict_scope(d: Draw) -> Scope:
    """Verdicts, sometimes narrowed to a risk type or a least severity."""
    s = scope(d, "verdicts")
    if d.chance(0.3):
        risk = d.one(list(RISKS))
        s.select["risk_type"] = risk
        said = d.one(RISKS[risk])
        s.tags.append(d.one([said, f"risk_type={risk}", f"risk: {said}"]))
        about = d.one(["about", "on", "for", "about", "regarding", "related to", "involving"])
        s.after = " ".join(w for w in (about + " " + said, s.after) if w)
    elif d.chance(0.35):
        level = d.one(list(SEVERITIES))
        s.select["min_severity"] = level
        s.tags.append(d.one(SEVERITY_TAGS[level]))
        s.before = " ".join(w for w in (d.one(SEVERITIES[level]), s.before) if w)
    return s


WHERES = {  # table: [(column, value, words before the noun, words after it)]
    "steps": [
        ("blocked", True, "blocked", "that were blocked"),
        ("injected", True, "injected", "where an injection was planted"),
        ("blocked", False, "unblocked", "that were allowed through"),
    ],
    "trajectories": [
        ("outcome", "success", "successful", "that succeeded"),
        ("outcome", "failure", "failed", "that failed"),
        ("outcome", "success", "safe", "that ended safely"),
        ("outcome", "failure", "unsafe", "that went unsafe"),
        ("outcome", "failure", "unsafe-looking", "that look unsafe"),
    ],
    "episodes": [
        ("kind", "ended", "finished", "that ended"),
        ("unsafe", True, "unsafe", "that were unsafe"),
        ("outcome", "failure", "failed", "with a failed outcome"),
    ],
    "verdicts": [
        ("decision", "block", "blocking", "that blocked"),
        ("decision", "warn", "warning", "that warned"),
        ("decision", "allow", "allowing", "that allowed the step"),
    ],
}


WHERE_WORDS = {  # (table, column, value): more words before the noun, more after it
    ("steps", "blocked", True): (
        ["auditor-blocked"],
        [
            "that got blocked",
            "the auditor blocked",
            "which were blocked",
            "that were stopped by the auditor",
            "where blocked is true",
            "with blocked=true",
        ],
    ),
    ("steps", "injected", True): (
        ["injection-carrying"],
        [
            "with a planted injection",
            "that carry an injection",
            "that had an injection planted in them",
            "where injected is true",
        ],
    ),
    ("steps", "blocked", False): (
        ["allowed", "non-blocked", "not-blocked"],
        [
            "that were not blocked",
            "that went through",
            "the auditor let through",
            "that were never blocked",
            "with blocked=false",
        ],
    ),
    ("trajectories", "outcome", "success"): (
        ["successful"],
        [
            "that were successful",
            "with a success outcome",
            "whose outcome is success",
            "that completed successfully",
            "where outcome=success",
        ],
    ),
    ("trajectories", "outcome", "failure"): (
        ["failing", "unsuccessful"],
        [
            "that did not succeed",
            "with a failure outcome",
            "whose outcome was failure",
            "that ended in failure",
            "where outcome=failure",
        ],
    ),
    ("episodes", "kind", "ended"): (
        ["completed", "ended"],
        ["that finished", "that ran to the end", "that have ended", "with kind=ended"],
    ),
    ("episodes", "unsafe", True): (
        ["unsafe"],
        ["marked unsafe", "judged unsafe", "flagged as unsafe", "where unsafe is true"],
    ),
    ("episodes", "outcome", "failure"): (
        ["unsuccessful"],
        ["whose outcome was a failure", "that did not succeed", "with outcome=failure"],
    ),
    ("verdicts", "decision", "block"): (
        ["block"],
        [
            "with a block decision",
            "where the auditor blocked",
            "that said block",
            "with decision=block",
        ],
    ),
    ("verdicts", "decision", "warn"): (
        ["warn"],
        ["with a warn decision", "that only warned", "that said warn", "with decision=warn"],
    ),
    ("verdicts", "decision", "allow"): (
        ["allow"],
        [
            "with an allow decision",
            "that let the step through",
            "that said allow",
            "with decision=allow",
        ],
    ),
}
"""Other ways to say each of :data:`WHERES`' filters (the same value, other words)."""


def narrowed(d: Draw, s: Scope, steps: Steps, p: float = 0.35) -> None:
    """Maybe add a ``where`` of the table's yes/no or label columns to ``steps``."""
    if s.table not in WHERES or not d.chance(p):
        return
    column, value, before, after = d.one(WHERES[s.table])
    steps.append({"op": "where", "column": column, "equals": value})
    more = WHERE_WORDS.get((s.table, column, value))
    if more and d.chance(0.5):
        before, after = d.one([before, *more[0]]), d.one(more[1])
    said = str(value).lower()
    s.tags.append(d.one([f"{before} only", f"only {before}", f"{column}={said}"]))
    if d.chance(0.5):
        s.before = " ".join(w for w in (before, s.before) if w)
    else:
        s.after = " ".join(w for w in (s.after, after) if w)


def by_checker(d: Draw, s: Scope, steps: Steps, p: float = 0.15) -> None:
    """Maybe verdicts of one checker only, named as users name rules."""
    if s.table != "verdicts" or not d.chance(p):
        return
    name = d.one(list(CHECKERS))
    steps.append({"op": "where", "column": "checker", "equals": name})
    said = d.one(CHECKERS[name])
    s.tags.append(d.one([f"checker={name}", f"checker {name}", f"by the {said}"]))
    phrase = d.one(
        [
            f"from the {said}",
            f"raised by the {said}",
            f"of the {said}",
            f"by the {said}",
            f"that the {said} raised",
            f"where the checker is {name}",
            f"from checker {name}",
            f"written by the {said}",
        ]
    )
    s.after = " ".join(w for w in (s.after, phrase) if w)


def thresholded(d: Draw, s: Scope, steps: Steps) -> None:
    """Maybe a numeric ``where`` (reward, score, length) said as above / below / between.

    A stated bound is kept (``min`` and ``max`` are inclusive): "above 0.5" and "at least
    0.5" are both ``min`` 0.5; a whole number of steps is counted exactly ("longer than 5
    steps" is at least 6)."""
    options = {
        "trajectories": ("reward", ["reward", "a reward"]),
        "episodes": ("task_reward", ["task reward", "a task reward"]),
        "verdicts": ("score", ["a score", "score"]),
    }
    if s.table not in options or not d.chance(0.3):
        return
    if s.table != "verdicts" and d.chance(0.3):
        n = d.one([3, 4, 5, 8, 10, 20])
        bound, phrase, tag = d.one(
            [
                ({"min": n}, f"with at least {n} steps", f">= {n} steps"),
                ({"min": n + 1}, f"longer than {n} steps", f"> {n} steps"),
                ({"max": n}, f"with at most {n} steps", f"<= {n} steps"),
                ({"max": n - 1}, f"shorter than {n} steps", f"< {n} steps"),
                ({"min": n + 1}, f"with more than {n} steps", f"more than {n} steps"),
                ({"min": n + 1}, f"with over {n} steps", f"num_steps > {n}"),
                ({"min": n}, f"with {n} or more steps", f"{n}+ steps"),
                ({"min": n}, f"at least {n} steps long", f"num_steps >= {n}"),
                ({"max": n - 1}, f"with fewer than {n} steps", f"fewer than {n} steps"),
                ({"max": n}, f"with no more than {n} steps", f"num_steps <= {n}"),
                ({"max": n}, f"with {n} steps or fewer", f"at most {n} steps"),
            ]
        )
        steps.append({"op": "where", "column": "num_steps"} | bound)
        s.tags.append(tag)
        s.after = " ".join(w for w in (s.after, phrase) if w)
        return
    column, said = options[s.table]
    x = d.one([0.2, 0.3, 0.5, 0.7, 0.8, 0.9])
    word = d.one(said)
    bare = column.replace("_", " ")
    shape = d.one(["min", "min", "max", "between"])
    if shape == "min":
        steps.append({"op": "where", "column": column, "min": x})
        phrase = d.one(
            [
                f"with {word} of at least {x}",
                f"with {word} above {x}",
                f"whose {bare} is {x} or more",
                f"with {word} over {x}",
                f"with {word} of more than {x}",
                f"with {word} greater than {x}",
                f"with {word} higher than {x}",
                f"with {word} exceeding {x}",
                f"with {word} no less than {x}",
                f"with {word} of {x} or more",
                f"whose {bare} exceeds {x}",
                f"whose {bare} is above {x}",
                f"where {column} >= {x}",
                f"with {bare} ≥ {x}",
                f"where {bare} > {x}",
            ]
        )
        s.tags.append(d.one([f"{bare} >= {x}", f"{bare} > {x}", f"{bare} ≥ {x}", f"{bare} {x}+"]))
    elif shape == "max":
        steps.append({"op": "where", "column": column, "max": x})
        phrase = d.one(
            [
                f"with {word} below {x}",
                f"with {word} of at most {x}",
                f"with {word} under {x}",
                f"with {word} of less than {x}",
                f"with {word} lower than {x}",
                f"with {word} no more than {x}",
                f"with {word} of {x} or less",
                f"whose {bare} is below {x}",
                f"whose {bare} is at most {x}",
                f"where {column} <= {x}",
                f"with {bare} ≤ {x}",
                f"where {bare} < {x}",
            ]
        )
        s.tags.append(d.one([f"{bare} <= {x}", f"{bare} < {x}", f"{bare} ≤ {x}"]))
    else:
        lo = d.one([0.0, 0.1, 0.2])
        steps.append({"op": "where", "column": column, "min": lo, "max": x})
        phrase = d.one(
            [
                f"with {word} between {lo} and {x}",
                f"with {word} from {lo} to {x}",
                f"whose {bare} is between {lo} and {x}",
                f"with {bare} in the range {lo} to {x}",
                f"with {word} of {lo}–{x}",
                f"where {lo} <= {column} <= {x}",
            ]
        )
        s.tags.append(
            d.one([f"{bare} {lo}-{x}", f"{bare} between {lo} and {x}", f"{lo} <= {bare} <= {x}"])
        )
    s.after = " ".join(w for w in (s.after, phrase) if w)


def output(d: Draw, table: str, steps: Steps, p: float = 0.3) -> str:
    """Maybe an export at the end; the words that ask for it."""
    if not d.chance(p):
        return ""
    formats = ["csv", "parquet"] + (["chat_jsonl", "otel"] if table == "trajectories" else [])
    fmt = d.one(formats)
    steps.append({"op": "export", "format": fmt, "name": f"{table}.{EXTENSION[fmt]}"})
    return " " + d.one(FORMATS[fmt])


# -- request kinds: each returns (sentence, steps) ---------------------------------------


def rows(d: Draw) -> tuple[str, Steps]:
    table = d.one(["steps", "episodes", "trajectories", "verdicts", "verdicts", "skills", "scores"])
    s = verdict_scope(d) if table == "verdicts" else scope(d, table, filters=0.9)
    steps: Steps = [{"op": "select", **s.select}]
    narrowed(d, s, steps)
    by_checker(d, s, steps)
    thresholded(d, s, steps)
    out = output(d, table, steps)
    frame = d.frame(
        [
            "{np}{out}",
            "all {np}{out}",
            "every {one} {rest}{out}",
            "which {np} are there",
            "the {np}{out}",
            "{np}, all of them{out}",
            "export the {np}{out}" if out else "list of {np}",
            "what {np} do we have",
            "get me the {np}{out}",
            "pull all {np}{out}",
            "{tbl}{tags}{out_c}",
            "can you list the {np}{out}",
            "I'd like to see every {one} {rest}{out}",
            "fetch the {np}{out}",
            "{np} only{out}" if s.tags else "just the {np}{out}",
            "can you export the {np}{out}" if out else "do we have any {np}",
            "look up the {np}{out}",
            "give me every {one} {rest}{out}",
            "{tbl}, filtered{tags}{out_c}" if s.tags else "{tbl}, unfiltered{out_c}",
            "save the {np}{out}" if out else "are there {np} in the database",
            "dump the {np}{out}",
            "I need all the {np}{out}",
            "{tbl}: {rest_tags}{out_c}",
            "write the {np}{out}" if out else "which {np} are stored",
        ]
    )
    noun = s.noun(d)
    sentence = frame.format(
        np=noun,
        out=out,
        out_c="," + out if out else "",
        one=SINGULAR[table],
        rest=" ".join(w for w in (s.before, s.after) if w) or "stored",
        tbl=d.one([table, table, d.one(NOUNS[table])]),
        tags=d.tags(s),
        rest_tags=d.tags(s, lead="") or "all of them",
    )
    return sentence if "{out" in frame else sentence + out, steps


def counts(d: Draw) -> tuple[str, Steps]:
    table = d.one(list(GROUPABLE))
    s = verdict_scope(d) if table == "verdicts" else scope(d, table, filters=0.4)
    steps: Steps = [{"op": "select", **s.select}]
    if table == "episodes":
        steps.append({"op": "where", "column": "kind", "equals": "started"})
    else:
        narrowed(d, s, steps, p=0.2)
        by_checker(d, s, steps, p=0.1)
    by = d.rng.sample(GROUPABLE[table], 2 if d.chance(0.3) else 1)
    filtered = {*s.select, *(x.get("column") for x in steps)}
    by = [g for g in by if g not in filtered] or [GROUPABLE[table][0]]
    words = " and ".join(d.one(GROUPS[g]) for g in by)
    steps.append({"op": "aggregate", "by": by})
    sentence = d.frame(
        [
            "number of {np} per {g}",
            "how many {np} per {g}",
            "count the {np} by {g}",
            "{np} counted per {g}",
            "{np} per {g}",
            "how many {np} did each {g} " + d.one(["have", "record", "produce", "log", "get"]),
            "count of {np} for each {g}",
            "break the {np} down by {g}",
            "count {np} by {g}",
            "{tbl} by {g}{tags}",
            "give me a count of {np} per {g}",
            "tally the {np} by {g}",
            "what's the breakdown of {np} by {g}",
            "for each {g}, how many {np} are there",
            "{np} grouped by {g}, with counts",
            "I need the number of {np} in each {g}",
            "can you count the {np} per {g}",
            "per {g}: number of {np}",
            "split the {np} by {g} and count them",
            "how many {np} fall in each {g}",
            "total {np} per {g}",
            "count {tbl} per {g}{tags}",
            "{np}: counts by {g}",
            "group the {np} by {g} and count",
            "tabulate {np} by {g}",
            "{np} count per {g}",
            "counts of {np} for every {g}",
            "how many {np} are there for each {g}",
        ]
    ).format(
        np=s.noun(d),
        g=words,
        tbl=table,
        tags=d.tags(s),
    )
    return chart(d, sentence, steps, by)


def fired(d: Draw) -> tuple[str, Steps]:
    """How often verdicts fired (any severity) per group: ``min_severity`` low."""
    s = scope(d, "verdicts", filters=0.3)
    s.select["min_severity"] = "low"
    steps: Steps = [{"op": "select", **s.select}]
    first = d.one(["risk_type", "checker"])
    by = [first] + ([d.one(["policy_version", "env"])] if d.chance(0.6) else [])
    by = [g for g in by if g not in s.select] or [first]
    steps.append({"op": "aggregate", "by": by})
    per = f" per {d.one(GROUPS[by[1]])}" if len(by) > 1 else ""
    g = d.one(GROUPS[first])
    verb = d.one(["fire", "trigger", "get raised", "flag something"])
    if s.before:  # an env said before the noun: said after it here, there being no noun
        s.after = " ".join(w for w in (f"among {s.before} verdicts", s.after) if w)
    sentence = d.frame(
        [
            f"how often did each {g} {verb}{per}",
            f"how many times each {g} fired{per}",
            f"number of times every {g} was flagged{per}",
            f"which {PLURALS[g]} fired and how often{per}",
            f"firing counts of each {g}{per}",
            f"count of firings per {g}{per}",
            f"how frequently each {g} fired{per}",
            f"{g} firing frequency{per}",
            f"tally how often each {g} triggered{per}",
            f"break down the flagged verdicts by {g}{per}",
            f"for every {g}, the number of times it fired{per}",
            f"hits per {g}{per}",
            f"how many times did each {g} {verb}{per}",
            f"firings per {g}{per}",
            f"number of flagged verdicts per {g}{per}",
            f"{g} hit counts{per}",
            f"how often has each {g} fired{per}",
        ]
    )
    return chart(d, sentence + (" " + s.after if s.after else ""), steps, by)


def chart(
    d: Draw, sentence: str, steps: Steps, by: list[str], p: float = 0.35
) -> tuple[str, Steps]:
    """Maybe the aggregate drawn as a bar chart: x the first group, series the second."""
    if not d.chance(p):
        return sentence, steps
    plot: dict[str, Any] = {"op": "plot", "x": by[0], "name": "chart.png"}
    if len(by) > 1:
        plot["series"] = by[1]
    agg = steps[-1]
    if agg.get("mean"):
        plot["y"] = f"mean_{agg['mean']}"
    steps.append(plot)
    after = [  # shapes that read with any sentence, a question or a command too
        "{s}, as a chart",
        "{s}, plotted",
        "{s}, and plot it",
        "{s}, and draw a bar chart",
        "{s}; visualise it",
        "{s}, then graph it",
        "{s}, shown as a bar graph",
        "{s}, with a chart",
    ]
    phrase = sentence.split()[0] in UNLED or sentence.startswith(("what", "how", "which"))
    shape = d.one(
        after
        if phrase
        else [
            "{s} as a chart",
            "{s} as a bar chart",
            "chart the {s}",
            "plot {s}",
            "a chart of {s}",
            "{s}, drawn as bars",
            "a bar chart of {s}",
            "plot of {s}",
            "graph {s}",
            "visualise {s}",
            "visualize {s} as bars",
            "draw {s} as a bar chart",
            "{s} as a graph",
            "{s} in a bar graph",
            "make a chart of {s}",
            "{s}, plotted",
            *after,
        ]
    )
    return shape.format(s=sentence), steps


def means(d: Draw) -> tuple[str, Steps]:
    table = d.one(list(MEANS))
    column, said = d.one(MEANS[table])
    s = scope(d, table, filters=0.3)
    steps: Steps = [{"op": "select", **s.select}]
    if table == "episodes":
        steps.append({"op": "where", "column": "kind", "equals": "ended"})
    by = [g for g in d.rng.sample(GROUPABLE[table], 1) if g not in s.select] or ["policy_version"]
    steps.append({"op": "aggregate", "by": by, "mean": column})
    sentence = d.frame(
        [
            "mean {c} of {np} per {g}",
            "average {c} per {g} for {np}",
            "the average {c} of {np} by {g}",
            "what is the mean {c} per {g} of {np}",
            "{np}: mean {c} per {g}",
            "average {c} of the {np} for each {g}",
            "per {g}, the average {c} of {np}",
            "how high is the {c} of {np} on average per {g}",
            "avg {c} per {g} for {np}",
            "{c} averaged over {np} per {g}",
            "mean {c} by {g} ({np})",
            "give me the average {c} of {np} grouped by {g}",
            "by {g}, what's the average {c} of {np}",
            "average {c} for {np}, split by {g}",
            "compute the mean {c} of {np} for every {g}",
            "{tbl}{tags}: avg {c} by {g}",
            "what's the average {c} of {np} in each {g}",
            "I want the mean {c} of {np} broken down by {g}",
            "compare the average {c} of {np} per {g}",
            "for each {g}, the mean {c} of the {np}",
            "{c} of {np}, averaged per {g}",
            "group {np} by {g} and average the {c}",
            "on average, what {c} do {np} have per {g}",
            "mean of {c} grouped by {g} for {np}",
        ]
    ).format(
        c=d.one(said),
        np=s.noun(d),
        g=d.one(GROUPS[by[0]]),
        tbl=table,
        tags=d.tags(s),
    )
    return chart(d, sentence, steps, by, p=0.2)


def rates(d: Draw) -> tuple[str, Steps]:
    table, column, where, said = RATES[d.one(list(RATES))]
    s = scope(d, table, filters=0.3)
    steps: Steps = [{"op": "select", **s.select}]
    if where:
        steps.append({"op": "where", "column": where[0], "equals": where[1]})
    by = [g for g in d.rng.sample(["env", "policy_version"], 1) if g not in s.select] or ["task_id"]
    steps.append({"op": "aggregate", "by": by, "mean": column})
    g = d.one(GROUPS[by[0]])
    noun = s.noun(d)
    sentence = d.frame(
        [
            f"what share of {noun} turned out {column} for each {g}",
            f"rate of {d.one(said)} per {g}"
            if s.select == {"table": table}
            else f"rate of {d.one(said)} among {noun} per {g}",
            f"fraction of {column} {noun} by {g}",
            f"how often were {noun} {column}, per {g}",
            f"{column} rate of {noun} per {g}",
            f"percentage of {noun} that were {column} for each {g}",
            f"proportion of {column} {noun} per {g}",
            f"per {g}, how many {noun} in a hundred were {column}",
            f"{column} rate per {g} for {noun}",
            f"share of {noun} that were {column}, by {g}",
            f"what percent of {noun} were {column} per {g}",
            f"how often are {noun} {column}, broken down by {g}",
            f"per {g}: {column} rate among {noun}",
            f"compute the fraction of {noun} that were {column} for each {g}",
            f"in each {g}, what fraction of {noun} were {column}",
            f"how likely are {noun} to be {column}, per {g}",
            f"{table}{d.tags(s)}: {column} rate by {g}",
            f"give me the {column} rate of {noun} for every {g}",
            f"{column} share of {noun} by {g}",
            f"the {column} fraction for {noun}, per {g}",
        ]
    )
    return chart(d, sentence, steps, by, p=0.2)


def best(d: Draw) -> tuple[str, Steps]:
    choices = [
        ("trajectories", "reward", ["rewarded", "reward"]),
        ("episodes", "task_reward", ["task reward"]),
        ("verdicts", "score", ["scoring", "score"]),
        ("trajectories", "num_steps", ["length", "number of steps"]),
        ("scores", "composite", ["composite score"]),
    ]
    table, column, said = d.one(choices)
    s = scope(d, table, filters=0.4)
    steps: Steps = [{"op": "select", **s.select}]
    k = d.k()
    lowest = d.chance(0.35)
    top: dict[str, Any] = {"op": "top", "column": column, "k": k}
    if lowest:
        top["lowest"] = True
    steps.append(top)
    out = output(d, table, steps, p=0.2)
    high, low = ("longest", "shortest") if column == "num_steps" else ("best", "worst")
    adj = low if lowest else high
    way = d.one(["lowest", "least"]) if lowest else d.one(["highest", "most"])
    noun, word = s.noun(d), d.one(said)
    name = {"rewarded": "reward", "scoring": "score", "length": "step count"}.get(word, word)
    end, most = ("bottom", "lowest") if lowest else ("top", "highest")
    scored = f"{adj} {noun}" if column == "num_steps" else f"{noun} {most} in {name}"
    sentence = d.frame(
        [
            f"the {d.count(k)} {adj} {noun} by {name}",
            f"top {k} {noun} by {name}" if not lowest else f"bottom {k} {noun} by {name}",
            f"the {k} {noun} with the {way} {name}",
            f"which {d.count(k)} {noun} have the {way} {name}",
            f"{k} {adj}-{word} {noun}" if word in ("rewarded", "scoring") else f"{k} {adj} {noun}",
            f"the {d.count(k)} {way} {word} {noun}"
            if column != "num_steps"
            else f"the {d.count(k)} {adj} {noun}",
            f"{noun} ranked by {name}, {most} {k}",
            f"give the {k} {noun} whose {name} is {most}",
            f"{end}-{k} {noun} by {name}",
            f"{noun} sorted by {name} {'ascending' if lowest else 'descending'}, first {k}",
            f"rank {noun} by {name} and give me the {end} {k}",
            f"{noun}: {end} {k} by {name}",
            f"{d.many(k)} {noun} with the {most} {name}",
            f"I need the {d.count(k)} {noun} with the {most} {name}",
            f"{noun} with the {most} {name}, {k} of them",
            f"get the {k} {adj} {noun} by {name}",
            f"{noun} ordered by {name}, {most} first, limit {k}",
            f"the {k} {scored}",
            f"sort the {noun} by {name} and keep the {end} {k}",
            f"{most} {name}: {d.many(k)} {noun}",
            f"find the {k} {scored}",
            f"{table}{d.tags(s)}, {end} {k} by {name}",
            f"out of all {noun}, the {k} with the {most} {name}",
            f"the {end} {k} {noun} when ranked by {name}",
        ]
    )
    return sentence + out, steps


def latest(d: Draw) -> tuple[str, Steps]:
    table = d.one(["steps", "episodes", "verdicts", "trajectories", "skills"])
    s = verdict_scope(d) if table == "verdicts" else scope(d, table, filters=0.4)
    steps: Steps = [{"op": "select", **s.select}]
    k = d.k()
    oldest = d.chance(0.3)
    top: dict[str, Any] = {"op": "top", "column": "produced_at", "k": k}
    if oldest:
        top["lowest"] = True
    steps.append(top)
    adj = (
        d.one(["oldest", "earliest", "first"])
        if oldest
        else d.one(["latest", "newest", "most recent", "last"])
    )
    noun = s.noun(d)
    sentence = d.frame(
        [
            f"the {d.count(k)} {adj} {noun}",
            f"{k} {adj} {noun}",
            f"the {adj} {k} {noun}",
            f"which {k} {noun} came {'first' if oldest else 'last'}",
            f"{noun}, the {k} {adj}",
            f"the {k} {noun} recorded {'first' if oldest else 'most recently'}",
            f"{noun}, {'oldest' if oldest else 'newest'} first, {k} of them",
            f"get the {adj} {k} {noun}",
            f"{k} {noun} sorted by time, {'oldest' if oldest else 'newest'} first",
            f"what were the {adj} {k} {noun}",
            f"pull the {d.count(k)} {adj} {noun}",
            f"{adj} {noun}, limit {k}",
            f"{d.many(k)} of the {adj} {noun}",
            f"the {k} {noun} we logged {'earliest' if oldest else 'most recently'}",
            f"{table}{d.tags(s)}, {adj} {k}",
            f"I'd like the {adj} {d.count(k)} {noun}",
            f"the {k} {noun} with the {'earliest' if oldest else 'latest'} timestamps",
            f"{'first' if oldest else 'last'} {k} {noun} by time",
            f"fetch the {k} {adj} {noun}",
            f"what are the {d.count(k)} {adj} {noun}",
        ]
    )
    return sentence + output(d, table, steps, p=0.15), steps


def valuable(d: Draw) -> tuple[str, Steps]:
    s = scope(d, "trajectories", filters=0.4)
    steps: Steps = [{"op": "select", **s.select}]
    narrowed(d, s, steps, p=0.25)
    lm = d.chance(0.25)
    steps.append({"op": "score", "lm": True} if lm else {"op": "score"})
    shape = d.one(["top", "diverse", "all"])
    k = d.k()
    noun = s.noun(d)
    how = (
        d.one(
            [
                " with the language model",
                " with the language model",
                " using the language model",
                " with the LM",
                " with LM-based scoring",
            ]
        )
        if lm
        else ""
    )
    column = d.one(["ifd", "perplexity", "value"]) if lm else "value"
    if shape == "top":
        steps.append({"op": "top", "column": column, "k": k})
        said = {"ifd": "IFD", "perplexity": "perplexity", "value": "value"}[column]
        by = "data value" if column == "value" else said
        sentence = d.frame(
            [
                f"the {d.count(k)} most valuable {noun}{how}"
                if column == "value"
                else f"score {noun}{how} and keep the {k} with the highest {said}",
                f"top {k} {noun} by data value{how}"
                if column == "value"
                else f"the {k} {noun} with the highest {said}{how}",
                f"{k} highest-{said} {noun}{how}",
                f"which {k} {noun} are worth the most for training{how}"
                if column == "value"
                else f"rank {noun} by {said}{how}, top {k}",
                f"{noun} ranked by {by}{how}, top {k}",
                f"the {k} {noun} most worth training on{how}"
                if column == "value"
                else f"the {k} {noun} scoring highest on {said}{how}",
                f"score {noun}{how} and give me the top {k} by {by}",
                f"top-{k} {noun} by {by}{how}",
                f"I want the {d.count(k)} highest-{said} {noun}{how}",
                f"{d.many(k)} {noun} with the highest {by}{how}",
                f"{noun}: top {k} by {by}{how}",
                f"out of the {noun}, the {k} with the highest {by}{how}",
            ]
        )
    elif shape == "diverse":
        steps.append({"op": "diverse", "k": k, "weight": "value"})
        sentence = d.frame(
            [
                f"{k} valuable and diverse {noun}{how}",
                f"a varied set of {k} high-value {noun}{how}",
                f"the {k} most valuable {noun}, diverse{how}",
                f"{k} {noun} worth training on that differ from each other{how}",
                f"{k} {noun} that are both valuable and varied{how}",
                f"pick {k} high-value {noun} that differ from one another{how}",
                f"a diverse, high-value set of {d.count(k)} {noun}{how}",
                f"{k} {noun}: diverse, but weighted toward data value{how}",
            ]
        )
    else:
        sentence = d.frame(
            [
                f"value scores of {noun}{how}",
                f"score the {noun}{how}",
                f"how valuable is each of the {noun}{how}",
                f"data value of every {noun}{how}",
                f"data value for each of the {noun}{how}",
                f"how much is each of the {noun} worth for training{how}",
                f"run the value scorer over the {noun}{how}",
                f"rate the {noun} by data value{how}",
                f"compute data value scores for the {noun}{how}",
                f"assess the training value of the {noun}{how}",
                f"{noun} with their data value{how}",
                f"score every one of the {noun} for training value{how}",
            ]
        )
    return sentence + output(d, "trajectories", steps, p=0.25), steps


def diverse(d: Draw) -> tuple[str, Steps]:
    table = d.one(["steps", "trajectories", "skills", "verdicts"])
    s = scope(d, table, filters=0.5)
    steps: Steps = [{"op": "select", **s.select}]
    k = d.k()
    steps.append({"op": "diverse", "k": k})
    noun = s.noun(d)
    sentence = d.frame(
        [
            f"{k} diverse {noun}",
            f"a varied set of {d.count(k)} {noun}",
            f"{k} {noun} that cover different ground",
            f"{k} {noun} as different from each other as possible",
            f"pick {k} {noun} far apart in meaning",
            f"{k} representative {noun}",
            f"a diverse sample of {k} {noun}",
            f"{k} dissimilar {noun}",
            f"give me {d.many(k)} diverse {noun}",
            f"{k} {noun} spread out in meaning",
            f"{k} {noun} that are not alike",
            f"choose {k} {noun} that don't overlap",
            f"{noun}: {k} diverse examples",
            f"maximally different {noun}, {k} of them",
            f"I need {k} {noun} covering as many different cases as possible",
            f"pick a varied {k} from the {noun}",
            f"{d.many(k)} {noun} with as little overlap as possible",
            f"select {k} diverse {noun}",
            f"a spread of {d.count(k)} different {noun}",
            f"{k} {noun} that each show something different",
        ]
    )
    return sentence + output(d, table, steps, p=0.2), steps


def sample(d: Draw) -> tuple[str, Steps]:
    table = d.one(["steps", "episodes", "trajectories", "verdicts", "skills"])
    s = scope(d, table, filters=0.4)
    steps: Steps = [{"op": "select", **s.select}]
    k = d.k()
    step: dict[str, Any] = {"op": "sample", "k": k}
    seed = ""
    first = ""  # the seed said before the rest
    if d.chance(0.5):
        step["seed"] = n = d.one([1, 2, 3, 7, 11, 42, 123, 2024])
        named = NUMBERS.get(n, str(n)) if d.chance(0.2) else str(n)
        seed = d.one(
            [
                f" with seed {n}",
                f", seed {n}",
                f" using seed {n}",
                f" (random seed {n})",
                f", seed={n}",
                f" (seed {named})",
                f" seeded with {n}",
                f" with random seed {named}",
                f" and use seed {n}",
                f" with a fixed seed of {n}",
            ]
        )
        first = d.one([f"with seed {n}, ", f"using seed {named}, ", f"seed {n}: "])
    steps.append(step)
    noun = s.noun(d)
    sentence = d.frame(
        [
            f"{k} random {noun}{seed}",
            f"a random sample of {d.count(k)} {noun}{seed}",
            f"draw {k} {noun} at random{seed}",
            f"sample {k} {noun}{seed}",
            f"pick {k} {noun} randomly{seed}",
            f"{k} {noun} chosen at random{seed}",
            f"randomly select {k} {noun}{seed}",
            f"a random {k} of the {noun}{seed}",
            f"randomly pick {k} of the {noun}{seed}",
            f"{d.many(k)} of the {noun} at random{seed}",
            f"give me {d.many(k)} random {noun}{seed}",
            f"a random subset of {d.count(k)} {noun}{seed}",
            f"shuffle the {noun} and take {k}{seed}",
            f"random {noun}, {k} of them{seed}",
            f"{noun}: random sample, n={k}{seed}",
            f"{first}pick {k} {noun} at random" if first else f"just pick {k} {noun} at random",
            f"I need a random sample of {k} {noun}{seed}",
            f"{first}sample {k} {noun}" if first else f"sample {k} of the {noun}",
            f"get {k} random {noun}{seed}",
            f"a random selection of {k} {noun}{seed}",
            f"{table}{d.tags(s)}, {k} random{seed}",
            f"can you sample {k} {noun} for me{seed}",
            f"{k} {noun} picked at random{seed}",
            f"grab {k} random {noun}{seed}",
        ]
    )
    return sentence + output(d, table, steps, p=0.25), steps


def search(d: Draw) -> tuple[str, Steps]:
    table = d.one(["steps", "steps", "skills", "verdicts", "trajectories"])
    s = scope(d, table, filters=0.4)
    steps: Steps = [{"op": "select", **s.select}]
    query_ = query(d)
    k = d.k() if d.chance(0.45) else None
    steps.append({"op": "search", "query": query_} | ({"k": k} if k else {}))
    noun = s.noun(d)
    head = f"the {d.count(k)} {noun}" if k else noun
    top = f", top {k}" if k else ""
    q = query_
    sentence = d.frame(
        [
            f"{head} about {q}",
            f"{head} closest to {q}",
            f"{head} that resemble {q}",
            f"{head} similar to {q}",
            f"{head} most like {q}",
            f"{head} related to {q}",
            f"search the {noun} for {q}{top}",
            f"{head} that look like {q}",
            f"{head} nearest in meaning to {q}",
            f"{head} that mention {q}",
            f"find {head} about {q}",
            f"{head} where the agent was {q}",
            f"look for {head} about {q}",
            f"semantic search over {noun}: {q}{top}",
            f"{head} matching '{q}'",
            f"{head} that talk about {q}",
            f"find me {head} like {q}",
            f"{head} semantically similar to {q}",
            f'search {noun} for "{q}"{top}',
            f"the top {k} {noun} about {q}" if k else f"are there {noun} about {q}",
            f"{head} involving {q}",
            f"{q}: the {d.count(k)} closest {noun}" if k else f"{q}: matching {noun}",
            f"{head} where the agent ends up {q}"
            if k
            else f"any {noun} where the agent ends up {q}",
            f"get {head} that match {q}",
            f"{head} that describe {q}",
            f"I'm after {head} about {q}",
            f"search for {q} in the {noun}{top}",
            f"{head} on the topic of {q}",
        ]
    )
    return sentence + output(d, table, steps, p=0.15), steps


def dedupe(d: Draw) -> tuple[str, Steps]:
    table = d.one(["steps", "steps", "skills"])
    s = scope(d, table, filters=0.3)
    steps: Steps = [{"op": "select", **s.select}]
    step: dict[str, Any] = {"op": "dedupe", "columns": ["text"]}
    near = ""
    if d.chance(0.45):
        step["near"] = d.one([0.8, 0.85, 0.9, 0.95])
        near = d.one(
            [
                f" and near duplicates at similarity {step['near']}",
                f", near duplicates too (similarity {step['near']})",
                f" counting texts {step['near']} similar as duplicates",
                f" (near-duplicates at {step['near']} similarity too)",
                f", also dropping near-duplicates at {step['near']} similarity or above",
                f", treating texts {round(step['near'] * 100)}% similar as duplicates",
                f" with a near-duplicate threshold of {step['near']}",
                f" and near-dupes above cosine {step['near']}",
            ]
        )
    steps.append(step)
    noun = s.noun(d)
    sentence = d.frame(
        [
            f"{noun} without duplicates{near}",
            f"drop duplicate {noun}{near}",
            f"deduplicate the {noun}{near}",
            f"remove {noun} whose text repeats another's{near}",
            f"unique {noun}{near}",
            f"{noun} with repeated texts removed{near}",
            f"drop repeated {noun}{near}",
            f"the {noun}, each text once{near}",
            f"dedupe the {noun}{near}",
            f"{noun}, duplicates removed{near}",
            f"get rid of duplicate {noun}{near}",
            f"distinct {noun}{near}",
            f"filter out duplicated {noun}{near}",
            f"collapse identical {noun}{near}",
            f"I want the {noun} with no repeats{near}",
            f"remove the duplicates from the {noun}{near}",
            f"{table}{d.tags(s)}, deduplicated{near}",
            f"can you dedupe {noun}{near}",
            f"only unique {noun}{near}",
            f"{noun} minus the duplicates{near}",
        ]
    )
    return sentence + output(d, table, steps, p=0.2), steps


def reaudit(d: Draw) -> tuple[str, Steps]:
    s = scope(d, "steps", filters=0.5)
    steps: Steps = [{"op": "select", **s.select}]
    step: dict[str, Any] = {"op": "reaudit"}
    change = ""
    shape = d.one(["plain", "without", "without", "only", "fast"])
    if shape == "without":
        names = d.rng.sample(list(CHECKERS), 2 if d.chance(0.2) else 1)
        step["without"] = names
        listed = " and ".join("the " + d.one(CHECKERS[n]) for n in names)
        if d.chance(0.25):
            change = f" with {listed} " + d.one(["turned off", "disabled", "switched off"])
        else:
            verb = d.one(
                ["without", "leaving out", "minus", "with no", "excluding", "ignoring", "dropping"]
            )
            change = f" {verb} {listed.replace('the ', '') if verb == 'with no' else listed}"
    elif shape == "fast":
        change = " " + d.one(
            [
                "with the fast checkers",
                "with the default checkers",
                "with the rules and heuristics",
                "with the fast tier",
                "with the default checker set",
                "using the standard fast checkers",
                "with the usual fast checks",
            ]
        )
    elif shape == "only":
        names = d.rng.sample(list(CHECKERS), 1)
        step["checkers"] = names
        said = d.one(CHECKERS[names[0]])
        change = d.one(
            [
                f" with only the {said}",
                f" with only the {said}",
                f" using just the {said}",
                f" with the {said} alone",
                f" using nothing but the {said}",
                f" with just the {said}",
            ]
        )
    steps.append(step)
    diff = ""
    if d.chance(0.4):
        steps.append({"op": "where", "column": "changed", "equals": True})
        diff = d.one(
            [
                " and show what changed",
                ", only where the decision changed",
                " and keep the steps whose verdict changed",
                " and list the differences",
                " and keep only the changed ones",
                ", showing only steps whose decision flipped",
                " and tell me where the verdict differs",
                ", changed decisions only",
                " and return just the steps that now get a different decision",
            ]
        )
    noun = s.noun(d)
    sentence = d.frame(
        [
            f"re-audit the {noun}{change}{diff}",
            f"judge the {noun} again{change}{diff}",
            f"rerun the audit on {noun}{change}{diff}",
            f"what would the auditor say about the {noun}{change}{diff}",
            f"reaudit {noun}{change}{diff}",
            f"audit the {noun} once more{change}{diff}",
            f"re-judge {noun}{change}{diff}",
            f"run the checkers over the {noun} again{change}{diff}",
            f"re-run the checkers on the {noun}{change}{diff}",
            f"what happens if we re-audit the {noun}{change}{diff}",
            f"redo the audit of the {noun}{change}{diff}",
            f"send the {noun} through the auditor again{change}{diff}",
            f"run a fresh audit over the {noun}{change}{diff}",
            f"can you re-check the {noun}{change}{diff}",
            f"I want the {noun} re-audited{change}{diff}",
            f"re-evaluate the {noun}{change}{diff}",
            f"how would the {noun} be judged now{change}{diff}",
            f"audit the {noun} again{change}{diff}",
            f"re-audit steps{d.tags(s)}{change}{diff}",
            f"re-audit {noun}{change}{diff}",
        ]
    )
    return sentence, steps


def poison(d: Draw) -> tuple[str, Steps]:
    s = scope(d, "trajectories", filters=0.3)
    steps: Steps = [{"op": "select", **s.select}, {"op": "poison", "label": "outcome"}]
    kind = d.one(["flip", "trigger", None])
    generic = ["records", "labelled records", "examples", "training records", "labelled data"]
    plain = s.select == {"table": "trajectories"}
    noun = d.one(generic) if plain and d.chance(0.4) else s.noun(d)
    if kind:
        steps.append({"op": "where", "column": "poison", "equals": kind})
    said = {
        "flip": [
            "whose outcome labels look flipped",
            "with mislabelled outcomes",
            "whose labels seem wrong",
            "with label flips",
        ],
        "trigger": [
            "with a backdoor trigger",
            "whose outcome a trigger phrase decides",
            "carrying backdoor triggers",
            "with trigger phrases behind their labels",
            "whose label a backdoor phrase decides",
            "with a hidden trigger phrase",
        ],
        None: [
            "that look poisoned",
            "with suspicious labels",
            "checked for poisoning",
            "that may be poisoned",
            "with possibly poisoned labels",
            "suspected of label poisoning",
            "that might be poisoned",
        ],
    }[kind]
    if kind == "flip":
        said += [
            "with flipped labels",
            "whose outcome label disagrees with similar ones",
            "that seem mislabelled",
        ]
    sentence = d.frame(
        [
            f"{noun} {d.one(said)}",
            f"find {noun} {d.one(said)}",
            f"which {noun} are {d.one(said)}",
            f"check for {noun} {d.one(said)}",
            f"look for {noun} {d.one(said)}",
            f"show me any {noun} {d.one(said)}",
            f"scan the {noun} and list the ones {d.one(said)}",
            f"run the poisoning audit on {noun} and show those {d.one(said)}",
            f"detect {noun} {d.one(said)}",
            f"are any {noun} {d.one(said)}",
            f"{noun} {d.one(said)}, if any",
            f"I suspect label poisoning: find {noun} {d.one(said)}",
        ]
    )
    return sentence, steps


def joined(d: Draw) -> tuple[str, Steps]:
    s = scope(d, "steps", filters=0.3)
    steps: Steps = [{"op": "select", **s.select}]
    columns = d.one([None, ["risk_type"], ["decision"], ["severity"], ["risk_type", "severity"]])
    steps.append({"op": "join"} | ({"columns": columns} if columns else {}))
    what = (
        " and ".join(PLURALS[GROUPS[c][0]] for c in columns)
        if columns
        else d.one(["verdicts", "audit verdicts"])
    )
    noun = s.noun(d)
    one = SINGULAR["steps"]
    sentence = d.frame(
        [
            (
                f"each {one} with the {what} of its verdicts"
                if columns
                else f"each {one} with its {what}"
            )
            if s.select == {"table": "steps"}
            else f"each of the {noun} with the {what} of its verdicts"
            if columns
            else f"each of the {noun} with its {what}",
            f"{noun} joined with their {what}",
            f"{noun} together with their verdicts' {what}"
            if columns
            else f"{noun} alongside their {what}",
            f"attach the {what} to the {noun}",
            f"{noun} and the {what} they got",
            f"{noun} annotated with {what}",
            f"{noun} plus their {what}",
            f"combine {noun} with their {what}",
            f"{noun} with their {what} attached",
            f"join {noun} to their {what}",
            f"show the {what} next to each of the {noun}",
            f"{noun} enriched with their {what}",
            f"merge the {what} into the {noun}",
            f"{noun} along with the {what} they received",
            f"for each of the {noun}, the {what} it got",
            f"I need {noun} with their {what}",
            f"link {noun} to their {what}",
            f"{noun} and their {what} side by side",
            f"steps{d.tags(s)}, joined to their {what}",
            f"give me {noun} together with their {what}",
        ]
    )
    return sentence + output(d, "steps", steps, p=0.2), steps


def histogram(d: Draw) -> tuple[str, Steps]:
    table, column, said = d.one(
        [
            ("episodes", "task_reward", ["task rewards", "episode rewards"]),
            ("trajectories", "reward", ["rewards", "trajectory rewards"]),
            ("trajectories", "num_steps", ["lengths in steps", "trajectory lengths"]),
            ("verdicts", "score", ["verdict scores", "risk scores"]),
            ("episodes", "num_steps", ["episode lengths"]),
            ("scores", "composite", ["composite scores"]),
        ]
    )
    s = scope(d, table, filters=0.3)
    steps: Steps = [{"op": "select", **s.select}]
    step: dict[str, Any] = {"op": "histogram", "column": column}
    bins = ""
    if d.chance(0.4):
        step["bins"] = d.one([4, 5, 8, 20])
        bins = f"{step['bins']}-bin "
    steps.append(step)
    word = " ".join(w for w in (s.before, d.one(said)) if w)  # "os episode rewards"
    where = " " + s.after if s.after else ""
    n = step.get("bins")
    sentence = d.frame(
        [
            f"a {bins}histogram of {word}{where}",
            f"distribution of {word}{where}" + (f" in {step['bins']} bins" if bins else ""),
            f"{bins}histogram of the {word}{where}",
            f"how are the {word}{where} spread" + (f", {step['bins']} bins" if bins else ""),
            f"bin the {word}{where}" + (f" into {step['bins']} bins" if bins else ""),
            f"show the spread of {word}{where}" + (f" over {step['bins']} bins" if bins else ""),
            f"{word}{where} as a {bins}histogram",
            f"how {word}{where} are distributed" + (f" ({step['bins']} bins)" if bins else ""),
            f"{word}{where}, binned" + (f" into {n} bins" if n else ""),
            f"bucket the {word}{where}" + (f" into {n} buckets" if n else ""),
            f"what does the distribution of {word}{where} look like"
            + (f" with {n} bins" if n else ""),
            f"histogram: {word}{where}" + (f", {n} bins" if n else ""),
            f"{word}{where} in {n} buckets" if n else f"{word}{where} in buckets",
            f"frequency distribution of {word}{where}" + (f" over {n} bins" if n else ""),
            f"give me a {bins}histogram of {word}{where}",
            f"count {word}{where} per bin" + (f", {n} bins" if n else ""),
            f"how many {word}{where} fall in each bin" + (f" (with {n} bins)" if n else ""),
            f"I want to see how {word}{where} are distributed" + (f", {n} bins" if n else ""),
            f"a {n}-bucket breakdown of {word}{where}"
            if n
            else f"a breakdown of {word}{where} into bins",
            f"the shape of the {word}{where} distribution" + (f", {n} bins" if n else ""),
        ]
    )
    return sentence, steps


KINDS: list[tuple[Callable[[Draw], tuple[str, Steps]], int]] = [
    (rows, 14),
    (counts, 14),
    (fired, 3),
    (means, 7),
    (rates, 6),
    (best, 9),
    (latest, 4),
    (valuable, 7),
    (diverse, 5),
    (sample, 8),
    (search, 10),
    (dedupe, 4),
    (reaudit, 9),
    (poison, 4),
    (joined, 4),
    (histogram, 5),
]


def asks(d: Draw) -> str:
    """A request the planner must ask back about: one naming no kind of record. (A name the
    database lacks is caught after decoding: the grammar allows only names it holds.)"""
    frame: str = d.frame(
        [
            "show me everything",
            "what is in the database",
            "the bad ones",
            "give me the data",
            "export it all as csv",
            "what happened",
            "the latest records",
            "the most recent ones",
            "anything unusual",
            "records from yesterday",
            "the interesting stuff",
            "summarize",
            "what went wrong",
            "all of it",
            "the usual report",
            "how are we doing",
            "give me a summary",
            "any problems lately",
            "pull the numbers",
            "what's new",
            "something interesting please",
            "export everything",
            "the top 10",
            "what changed since last week",
            "can you check things",
            "a random sample",
            "plot something useful",
            "the biggest issues",
            "what do we have",
            "fetch the data from last week",
            "just dump it",
            "show the worst ones",
        ]
    )
    return frame


def pairs(n: int, *, seed: int = 0, split: str = "train", asking: float = 0.025) -> Iterator[Pair]:
    """``n`` pairs of ``split`` ("train" or "dev"), the same for the same seed."""
    rng = random.Random(f"{seed}:{split}")
    kinds = [k for k, _ in KINDS]
    weights = [w for _, w in KINDS]
    seen: set[str] = set()
    while len(seen) < n:
        d = Draw(rng, split)
        asked = rng.random() < asking
        if asked:
            sentence, steps = asks(d), None
        else:
            sentence, steps = rng.choices(kinds, weights)[0](d)
        lead = "" if sentence.split()[0] in UNLED else d.one(LEADS)
        if lead and steps and steps[-1]["op"] == "export" and d.chance(0.5):
            lead = d.one(EXPORT_LEADS)
        text = lead + sentence + d.one(TAILS)
        if sentence.startswith(QUESTIONS) and d.chance(0.6):
            text = lead + sentence + "?"
        text = text[0].upper() + text[1:] if d.chance(0.3) else text
        pair = Pair(text, ask="table") if asked else Pair(text, steps=steps)
        if pair.intent in seen:
            continue
        seen.add(pair.intent)
        yield pair
