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
from dataclasses import dataclass
from typing import Any

from .plan import Plan

Steps = list[dict[str, Any]]

ASK = "ask"
"""The answer's key when the planner asks back instead of planning: ``{"ask": "table"}``."""

DEV_EVERY = 4
"""Each ``DEV_EVERY``-th frame of a list (index 3, 7, …) belongs to the dev set."""

ENVS = {
    "os": ["os", "OS", "shell", "os"],
    "tools": ["tools", "tool-use", "tools"],
    "choice": ["choice"],
    "qa": ["qa", "QA"],
    "embodied": ["embodied"],
    "android": ["android", "Android"],
}
UNKNOWN_ENVS = ["browser", "web", "robotics", "minecraft", "coding", "sql", "email", "finance"]

NOUNS = {
    "steps": ["steps", "agent steps", "steps", "actions the agents took", "step records"],
    "episodes": ["episodes", "episodes", "episode records"],
    "verdicts": [
        "verdicts",
        "audit verdicts",
        "verdicts",
        "auditor verdicts",
        "findings",
        "audit decisions",
        "judgements",
    ],
    "trajectories": ["trajectories", "trajectories", "trajectory records", "rollouts"],
    "scores": ["scores", "scorer outputs", "scores"],
    "skills": ["skills", "learned skills", "lessons learned"],
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
    "destructive_operation": ["destructive operations", "destructive actions", "deletions"],
    "indirect_prompt_injection": ["indirect prompt injection", "injected instructions"],
    "direct_prompt_injection": ["direct prompt injection", "jailbreak attempts"],
    "goal_hijack": ["goal hijacking", "hijacked goals"],
    "harmful_content": ["harmful content", "harmful text"],
    "privacy_leak": ["privacy leaks", "leaked personal data"],
    "secret_exposure": ["exposed secrets", "secret exposure", "leaked credentials"],
    "data_exfiltration": ["data exfiltration", "data sent out"],
    "privilege_escalation": ["privilege escalation", "excess privileges"],
    "fraud": ["fraud", "fraudulent payments"],
    "insecure_code": ["insecure code"],
    "backdoor_trigger": ["backdoor triggers"],
    "data_poisoning": ["data poisoning", "poisoned data"],
    "over_refusal": ["over-refusal", "needless refusals"],
}

CHECKERS = {
    "rule.pii": ["pii rule", "PII rule", "personal-data rule", "rule.pii"],
    "rule.secrets": ["secrets rule", "secret-detection rule", "rule.secrets"],
    "rule.injection_markers": ["injection-marker rule", "injection markers rule"],
    "rule.jailbreak_phrases": ["jailbreak-phrase rule", "jailbreak rule"],
    "rule.credential_exfiltration": ["credential-exfiltration rule"],
    "rule.insecure_code": ["insecure-code rule"],
    "harm.beyond_scope": ["destructive-command rule", "beyond-scope rule", "harm.beyond_scope"],
    "harm.data_leak": ["data-leak rule", "data-leak check"],
    "harm.steered_action": ["steered-action rule", "steered-action check"],
    "harm.unrequested_action": ["unrequested-action rule"],
    "harm.excess_privilege": ["excess-privilege rule"],
    "model.toxicity": ["toxicity model", "toxicity checker"],
    "model.jailbreak": ["jailbreak model"],
    "deep.action_harm": ["deep action-harm head", "action-harm head"],
}

SEVERITIES = {
    "critical": ["critical", "critical-severity"],
    "high": ["high severity", "high-severity", "severe"],
    "medium": ["medium severity", "medium-or-worse", "at least medium severity"],
    "low": ["flagged", "non-trivial", "raised"],
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
    "csv": ["as csv", "as a CSV file", "to csv", "in CSV", "as a spreadsheet", "into a csv"],
    "parquet": ["as parquet", "to a parquet file", "in Parquet format", "into parquet"],
    "chat_jsonl": [
        "as chat JSONL",
        "in OpenAI chat format",
        "as chat jsonl for fine-tuning",
        "as fine-tuning data",
        "as chat-format jsonl",
    ],
    "otel": [
        "as OpenTelemetry traces",
        "as OTel traces",
        "in OpenTelemetry format",
        "as OTLP traces",
    ],
}
EXPORT_LEADS = ["export ", "save ", "write ", "dump ", "export ", "save "]
"""Verbs that open a request ending in an export."""
EXTENSION = {"csv": "csv", "parquet": "parquet", "chat_jsonl": "jsonl", "otel": "jsonl"}

