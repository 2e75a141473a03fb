"""A plan grounded in the request: what it states is used, what it does not state is not
guessed. A small planner reads words well and facts poorly: it writes a ``k`` nobody asked
for, or loses the seed the request gave. Facts are checked here, by principle, not by
model:

* **numbers** — a plan's optional counts (a search's ``k``, seeds, versions, bins) are
  numbers the request states (digits, number words, "a dozen") or the parameter's own
  default: the answer grammar is narrowed to them (:func:`grounded`), so none is made up;
* a number the request states in digits and the plan leaves unused goes to the one unset
  count-like parameter (``k``, ``seed``, ``bins``) that can take it, if there is exactly one
  (:func:`filled`);
* **names** — where the request names envs, risk types or checkers the way users say them,
  the grammar admits only those (the destructive-command rule is not the secrets rule);
* **yes/no filters** — a yes/no column the request says plainly ("blocked steps") is a
  yes, said negated ("not blocked", "unblocked", "non-injected") a no
  (:func:`polarity`);
* **risk types** — a risk type the request names for verdicts is filtered on;
* **values** — a filter on a value its column can never hold ("decision = destroy") is a
  value made up, and is left out (:func:`possible`);
* **envs** — an env the request names ("the choice env") is filtered on; one it never
  names is not (:func:`unguessed`), and one it names that the database lacks, or a risk
  type likewise, is asked about;
* **shape** — the plan's shape is the one the request asks for: rows are ranked, counted,
  turned into a rate or a histogram, re-audited down to the changed ones, scored by the
  language model, only when the request says so (:func:`asked_ranking`,
  :func:`asked_grouping`, :func:`asked_rate`, :func:`asked_histogram`,
  :func:`asked_changed`, :func:`said_lm`), and a step reads only columns its rows can have
  (:func:`held_columns`, :func:`scored_first`).

What a request states that the plan left out (a bound, a fact, a version, a label...) is put
back by :mod:`.stated`, and the outputs it asks for, as it names them, by :mod:`.outputs`;
:func:`ground` applies them all.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from pydantic import BaseModel

from ...schemas import Decision, Outcome, Severity
from .corpus import CHECKERS, ENVS, MEANS, NOUNS, RATES, RISKS, SINGULAR, UNKNOWN_ENVS
from .meaning import Score
from .outputs import asked_outputs, said_outputs
from .plan import Plan
from .stated import (
    NUMERIC,
    columns_of,
    reselected,
    said_aggregate,
    said_bounds,
    said_checker,
    said_columns,
    said_decision,
    said_distinct,
    said_diverse,
    said_each_value,
    said_fact_rows,
    said_facts,
    said_grouped_values,
    said_groups,
    said_histogram,
    said_histogram_column,
    said_join,
    said_joined_groups,
    said_likeness,
    said_off,
    said_other_table,
    said_outcome,
    said_poison,
    said_poisoning,
    said_query,
    said_quote,
    said_random,
    said_ranked_column,
    said_rate,
    said_rerun,
    said_sample,
    said_search,
    said_search_column,
    said_severity_floor,
    said_top,
    said_units,
    said_version,
    said_window,
    step_in,
)

NUMBER_WORDS = {
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "dozen": 12,
    "fifteen": 15,
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "hundred": 100,
}
DAYS_IN = {"day": 1, "days": 1, "week": 7, "weeks": 7, "fortnight": 14, "month": 30, "months": 30}
"""Units of time a request may count in, in days (``within_days``)."""
DIGITS = re.compile(r"(?<![\d.])\d+(?:\.\d+)?|(?<![\d.])\.\d+")
COUNTED = re.compile(r"(\d+(?:\.\d+)?)\s*(%|percent\b|hours?\b|days?\b|weeks?\b|months?\b)")
FILLABLE = ("k", "seed", "bins")
"""Count-like parameters a stated but unused number may go to."""


def said_numbers(intent: str) -> list[float]:
    """The numbers the request writes in digits, in order."""
    return [float(m) for m in DIGITS.findall(intent)]


def loose_numbers(intent: str) -> list[float]:
    """The numbers written in digits that count no unit ("24 hours" and "50 %" are
    converted, not loose): those a plan must use somewhere."""
    return said_numbers(COUNTED.sub(" ", intent.lower()))


def stated_numbers(intent: str) -> set[float]:
    """Every number the request states: digits, number words, and counts of time or
    percent converted to what parameters hold (days; fractions)."""
    said = intent.lower()
    numbers = set(said_numbers(said))
    words = re.findall(r"[a-z]+", said)
    numbers |= {float(NUMBER_WORDS[w]) for w in words if w in NUMBER_WORDS}
    numbers |= {1.0 for w in words if w in ("today", "yesterday", "day", "24")}
    numbers |= {float(DAYS_IN[w]) for w in words if w in DAYS_IN}
    for value, unit in COUNTED.findall(said):
        n = float(value)
        if unit in ("%", "percent"):
            numbers.add(n / 100)
        elif unit.startswith("hour"):
            numbers.add(max(n / 24, 1 / 24))
        else:
            numbers.add(n * DAYS_IN[unit])
    return numbers


def _numeric(schema: dict[str, Any]) -> bool:
    """An integer parameter: counts, seeds, versions, bins. (Fractional ones, days and
    thresholds, stay free: the grammar writes an enum's 7.0 as 7, not as trained.)"""
    return schema.get("type") == "integer"


def _allowed(schema: dict[str, Any], numbers: set[float]) -> list[int | float]:
    """The whole numbers an integer ``schema`` admits."""
    out = []
    for n in sorted(numbers):
        if n != int(n):
            continue
        if "minimum" in schema and n < schema["minimum"]:
            continue
        if "exclusiveMinimum" in schema and n <= schema["exclusiveMinimum"]:
            continue
        if "maximum" in schema and n > schema["maximum"]:
            continue
        out.append(int(n))
    return out


def _ground_property(name: str, prop: dict[str, Any], numbers: set[float]) -> dict[str, Any] | None:
    """An optional integer parameter narrowed to ``numbers`` and its default; None when no
    number can be written there (it is left out); any other parameter as it was."""
    default = prop.get("default")
    mine = set(numbers) | ({float(default)} if isinstance(default, int) else set())
    branches = prop.get("anyOf")
    if branches is None:
        if not _numeric(prop):
            return prop
        allowed = _allowed(prop, mine)
        return {"enum": allowed, "default": default} if allowed else None
    if not any(_numeric(b) for b in branches):
        return prop
    kept = [b for b in branches if not _numeric(b)]
    kept += [{"enum": allowed} for b in branches if _numeric(b) and (allowed := _allowed(b, mine))]
    return {**prop, "anyOf": kept} if kept else None


SAID = {"env": ENVS, "risk_type": RISKS, "checker": CHECKERS}
"""How users say each kind of name the grammar enumerates."""


def named(intent: str, kind: str, names: list[str]) -> list[str]:
    """The ``names`` of ``kind`` the request says (as a whole word or phrase)."""
    said = intent.lower()
    forms = SAID.get(kind, {})
    return [
        name
        for name in names
        if any(
            re.search(rf"(?<![\w-]){re.escape(form.lower())}(?![\w-])", said)
            for form in {name, name.replace("_", " "), *forms.get(name, [])}
        )
    ]


def grounded(schema: dict[str, Any], intent: str) -> dict[str, Any]:
    """The answer ``schema`` with every optional integer parameter narrowed to the numbers
    ``intent`` states (:func:`stated_numbers`) and the parameter's default (a required count
    stays free: the request's numbers may be days or versions), and each kind of name the
    request says (:func:`named`) narrowed to those it says."""
    numbers = stated_numbers(intent)
    out = copy.deepcopy(schema)
    for kind, rule in out.get("$defs", {}).items():
        if kind in SAID and (said := named(intent, kind, rule.get("enum", []))):
            rule["enum"] = said

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
            return
        if not isinstance(node, dict):
            return
        properties = node.get("properties")
        if isinstance(properties, dict) and "op" in properties:
            required = set(node.get("required", []))
            for name in [p for p in properties if p not in required]:
                prop = _ground_property(name, properties[name], numbers)
                if prop is None:
                    del properties[name]
                else:
                    properties[name] = prop
        for key, value in node.items():
            if key != "properties":
                walk(value)
            else:
                walk(list(value.values()))

    walk(out)
    return out


def _values(node: Any) -> list[Any]:
    if isinstance(node, BaseModel):
        return _values(node.model_dump())
    if isinstance(node, dict):
        return [v for x in node.values() for v in _values(x)]
    if isinstance(node, list):
        return [v for x in node for v in _values(x)]
    return [node]


def _used(n: float, values: list[Any]) -> bool:
    for v in values:
        if isinstance(v, int | float) and not isinstance(v, bool) and abs(v - n) <= 1:
            return True  # within one: "longer than 3" is a minimum of 4
        if isinstance(v, str) and n in said_numbers(v):
            return True
    return False


def filled(intent: str, plan: Plan) -> Plan:
    """``plan`` with each loose number ``intent`` states in digits but the plan leaves unused put
    in the one unset count-like parameter (:data:`FILLABLE`) of a later step that takes
    it, when there is exactly one; otherwise the plan as it was."""
    steps = list(plan.steps)
    for n in loose_numbers(intent):
        if n != int(n) or _used(n, _values(steps)):
            continue
        open_ = [
            (i, name)
            for i, step in enumerate(steps[1:], start=1)
            for name in FILLABLE
            if name in type(step).model_fields and name not in step.model_fields_set
        ]
        if len(open_) == 1:
            i, name = open_[0]
            update = steps[i].model_dump(exclude_unset=True) | {name: int(n)}
            steps[i] = type(steps[i]).model_validate(update)
    return plan.model_copy(update={"steps": steps})


NEGATIONS = ("not", "no", "never", "without")


def polarity(intent: str, column: str) -> bool | None:
    """How the request says a yes/no ``column``: True when plainly ("blocked"), False when
    negated ("not blocked", "unblocked", "non-blocked"), None when not at all or both."""
    said_as = re.search(rf"\b{column}\s*[=:]\s*(true|false|yes|no)\b", intent.lower())
    if said_as:
        return said_as.group(1) in ("true", "yes")
    words = re.findall(r"[a-z]+(?:-[a-z]+)*", intent.lower())
    said = set()
    for i, word in enumerate(words):
        if word == column:
            said.add(not (i and words[i - 1] in NEGATIONS))
        elif word in (f"un{column}", f"non-{column}", f"non{column}"):
            said.add(False)
    return said.pop() if len(said) == 1 else None


def polarized(intent: str, plan: Plan) -> Plan:
    """``plan`` with each yes/no ``where`` turned the way the request says it."""
    steps = list(plan.steps)
    for i, step in enumerate(steps):
        equals = getattr(step, "equals", None)
        if step.NAME == "where" and isinstance(equals, bool):
            said = polarity(intent, step.column)
            if said is not None and said != equals:
                steps[i] = step.model_copy(update={"equals": said})
    return plan.model_copy(update={"steps": steps})


DOMAINS = {
    "decision": {str(d) for d in Decision},
    "outcome": {str(o) for o in Outcome},
    "severity": {str(s) for s in Severity},
}
"""The closed sets of values some columns hold."""


def possible(plan: Plan) -> Plan:
    """``plan`` without a ``where`` on a value its column can never hold (:data:`DOMAINS`;
    a word for a number column, :data:`NUMERIC`), nor a numeric bound on a column of names
    ("severity at most 10")."""
    numeric = columns_of(getattr(plan.steps[0], "table", "")) & NUMERIC
    kept = [
        s
        for s in plan.steps
        if not (
            s.NAME == "where"
            and (
                (
                    s.column in DOMAINS
                    and (
                        (isinstance(s.equals, str) and s.equals not in DOMAINS[s.column])
                        or s.min is not None
                        or s.max is not None
                    )
                )
                or (s.column in numeric and isinstance(s.equals, str))
            )
        )
    ]
    return plan.model_copy(update={"steps": kept})


NAMED_ENV = re.compile(r"\b([\w-]+)[\s-]+env(?:ironment)?s?\b(?!\s*[=:])", re.IGNORECASE)
ENV_IS = re.compile(r"\benv(?:ironment)?\s*=\s*([\w-]+)", re.IGNORECASE)
NOT_A_NAME = {
    "each",
    "per",
    "every",
    "the",
    "an",
    "a",
    "and",
    "or",
    "with",
    "which",
    "any",
    "all",
    "by",
    "this",
    "that",
    "one",
    "same",
    "its",
    "their",
    "other",
    "another",
    "what",
    "whose",
    "of",
    "in",
    "from",
    "for",
    "agent",
    "me",  # and the verbs a request opens with: "pull env by env averages"
    "pull",
    "show",
    "get",
    "give",
    "list",
    "fetch",
    "grab",
    "see",
    "find",
    "count",
    "compute",
    "chart",
    "plot",
    "graph",
    "draw",
}
RECORDS = r"(?:agents?\s+)?(?:{})".format(
    "|".join(
        sorted(
            {w for nouns in NOUNS.values() for n in nouns for w in [n.split()[0]]}
            | {s for s in SINGULAR.values()}
            | {"runs", "records", "rows", "events", "data", "judgements", "judgments"},
            key=len,
            reverse=True,
        )
    )
)
"""The words a request names records with: an env said just before them is the env."""


def _env_forms() -> list[tuple[str, str | None]]:
    """Every way the corpus says an env, longest first: (form, env), None for an env this
    factory does not run."""
    forms = [(form, env) for env, names in ENVS.items() for form in {env, *names}]
    forms += [(env, None) for env in UNKNOWN_ENVS]
    return sorted(forms, key=lambda f: -len(f[0]))


def stated_env(intent: str) -> str | None:
    """The env the request names, if any: "<name> env", "env=<name>", or an env's name just
    before the records ("the email scores", "minecraft agent trajectories", "in tools";
    "per env" names none)."""
    said = intent.lower()
    for form, _ in _env_forms():
        f = re.escape(form.lower())
        if (
            re.search(
                rf"(?<![\w-]){f}(?:[\s-]+env(?:ironment)?s?\b|\s+{RECORDS}\b|\s+only\b)", said
            )
            or re.search(rf"\b(?:in|from)\s+(?:the\s+)?{f}(?![\w-])(?!\s+(?:and|or)\b)", said)
            or re.search(rf"\benv(?:ironment)?\s*[=:]?\s*{f}(?![\w-])", said)
        ):
            return form
    if match := ENV_IS.search(intent):
        return match.group(1)
    for match in NAMED_ENV.finditer(intent):
        if match.group(1).lower() not in NOT_A_NAME:
            return match.group(1)
    return None


def env_of(said: str) -> str | None:
    """The env a request's name for it means ("shell" is os), None when none is."""
    said = said.lower()
    for env, names in ENVS.items():
        if said == env or said in (n.lower() for n in names):
            return env
    return None


def unnamed(intent: str, plan: Plan) -> str | None:
    """What the plan filters on that the intent does not name (``env`` or ``risk_type``),
    so the planner chose it among the database's values by guess; None when all is named."""
    said = intent.lower()
    select = plan.steps[0]
    env = getattr(select, "env", None)
    forms = [re.escape(n.lower()) for n in [env or "", *ENVS.get(env or "", [])]]
    if env and not any(re.search(rf"(?<!\w){f}(?!\w)", said) for f in forms):
        return "env"  # a name said as a word: "os" is not said in "closest"
    risk = getattr(select, "risk_type", None)
    if risk:
        words = {w for n in [risk, *RISKS.get(risk, [])] for w in n.replace("_", " ").split()}
        if not any(w[:5].lower() in said for w in words if len(w) > 3):
            return "risk_type"
    return None


def _unsearched(intent: str, plan: Plan, risk: str) -> Plan:
    """``plan`` without a search whose query is only the name of ``risk`` and whose ``k``
    the request never states: "verdicts about data poisoning" asks for that risk type's verdicts,
    all of them, not the 20 whose text reads most like the words."""
    forms = {risk, risk.replace("_", " "), *(f.lower() for f in RISKS[risk])}
    kept = [
        s
        for s in plan.steps
        if not (
            s.NAME == "search"
            and s.k not in stated_numbers(intent)
            and s.query.lower().strip(" .") in forms
        )
    ]
    return plan.model_copy(update={"steps": kept})


RISK_GROUPED = re.compile(
    r"\b(?:which|what|each|every|per|by|all|across|different)\s+(?:risk[ _]types?|kinds? of risk"
    r"|types? of risk)"
)
"""How a request speaks of risk types as groups ("which risk types turned up"), naming none."""
RISK_NAMED = re.compile(
    r"\b(?:about|regarding|concerning|involving|flagging|for|of type|risks?|risk types?)\s+\w"
)
"""How a request names a risk (known or not): "verdicts about spam" asks which is meant."""


def unguessed(intent: str, plan: Plan) -> tuple[Plan, str | None]:
    """``plan`` with what the planner guessed settled: an env, task or risk-type filter the
    request never states is dropped (a filter nobody asked for is not applied), one it names
    (:func:`stated_env`) is the one filtered on, whatever the plan guessed, and so is a risk
    type it names for verdicts; an env or risk type the request names but the database
    lacks is a question (returned: what to ask about)."""
    select = plan.steps[0]
    said_env = stated_env(intent)
    env = env_of(said_env) if said_env else None
    if said_env and env is None:  # "the warehouse env": no such env, whatever the plan says
        return plan, "env"
    grouped = {g for s in plan.steps for g in (getattr(s, "by", None) or [])}
    if env and getattr(select, "env", None) != env and "env" not in grouped:
        plan = reselected(plan, env=env)
    risks = named(intent, "risk_type", list(RISKS))
    if len(risks) == 1 and select.table == "verdicts":
        plan = _unsearched(intent, plan, risks[0])
    if (
        len(risks) == 1
        and select.table == "verdicts"
        and getattr(select, "risk_type", None) is None
        and "risk_type" not in grouped
        and not any(s.NAME == "search" for s in plan.steps)
        and not any(getattr(s, "column", None) == "checker" for s in plan.steps)
    ):
        plan = reselected(plan, risk_type=risks[0])
    task = getattr(select, "task", None)
    if task and task.lower() not in intent.lower():  # a task id is said as it is written
        plan = reselected(plan, task=None)
    about = unnamed(intent, plan)
    if about == "env" and said_env is None:
        plan = reselected(plan, env=None)
        about = unnamed(intent, plan)
    said = intent.lower()
    if about == "risk_type" and (not RISK_NAMED.search(said) or RISK_GROUPED.search(said)):
        plan = reselected(plan, risk_type=None)  # no risk type said: none is filtered on
        about = unnamed(intent, plan)
    return plan, about


def _mean_words(table: str) -> dict[str, list[str]]:
    """The columns a request may average over ``table``, with how it says each."""
    words = {column: [column.replace("_", " "), *said] for column, said in MEANS.get(table, [])}
    for column, (of, _, _, said) in RATES.items():
        if of == table:
            words[column] = [column, *said]
    return words


def said_means(intent: str, plan: Plan) -> Plan:
    """``plan`` whose averages are of a column the request speaks of: a mean of a column it
    never says is the one column it does say (of those the table can average), or, when it
    says none, a count (the aggregate without a mean)."""
    said = intent.lower()
    steps = list(plan.steps)
    for i, step in enumerate(steps):
        if step.NAME != "aggregate" or not step.mean:
            continue
        words = _mean_words(plan.steps[0].table)
        spoken = [c for c, forms in words.items() if any(f.lower() in said for f in forms)]
        if step.mean in spoken:
            continue
        mean = spoken[0] if len(spoken) == 1 else None
        steps[i] = step.model_copy(update={"mean": mean})
    return plan.model_copy(update={"steps": steps})


SAID_OF = {
    "outcome": (
        "succe",
        "fail",
        "safe",
        "unsafe",
        "trunc",
        "error",
        "abandon",
        "halt",
        "outcome",
        "result",
        "ended",
        "went",
    ),
    "decision": (
        "allow",
        "through",
        "permit",
        "pass",
        "warn",
        "block",
        "uncertain",
        "undecid",
        "error",
        "decision",
        "decided",
        "flag",
    ),
    "severity": ("none", "low", "medium", "high", "critical", "sever", "serious", "minor", "major"),
}
"""Word stems that speak of each closed-set column's values."""


def said_values(intent: str, plan: Plan) -> Plan:
    """``plan`` without a ``where`` on a closed-set column (:data:`DOMAINS`) the request never
    speaks of (:data:`SAID_OF`: "failed", "unsafe" speak of the outcome): a filter nobody
    asked for is a guess."""
    words = re.findall(r"[a-z]+", intent.lower())
    kept = [
        s
        for s in plan.steps
        if not (
            s.NAME == "where"
            and s.column in SAID_OF
            and not any(stem in w for w in words for stem in SAID_OF[s.column])
        )
    ]
    return plan.model_copy(update={"steps": kept})


RANKING = re.compile(
    r"\b(?:top|best|worst|bottom|most|least|latest|newest|oldest|recent\w*|earliest|last|first"
    r"|next|high\w*|low\w*|big\w*|large\w*|small\w*|great\w*|long\w*|short\w*|max\w*"
    r"|min\w*|rank\w*|sort\w*|order\w*|lead\w*|strong\w*|weak\w*|riski\w*|hard\w*|easi\w*"
    r"|worse|better|peak|extreme\w*|fresh\w*|limit)\b"
)
"""The words that ask for rows ranked by something."""


def asked_ranking(intent: str, plan: Plan) -> Plan:
    """``plan`` without a ``top`` the request never asks for: one whose ``k`` it does not
    state, when it says no word of ranking (:data:`RANKING`). "List the episodes" is every
    episode, not the 5 newest."""
    if RANKING.search(intent.lower()):
        return plan
    numbers = stated_numbers(intent)
    kept = [s for s in plan.steps if not (s.NAME == "top" and s.k not in numbers)]
    return plan.model_copy(update={"steps": kept})


DENIED = re.compile(r"\b(?:not|no|rather than|instead of|never)(?: an?| the| as| in)?\s*$")


def affirmed(words: re.Pattern[str], intent: str) -> bool:
    """Whether the request says one of ``words`` other than to deny it: "the mean, not the
    distribution" does not ask for a distribution."""
    said = intent.lower()
    return any(not DENIED.search(said[: m.start()]) for m in words.finditer(said))


RATE_SAID = re.compile(
    r"\b(?:rates?|share|fraction|proportion|percent\w*|ratio|how often|how likely|in a hundred"
    r"|out of every)\b|%"
)
"""The words that ask how often something holds: a rate, not a count."""


def asked_rate(intent: str, plan: Plan) -> Plan:
    """``plan`` whose counts of the rows where a yes/no column holds become that column's
    rate when the request asks how often (:data:`RATE_SAID`): "per policy, how many steps in
    a hundred were blocked" is the mean of ``blocked`` per policy, not a count of blocked
    steps."""
    if not affirmed(RATE_SAID, intent):
        return plan
    steps = list(plan.steps)
    for i, step in enumerate(steps):
        if not (step.NAME == "where" and step.column in RATES and step.equals is True):
            continue
        later = [j for j in range(i + 1, len(steps)) if steps[j].NAME == "aggregate"]
        if later and steps[later[0]].mean is None:
            steps[later[0]] = steps[later[0]].model_copy(update={"mean": step.column})
            return plan.model_copy(update={"steps": steps[:i] + steps[i + 1 :]})
    return plan


HISTOGRAM_SAID = re.compile(r"\b(?:histograms?|bins?|buckets?|binned|bucketed|distribut\w*)\b")
"""The words that ask how values spread: a histogram, not an average."""


def asked_histogram(intent: str, plan: Plan) -> Plan:
    """``plan`` whose average of a column becomes that column's histogram when the request
    asks how it spreads (:data:`HISTOGRAM_SAID`) and the plan draws none: "count episode
    rewards per bin" counts rows per bin of the reward."""
    if not affirmed(HISTOGRAM_SAID, intent) or any(s.NAME == "histogram" for s in plan.steps):
        return plan
    for i, step in enumerate(plan.steps):
        if step.NAME == "aggregate" and step.mean:
            histogram = step_in(plan, {"op": "histogram", "column": step.mean})
            return plan.model_copy(update={"steps": [*plan.steps[:i], histogram]})
    return plan


GROUPING = re.compile(
    r"\b(?:per|each|every|by|how many|count\w*|number|numbers|tall\w*|totals?|break\w*|split"
    r"|group\w*|average\w*|mean|avg|rates?|share|fraction|proportion|percent\w*|how often"
    r"|frequen\w*|times|across|compare\w*|versus|vs|distribution|spread|histogram|bins?"
    r"|buckets?|sum\w*|stat\w*|most|least|fewest|often|(?:has|have) the)\b|%"
)
"""The words that ask for rows counted or averaged in groups."""


def asked_grouping(intent: str, plan: Plan) -> Plan:
    """``plan`` without an aggregate (and what draws it) the request never asks for: one
    that says no word of counting or grouping (:data:`GROUPING`) wants the rows. "What
    medium-and-up verdicts do we have?" lists them."""
    if affirmed(GROUPING, intent):
        return plan
    steps = list(plan.steps)
    for i, step in enumerate(steps):
        if step.NAME == "aggregate":
            rest = [s for s in steps[i + 1 :] if s.NAME == "export"]
            return plan.model_copy(update={"steps": steps[:i] + rest})
    return plan


CHANGED_SAID = re.compile(
    r"\b(?:chang\w*|differ\w*|flip\w*|(?<!each )(?<!per )(?<!every )new decision|now get)\b"
)
"""The words that ask for the re-audited steps whose decision changed ("each new decision"
names the re-audit's decision, counted, not a change)."""


def asked_changed(intent: str, plan: Plan) -> Plan:
    """``plan`` that keeps only the steps whose decision changed after a re-audit when the
    request asks for those (:data:`CHANGED_SAID`), and every re-audited step when it does
    not."""
    steps = list(plan.steps)
    at = next((i for i, s in enumerate(steps) if s.NAME == "reaudit"), None)
    if at is None:
        return plan
    kept = [s for s in steps if not (s.NAME == "where" and s.column == "changed")]
    if affirmed(CHANGED_SAID, intent):
        changed = step_in(plan, {"op": "where", "column": "changed", "equals": True})
        at = next(i for i, s in enumerate(kept) if s.NAME == "reaudit")
        kept.insert(at + 1, changed)
    return plan.model_copy(update={"steps": kept})


def said_lm(intent: str, plan: Plan) -> Plan:
    """``plan`` whose scoring uses the language model when, and only when, the request says
    so (:data:`LM_SAID`): it is slow, and its figures (perplexity, IFD) differ."""
    lm = bool(LM_SAID.search(intent.lower()))
    steps = [
        s.model_copy(update={"lm": lm}) if s.NAME == "score" and s.lm != lm else s
        for s in plan.steps
    ]
    return plan.model_copy(update={"steps": steps})


RECENT_SAID = re.compile(r"\b(?:latest|newest|most recent|last|recent)\b")
OLDEST_SAID = re.compile(r"\b(?:oldest|earliest|first)\b")


def asked_latest(intent: str, plan: Plan) -> Plan:
    """``plan`` that keeps the newest (or oldest) ``N`` rows when the request asks for "the
    100 most recent" and the plan neither limits nor uses the number."""
    said = intent.lower()
    if any(s.NAME in ("top", "sample", "diverse", "search", "aggregate") for s in plan.steps):
        return plan
    oldest = bool(OLDEST_SAID.search(said))
    if not (oldest or RECENT_SAID.search(said)):
        return plan
    loose = [n for n in loose_numbers(intent) if n == int(n) and not _used(n, _values(plan))]
    if len(loose) != 1:
        return plan
    top = {"op": "top", "column": "produced_at", "k": int(loose[0])} | (
        {"lowest": True} if oldest else {}
    )
    exports = [s for s in plan.steps if s.NAME == "export"]
    steps = [s for s in plan.steps if s.NAME != "export"]
    return plan.model_copy(update={"steps": [*steps, step_in(plan, top), *exports]})


def held_columns(plan: Plan) -> Plan:
    """``plan`` without a filter on a column its rows cannot have (neither the table's nor
    one an earlier step adds): "quality scores … where injected" is a filter made up, and it
    would fail. After a join or an aggregate the columns are the step's own, so left as
    written."""
    first = plan.steps[0]
    if first.NAME != "select":
        return plan
    held = columns_of(first.table)
    kept = [first]
    for i, step in enumerate(plan.steps[1:], start=1):
        if step.NAME in ("join", "aggregate"):  # the filters before it are checked all the same
            return plan.model_copy(update={"steps": [*kept, *plan.steps[i:]]})
        if step.NAME == "where" and step.column not in held:
            continue
        held |= set(getattr(step, "ADDS", ()))
        kept.append(step)
    return plan.model_copy(update={"steps": kept})


SCORED = Score.ADDS
"""The columns only the ``score`` operator makes."""
LM_SAID = re.compile(r"\b(?:language model|lm|llm|perplexity|ifd|instruction[- ]following)\b")


def scored_first(plan: Plan) -> Plan:
    """``plan`` with a ``score`` before the first step that uses a column only ``score``
    makes (:data:`SCORED`) on trajectories, when no step before it scores: a trajectory's
    value exists only once it is scored (:func:`said_lm` then says by what)."""
    steps = list(plan.steps)
    if getattr(steps[0], "table", None) != "trajectories":
        return plan
    for i, step in enumerate(steps):
        if step.NAME == "score":
            return plan
        used = {v for v in step.model_dump().values() if isinstance(v, str)}
        if i and used & set(SCORED):
            score = step_in(plan, {"op": "score"})
            return plan.model_copy(update={"steps": [*steps[:i], score, *steps[i:]]})
    return plan


SEVERITY_SAID = re.compile(
    r"\b(?:sever\w*|serious|critical|(?<!how )high|medium|(?<!how )low|minor|major|moderate"
    r"|worse|raised|flag\w*|fir(?:e|ed|es|ing|ings)|finding\w*|issues?|problems?|caught|alerts?|trigger\w*|hits?"
    r"|non-benign|non-trivial)\b"
)
"""The words that speak of a verdict's severity, or of verdicts that fired at all."""


def said_severity(intent: str, plan: Plan) -> Plan:
    """``plan`` without a severity floor the request never speaks of (:data:`SEVERITY_SAID`):
    "the average score of verdicts per env" is of every verdict."""
    select = plan.steps[0]
    if getattr(select, "min_severity", None) is None or SEVERITY_SAID.search(intent.lower()):
        return plan
    return reselected(plan, min_severity=None)


def ground(intent: str, plan: Plan) -> tuple[Plan, str | None]:
    """``plan`` grounded in ``intent`` by every rule here, with what to ask about (None when
    nothing)."""
    plan = said_window(intent, plan)
    plan = said_outcome(intent, said_facts(intent, said_bounds(intent, plan)))
    plan = said_checker(intent, said_decision(intent, said_fact_rows(intent, plan)))
    plan = said_poison(intent, said_poisoning(intent, said_join(intent, plan)))
    plan = said_joined_groups(intent, said_distinct(intent, said_other_table(intent, plan)))
    plan = said_grouped_values(intent, said_columns(intent, plan))
    plan = said_top(intent, said_groups(intent, said_search(intent, said_quote(intent, plan))))
    plan = said_ranked_column(intent, plan)
    plan = said_rate(intent, said_each_value(intent, plan))
    plan = said_query(intent, said_likeness(intent, plan))
    plan = said_histogram(intent, plan)
    plan = said_random(intent, said_severity_floor(intent, said_version(intent, plan)))
    plan = said_search_column(intent, said_diverse(intent, plan))
    plan = said_off(intent, said_rerun(intent, said_sample(intent, plan)))
    plan = said_units(intent, plan)
    plan = asked_histogram(intent, asked_rate(intent, plan))
    plan = said_histogram_column(intent, plan)
    plan = held_columns(possible(polarized(intent, filled(intent, plan))))
    plan = said_severity(intent, said_values(intent, plan))
    plan = said_aggregate(intent, said_means(intent, asked_ranking(intent, plan)))
    plan = said_outputs(intent, asked_outputs(intent, plan))
    plan = asked_latest(intent, asked_grouping(intent, plan))
    plan = said_lm(intent, scored_first(asked_changed(intent, plan)))
    return unguessed(intent, plan)