GROUPS = {
    "env": ["env", "environment", "env"],
    "policy_version": ["policy version", "version", "policy version"],
    "risk_type": ["risk type", "kind of risk", "risk type"],
    "severity": ["severity", "severity level"],
    "checker": ["checker", "check"],
    "decision": ["decision", "auditor decision"],
    "outcome": ["outcome", "result"],
    "task_id": ["task", "task id"],
}
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
NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 10: "ten", 20: "twenty"}

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
}
"""First words of a sentence that takes no lead ("show me draw 5…" reads wrong)."""
TAILS = ["", "", "", "", " please", ".", " for me"]


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
        return self.one([3, 5, 5, 10, 10, 15, 20, 25, 30, 50, 100, 200])

    def count(self, k: int) -> str:
        return NUMBERS[k] if k in NUMBERS and self.chance(0.3) else str(k)


@dataclass
class Scope:
    """What ``select`` keeps, said as words around a table's noun."""

    table: str
    select: dict[str, Any]
    before: str = ""
    after: str = ""

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
        if d.chance(0.4):
            s.before = said
        else:
            afters.append(
                d.one(
                    [
                        f"from the {said} env",
                        f"of the {said} environment",
                        f"in the {said} env",
                        f"from {said}",
                    ]
                )
            )
    if d.chance(filters * 0.35):
        v = d.rng.randrange(0, 13)
        if d.chance(0.5):
            s.select["policy_version"] = v
            afters.append(
                d.one(
                    [
                        f"of policy version {v}",
                        f"from version {v}",
                        f"at policy version {v}",
                        f"produced by policy v{v}",
                    ]
                )
            )
        else:
            s.select["min_policy_version"] = v
            afters.append(
                d.one(
                    [
                        f"since version {v}",
                        f"from policy version {v} on",
                        f"of version {v} or later",
                        f"since policy v{v}",
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
            ]
        )
        s.select["within_days"] = days
        said = said or d.one([f"the last {days} days", f"the past {days} days"])
        afters.append(
            said if said == "today" else d.one([f"from {said}", f"in {said}", f"of {said}"])
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
        afters.append(d.one([f"of task {task}", f"for task {task}", f"on task {task}"]))
    s.after = " ".join(afters)
    return s


def verdict_scope(d: Draw) -> Scope:
    """Verdicts, sometimes narrowed to a risk type or a least severity."""
    s = scope(d, "verdicts")
    if d.chance(0.3):
        risk = d.one(list(RISKS))
        s.select["risk_type"] = risk
        s.after = " ".join(
            w for w in (d.one(["about", "on", "for"]) + " " + d.one(RISKS[risk]), s.after) if w
        )
    elif d.chance(0.35):
        level = d.one(list(SEVERITIES))
        s.select["min_severity"] = level
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


def narrowed(d: Draw, s: Scope, steps: Steps, p: float = 0.35) -> None:
    """Maybe add a ``where`` of the table's yes/no or label columns to ``steps``."""
    if s.table not in WHERES or not d.chance(p):
        return
    column, value, before, after = d.one(WHERES[s.table])
    steps.append({"op": "where", "column": column, "equals": value})
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
    phrase = d.one([f"from the {said}", f"raised by the {said}", f"of the {said}"])
    s.after = " ".join(w for w in (s.after, phrase) if w)


def thresholded(d: Draw, s: Scope, steps: Steps) -> None:
    """Maybe a numeric ``where`` (reward, score, length) said as above / below / between."""
    options = {
        "trajectories": ("reward", ["reward", "a reward"]),
        "episodes": ("task_reward", ["task reward", "a task reward"]),
        "verdicts": ("score", ["a score", "score"]),
    }
    if s.table not in options or not d.chance(0.3):
        return
    if s.table != "verdicts" and d.chance(0.3):
        n = d.one([3, 4, 5, 8, 10, 20])
        bound, phrase = d.one(
            [
                ({"min": n}, f"with at least {n} steps"),
                ({"min": n + 1}, f"longer than {n} steps"),
                ({"max": n}, f"with at most {n} steps"),
                ({"max": n - 1}, f"shorter than {n} steps"),
            ]
        )
        steps.append({"op": "where", "column": "num_steps"} | bound)
        s.after = " ".join(w for w in (s.after, phrase) if w)
        return
    column, said = options[s.table]
    x = d.one([0.2, 0.3, 0.5, 0.7, 0.8, 0.9])
    word = d.one(said)
    shape = d.one(["min", "min", "max", "between"])
    if shape == "min":
        steps.append({"op": "where", "column": column, "min": x})
        phrase = d.one(
            [
                f"with {word} of at least {x}",
                f"with {word} above {x}",
                f"whose {column.replace('_', ' ')} is {x} or more",
            ]
        )
    elif shape == "max":
        steps.append({"op": "where", "column": column, "max": x})
        phrase = d.one([f"with {word} below {x}", f"with {word} of at most {x}"])
    else:
        lo = d.one([0.0, 0.1, 0.2])
        steps.append({"op": "where", "column": column, "min": lo, "max": x})
        phrase = f"with {word} between {lo} and {x}"
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
        ]
    )
    noun = s.noun(d)
    sentence = frame.format(
        np=noun,
        out=out,
        one=SINGULAR[table],
        rest=" ".join(w for w in (s.before, s.after) if w) or "stored",
    )
    return sentence if "{out}" in frame else sentence + out, steps


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
        ]
    ).format(np=s.noun(d), g=words)
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
    sentence = d.frame(
        [
            f"how often did each {g} {verb}{per}",
            f"how many times each {g} fired{per}",
            f"number of times every {g} was flagged{per}",
            f"which {g}s fired and how often{per}",
            f"firing counts of each {g}{per}",
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
    shape = d.one(
        [
            "{s} as a chart",
            "{s} as a bar chart",
            "chart the {s}",
            "plot {s}",
            "a chart of {s}",
            "{s}, drawn as bars",
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
        ]
    ).format(c=d.one(said), np=s.noun(d), g=d.one(GROUPS[by[0]]))
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
            f"rate of {d.one(said)} per {g}",
            f"fraction of {column} {noun} by {g}",
            f"how often were {noun} {column}, per {g}",
            f"{column} rate of {noun} per {g}",
            f"percentage of {noun} that were {column} for each {g}",
            f"proportion of {column} {noun} per {g}",
            f"per {g}, how many {noun} in a hundred were {column}",
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
    sentence = d.frame(
        [
            f"the {d.count(k)} {adj} {noun} by {word}",
            f"top {k} {noun} by {word}" if not lowest else f"bottom {k} {noun} by {word}",
            f"the {k} {noun} with the {way} {word}",
            f"which {d.count(k)} {noun} have the {way} {word}",
            f"{k} {adj}-{word} {noun}" if word in ("rewarded", "scoring") else f"{k} {adj} {noun}",
            f"the {d.count(k)} {way} {word} {noun}",
            f"{noun} ranked by {word}, {'lowest' if lowest else 'highest'} {k}",
            f"give the {k} {noun} whose {word} is {'lowest' if lowest else 'highest'}",
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
    how = " with the language model" if lm else ""
    column = d.one(["ifd", "perplexity", "value"]) if lm else "value"
    if shape == "top":
        steps.append({"op": "top", "column": column, "k": k})
        said = {"ifd": "IFD", "perplexity": "perplexity", "value": "value"}[column]
        sentence = d.frame(
            [
                f"the {d.count(k)} most valuable {noun}"
                if column == "value"
                else f"score {noun}{how} and keep the {k} with the highest {said}",
                f"top {k} {noun} by data value"
                if column == "value"
                else f"the {k} {noun} with the highest {said}{how}",
                f"{k} highest-{said} {noun}{how}",
                f"which {k} {noun} are worth the most for training"
                if column == "value"
                else f"rank {noun} by {said}{how}, top {k}",
            ]
        )
    elif shape == "diverse":
        steps.append({"op": "diverse", "k": k, "weight": "value"})
        sentence = d.frame(
            [
                f"{k} valuable and diverse {noun}",
                f"a varied set of {k} high-value {noun}",
                f"the {k} most valuable {noun}, diverse",
                f"{k} {noun} worth training on that differ from each other",
            ]
        )
    else:
        sentence = d.frame(
            [
                f"value scores of {noun}{how}",
                f"score the {noun}{how}",
                f"how valuable is each of the {noun}{how}",
                f"data value of every {noun}{how}",
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
    if d.chance(0.5):
        step["seed"] = d.one([1, 2, 3, 7, 11, 42, 123, 2024])
        seed = d.one(
            [
                f" with seed {step['seed']}",
                f", seed {step['seed']}",
                f" using seed {step['seed']}",
                f" (random seed {step['seed']})",
            ]
        )
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
    q = query_
    sentence = d.frame(
        [
            f"{noun} about {q}",
            f"{head} closest to {q}",
            f"{head} that resemble {q}",
            f"{noun} similar to {q}",
            f"{head} most like {q}",
            f"{noun} related to {q}",
            f"search the {noun} for {q}",
            f"{head} that look like {q}",
            f"{head} nearest in meaning to {q}",
            f"{head} that mention {q}",
            f"find {head} about {q}",
            f"{head} where the agent was {q}",
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
        change = (
            " "
            + d.one(["without", "leaving out", "minus", "with no"])
            + " "
            + " and ".join("the " + d.one(CHECKERS[n]) for n in names)
        )
    elif shape == "fast":
        change = " " + d.one(
            [
                "with the fast checkers",
                "with the default checkers",
                "with the rules and heuristics",
                "with the fast tier",
            ]
        )
    elif shape == "only":
        names = d.rng.sample(list(CHECKERS), 1)
        step["checkers"] = names
        change = " with only the " + d.one(CHECKERS[names[0]])
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
        ],
        None: [
            "that look poisoned",
            "with suspicious labels",
            "checked for poisoning",
            "that may be poisoned",
        ],
    }[kind]
    sentence = d.frame(
        [
            f"{noun} {d.one(said)}",
            f"find {noun} {d.one(said)}",
            f"which {noun} are {d.one(said)}",
            f"check for {noun} {d.one(said)}",
        ]
    )
    return sentence, steps


def joined(d: Draw) -> tuple[str, Steps]:
    s = scope(d, "steps", filters=0.3)
    steps: Steps = [{"op": "select", **s.select}]
    columns = d.one([None, ["risk_type"], ["decision"], ["severity"], ["risk_type", "severity"]])
    steps.append({"op": "join"} | ({"columns": columns} if columns else {}))
    what = (
        " and ".join(GROUPS[c][0] + "s" for c in columns)
        if columns
        else d.one(["verdicts", "audit verdicts"])
    )
    noun = s.noun(d)
    one = SINGULAR["steps"]
    sentence = d.frame(
        [
            f"each {one} with the {what} of its verdicts"
            if columns
            else f"each {one} with its {what}",
            f"{noun} joined with their {what}",
            f"{noun} together with their verdicts' {what}"
            if columns
            else f"{noun} alongside their {what}",
            f"attach the {what} to the {noun}",
            f"{noun} and the {what} they got",
            f"{noun} annotated with {what}",
            f"{noun} plus their {what}",
            f"combine {noun} with their {what}",
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
    word = d.one(said)
    where = " " + s.after if s.after else ""
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
        if sentence.startswith(("which", "what", "how")) and d.chance(0.6):
            text = lead + sentence + "?"
        text = text[0].upper() + text[1:] if d.chance(0.3) else text
        pair = Pair(text, ask="table") if asked else Pair(text, steps=steps)
        if pair.intent in seen:
            continue
        seen.add(pair.intent)
        yield pair
