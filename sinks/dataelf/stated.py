"""What a request states in so many words that a plan left out. A small planner drops a
fact it was told as often as it invents one (:mod:`.grounding` removes what was invented);
each rule here puts back one kind of stated fact, by principle, never by a dataset's words:

* **a bound on a number** — "a reward over 0.5", "scored 0.5 or higher", "longer than 5
  steps" is a filter on that column (:func:`said_bounds`), not a search for the words;
* **a yes/no fact** — a step's injection or block is a column: "steps with an injection
  inserted" filters on it (:func:`said_facts`), it does not search text for the word;
* **an outcome** — "trajectories that succeeded" are those whose outcome is success
  (:func:`said_outcome`);
* **a kind of poisoning** — "backdoor triggers", "flipped labels" keep the rows the
  poisoning check found of that kind (:func:`said_poison`);
* **groups** — "for each checker, how many …" counts per checker (:func:`said_groups`);
* **a ranking** — "the top 20 … by value" keeps the 20 highest (:func:`said_top`);
* **a likeness** — "steps that look like skipping the safety check" is a search for it, not
  a re-audit, unless the request asks for the steps judged again (:func:`said_search`); a
  quoted phrase is searched word for word (:func:`said_quote`);
* **a version** — "under policy 3" is version 3, "since v3" every version from 3
  (:func:`said_version`); **a severity** — "high-severity" is the floor
  (:func:`said_severity_floor`);
* **chance** — "at random" is a sample, not a diverse pick (:func:`said_random`);
* **a join** — the verdict columns named are the ones joined, unmatched rows dropped when
  it says so (:func:`said_join`); **a label** — the one asked about is checked for
  poisoning, joined from the verdicts first if the rows get it there (:func:`said_poisoning`).

* **a sample** — "sample 20 … with seed 3" draws 20 at random with that seed
  (:func:`said_sample`);
* **which column** — "search skill titles only" reads the title (:func:`said_search_column`);
  "histogram their novelty" is of the novelty (:func:`said_histogram_column`); "average
  composite per scorer" groups by a column the rows hold and averages the one measure named
  (:func:`said_aggregate`);
* **checkers turned off** — "with rule.pii turned off" runs the others, not that one alone
  (:func:`said_off`);
* **rows qualified by a fact** — "the blocked steps" are the steps whose ``blocked`` holds
  (:func:`said_fact_rows`); **a likeness** — "the 10 closest to '…'" is a search, not a
  ranking by some column (:func:`said_likeness`).

* **a decision** — "the block decisions each checker issued" keeps the blocks
  (:func:`said_decision`); a count "per decision" after a join is of the joined column
  (:func:`said_joined_groups`);
* **a checker to run again** — "re-run just model.instruction_in_data" re-audits with it,
  and "each new decision" counts the re-audit's (:func:`said_rerun`);
* **a preference** — "diverse ones, preferring high value" weights the pick
  (:func:`said_diverse`);
* **time** — epoch seconds are ``since``/``until`` and a window nobody states in days goes
  (:func:`said_window`); "the last 7 days" is a window, not the 7 newest (:func:`said_units`).

* **a checker named** — "which deep.action_harm verdicts …" keeps that checker's
  (:func:`said_checker`); **several values named** — "how many succeeded and how many
  failed" keeps both (:func:`said_each_value`);
* **words said** — a search is for the phrase the request says, not one it never says
  (:func:`said_query`); "distinct checker / risk_type pairs" is a dedupe on them
  (:func:`said_distinct`); "bin the novelty into 5 buckets" is a histogram
  (:func:`said_histogram`); "the unsafe rate per version" is the mean of ``unsafe`` by
  version (:func:`said_rate`).

* **other tables and columns** — "add each episode's trajectory reward, matching on
  episode_id" joins the trajectories (:func:`said_other_table`); "only show checker,
  severity and decision" selects those columns (:func:`said_columns`); "for each
  completed_by value" groups by it (:func:`said_aggregate`); "the highest severity rank"
  ranks by ``severity_rank`` (:func:`said_ranked_column`); a closed-set column the request
  groups by is not held to a value it never names (:func:`said_grouped_values`).

Each rule adds only what the plan lacks, and leaves a plan that already says it alone.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from ..tables import COMMON, EXTRA
from .corpus import GROUPABLE, GROUPS, PLURALS, SEVERITIES, SEVERITY_TAGS, SINGULAR
from .meaning import Score
from .plan import Plan

NUMBER = r"(-?\d+(?:\.\d+)?|-?\.\d+)(?!\.?\d)"
ABOVE = (
    r"(?:over|above|more than|greater than|higher than|exceed(?:s|ing)?|at least|no less than"
    r"|>=|>|≥)"
)
BELOW = r"(?:under|below|less than|lower than|at most|no more than|<=|<|≤)"
OR_MORE = r"or (?:more|higher|above|greater|better|up)"
OR_LESS = r"or (?:less|lower|below|fewer|under)"
BOUNDED = {
    "trajectories": ("reward", r"rewards?|returns?"),
    "episodes": ("task_reward", r"(?:task )?rewards?"),
    "verdicts": ("score", r"(?:risk )?scor(?:e|es|ed|ing)"),
}
"""The number column of each table a request bounds, and how it says it."""
LINKING = "of|is|are|was|were|be|been|a|an|the|its|their|that|which|with|has|have|had|got|gets"
GAP = rf"\W+(?:(?:{LINKING})\W+){{0,3}}?"
"""Only linking words stand between a column and its bound ("a reward of at least")."""
UNIT = r"(?!\s*(?:%|percent|bins?|buckets?|hours?|days?|weeks?|months?|steps?|versions?)\b)"
"""A number followed by a unit counts something else ("over 5 bins")."""


MEASURES = {
    "trajectories": {
        "reward": r"rewards?|returns?",
        "num_steps": r"lengths?|step counts?|number of steps",
        "value": r"values?",
        "quality": r"quality|qualities",
        "complexity": r"complexity|complexities",
        "novelty": r"novelty|novelties",
        "safety": r"safety",
        "ifd": r"ifd|instruction[- ]following difficult(?:y|ies)",
        "perplexity": r"perplexit(?:y|ies)",
    },
    "episodes": {"task_reward": r"(?:task )?rewards?", "num_steps": r"lengths?|step counts?"},
    "verdicts": {"score": r"(?:risk )?scores?", "severity_rank": r"severity ranks?"},
    "scores": {"composite": r"composites?(?: scores?)?"},
}
"""The number columns of each table a request measures, and how it says each."""


def columns_of(table: str) -> set[str]:
    """The columns a stored ``table``'s rows hold (none for a name that is no table)."""
    return {f.name for f in [*COMMON, *EXTRA.get(table, [])]}


NUMERIC = {
    f.name
    for f in [*COMMON, *(f for fields in EXTRA.values() for f in fields)]
    if str(f.type).startswith(("int", "float", "double"))
}
"""The number columns: a word is never their value, a ranking is by one of them."""


def step_in(plan: Plan, step: dict[str, Any]) -> BaseModel:
    """``step`` as an operator of ``plan`` (validated after its first step)."""
    first = plan.steps[0].model_dump(exclude_unset=True)
    return Plan.model_validate({"steps": [first, step]}).steps[1]


def _past_filters(steps: list[BaseModel]) -> int:
    """Where a new filter goes: after the select and the filters on its rows that follow it
    (not after one on what a later step adds, such as ``poison``)."""
    at = 1
    while at < len(steps) and steps[at].NAME == "where" and steps[at].column != "poison":
        at += 1
    return at


def _filtering(plan: Plan, where: dict[str, Any]) -> Plan:
    """``plan`` with ``where`` after its select and the filters that follow it."""
    at = _past_filters(plan.steps)
    return plan.model_copy(
        update={"steps": [*plan.steps[:at], step_in(plan, where), *plan.steps[at:]]}
    )


def _before_outputs(plan: Plan, step: dict[str, Any]) -> Plan:
    """``plan`` with ``step`` last before the files and charts it writes."""
    outputs = [s for s in plan.steps if s.NAME in ("export", "plot")]
    rest = [s for s in plan.steps if s.NAME not in ("export", "plot")]
    return plan.model_copy(update={"steps": [*rest, step_in(plan, step), *outputs]})


def reselected(plan: Plan, **update: Any) -> Plan:
    """``plan`` whose ``select`` has ``update`` (validated; None unsets)."""
    select = plan.steps[0]
    fields = select.model_dump(exclude_unset=True) | update
    select = type(select).model_validate({k: v for k, v in fields.items() if v is not None})
    return plan.model_copy(update={"steps": [select, *plan.steps[1:]]})


def _filters(plan: Plan, column: str) -> bool:
    return any(s.NAME == "where" and s.column == column for s in plan.steps)


def bound(intent: str, table: str) -> dict[str, Any] | None:
    """The bound the request states on ``table``'s number column ("a reward over 0.5":
    ``{"column": "reward", "min": 0.5}``; a stated bound is kept, as in the corpus), or on a
    trajectory's or episode's length in steps ("longer than 5 steps" is at least 6)."""
    said = intent.lower()
    if table in ("trajectories", "episodes"):
        if m := re.search(r"\b(?:longer than|more than|over) (\d+) steps\b", said):
            return {"column": "num_steps", "min": int(m.group(1)) + 1}
        if m := re.search(r"\b(?:shorter than|fewer than|less than|under) (\d+) steps\b", said):
            return {"column": "num_steps", "max": int(m.group(1)) - 1}
        if m := re.search(rf"\bat least (\d+) steps\b|\b(\d+) {OR_MORE} steps\b", said):
            return {"column": "num_steps", "min": int(m.group(1) or m.group(2))}
        if m := re.search(rf"\bat most (\d+) steps\b|\b(\d+) steps {OR_LESS}\b", said):
            return {"column": "num_steps", "max": int(m.group(1) or m.group(2))}
    named = [BOUNDED[table]] if table in BOUNDED else []
    named += [(c, w) for c, w in MEASURES.get(table, {}).items() if c in Score.ADDS]
    for column, words in named:
        col = rf"\b(?:{words})\b"
        if m := re.search(rf"{col}{GAP}between {NUMBER} and {NUMBER}{UNIT}", said):
            return {"column": column, "min": float(m.group(1)), "max": float(m.group(2))}
        if m := re.search(rf"{col}{GAP}(?:{ABOVE}\s*{NUMBER}{UNIT}|{NUMBER} {OR_MORE})", said):
            return {"column": column, "min": float(m.group(1) or m.group(2))}
        if m := re.search(rf"{col}{GAP}(?:{BELOW}\s*{NUMBER}{UNIT}|{NUMBER} {OR_LESS})", said):
            return {"column": column, "max": float(m.group(1) or m.group(2))}
    return None


def said_bounds(intent: str, plan: Plan) -> Plan:
    """``plan`` filtered on the bound the request states (:func:`bound`) when it has no
    filter on that column; a search for the bound's words ("rewarding 0.5") goes."""
    select = plan.steps[0]
    if select.NAME != "select" or not (where := bound(intent, select.table)):
        return plan
    column = where["column"]
    stated = {k: v for k, v in where.items() if k != "column"}
    kept = []
    for step in plan.steps:
        if step.NAME == "where" and step.column == column:
            same_way = all(getattr(step, k) is not None for k in stated)
            if step.equals is not None or same_way:
                return plan  # the plan bounds it already the way the request does
            continue  # a bound the other way round from the one stated
        kept.append(step)
    said = {str(v) for v in stated.values()} | {f"{v:g}" for v in stated.values()}
    kept = [s for s in kept if not (s.NAME == "search" and any(n in s.query for n in said))]
    plan = plan.model_copy(update={"steps": kept})
    if column not in Score.ADDS:
        return _filtering(plan, {"op": "where", **where})
    at = next((i + 1 for i, s in enumerate(kept) if s.NAME == "score"), None)
    added = [step_in(plan, {"op": "where", **where})]
    if at is None:  # a measure only scoring makes: scored first
        at = _past_filters(kept)
        added.insert(0, step_in(plan, {"op": "score"}))
    return plan.model_copy(update={"steps": [*kept[:at], *added, *kept[at:]]})


FACTS = {
    "steps": {"injected": r"inject\w*", "blocked": r"block\w*"},
    "episodes": {"unsafe": r"unsafe"},
}
"""The yes/no columns of each table, by the stem a request says them with."""
DENIED = r"\b(?:not|no|never|without|non-?|un)\W*(?:[a-z]+\W+){0,2}?"


def said_facts(intent: str, plan: Plan) -> Plan:
    """``plan`` whose search for a yes/no fact its rows record ("steps with an injection
    inserted into them") is a filter on that column: a search ranks texts by meaning, the
    column holds the fact. Only a search whose ``k`` the request does not state."""
    table = getattr(plan.steps[0], "table", None)
    said = intent.lower()
    for i, step in enumerate(plan.steps):
        if step.NAME != "search" or str(step.k) in said:
            continue
        for column, stem in FACTS.get(table, {}).items():
            if re.search(rf"\b{stem}", step.query.lower()) and re.search(rf"\b{stem}", said):
                if _filters(plan, column):
                    continue
                yes = not re.search(rf"{DENIED}{stem}", said)
                where = step_in(plan, {"op": "where", "column": column, "equals": yes})
                steps = [*plan.steps[:i], where, *plan.steps[i + 1 :]]
                return plan.model_copy(update={"steps": steps})
    return plan


OUTCOMES = {
    "success": r"\b(?:succeeded|successful(?:ly)?|safe(?:ly)?|succeeding)\b",
    "failure": r"\b(?:failed|failing|unsafe)\b",
}
"""How a request states a trajectory's outcome."""


def said_outcome(intent: str, plan: Plan) -> Plan:
    """``plan`` of trajectories filtered on the one outcome the request states ("the
    trajectories that succeeded") when nothing in it already reads the outcome (a filter, a
    group, a poisoning check of the label) and it asks no rate."""
    if getattr(plan.steps[0], "table", None) != "trajectories":
        return plan
    said = intent.lower()
    stated = [o for o, words in OUTCOMES.items() if re.search(words, said)]
    reads = any("outcome" in str(s.model_dump()) for s in plan.steps[1:])
    if len(stated) != 1 or reads or re.search(r"\b(?:rates?|how often|share|fraction)\b", said):
        return plan
    if re.search(DENIED + OUTCOMES[stated[0]], said):
        return plan
    return _filtering(plan, {"op": "where", "column": "outcome", "equals": stated[0]})


POISON = {
    "trigger": r"\b(?:triggers?|backdoors?|trigger phrases?)\b",
    "flip": (
        r"\b(?:flip\w*|invert\w*|mislabel\w*|swapped|wrong labels?"
        r"|labels? (?:seem|look)\w* wrong|disagree\w*)\b"
    ),
}
"""How a request names each kind of poisoning the ``poison`` operator finds."""


def said_poison(intent: str, plan: Plan) -> Plan:
    """``plan`` keeping the rows the poisoning check found of the one kind the request
    names ("backdoor triggers"), when it keeps none yet, and every row when it names none."""
    if not any(s.NAME == "poison" for s in plan.steps):
        return plan
    said = intent.lower()
    kinds = [k for k, words in POISON.items() if re.search(words, said)]
    if len(kinds) != 1:  # "signs of poisoning" names no kind, "triggers and flips" both
        kept = [s for s in plan.steps if not (s.NAME == "where" and s.column == "poison")]
        return plan.model_copy(update={"steps": kept})
    if _filters(plan, "poison"):
        return plan
    at = next(i for i, s in enumerate(plan.steps) if s.NAME == "poison") + 1
    where = step_in(plan, {"op": "where", "column": "poison", "equals": kinds[0]})
    return plan.model_copy(update={"steps": [*plan.steps[:at], where, *plan.steps[at:]]})


COUNTING = re.compile(
    r"\b(?:how many|count\w*|number of|tally|totals?|breakdown|break(?:s|ing)? (?:\w+ )?down)\b"
)
SHAPED = {
    *("aggregate", "histogram", "top", "sample", "diverse"),
    *("search", "dedupe", "join", "poison", "reaudit"),
}
"""Steps that give the rows a shape of their own: a request's groups are not added to them."""


GROUP_FORMS = {
    column: sorted({w.lower() for f in forms for w in (f, PLURALS[f])}, key=len, reverse=True)
    for column, forms in GROUPS.items()
}
"""How a request names each group column, singular and plural, longest first."""
FORMS = "|".join(
    sorted({re.escape(f) for forms in GROUP_FORMS.values() for f in forms}, key=len, reverse=True)
)


def _group_of(form: str, table: str) -> str | None:
    return next((c for c in GROUPABLE.get(table, []) if form in GROUP_FORMS[c]), None)


ITEM = rf"(?:the\s+|their\s+)?({FORMS})\b(?!\s*(?:[<>=≥≤]|at |of |is |or ))"
LISTED = re.compile(
    rf"\s*(?:,\s*)?(?:and|&)\s+{ITEM}"
    rf"|\s*,\s*{ITEM}(?=(?:\s*,\s*(?:the\s+|their\s+)?(?:{FORMS}))*\s*,?\s*(?:and|&)\s)"
)
"""One more group of a list ending in "and" ("by decision and severity", "per env, checker
and decision"); not a filter ("per env, severity >= low")."""


def groups(intent: str, table: str) -> list[str]:
    """The columns of ``table`` the request counts "per", "for each", "by" ("for each
    checker, how many verdicts …": checker; "by decision and severity": both), in the order
    said."""
    said = intent.lower()
    found: list[tuple[int, str]] = []
    for column in GROUPABLE.get(table, []):
        for form in GROUP_FORMS[column]:
            m = re.search(rf"\b(?:per|each|every|by|across)\s+(?:\w+\s+)?{re.escape(form)}\b", said)
            if m:
                found.append((m.start(), column))
                at = m.end()
                while more := LISTED.match(said, at):
                    form = more.group(1) or more.group(2)
                    if (listed := _group_of(form, table)) is None:
                        break
                    found.append((more.start(), listed))
                    at = more.end()
                break
    crossed = re.search(rf"\b({FORMS})\s*(?:x|×|by|vs\.?|versus)\s*({FORMS})\b", said)
    if not found and crossed and COUNTING.search(said):  # "decision x risk type counts"
        named = [_group_of(crossed.group(1), table), _group_of(crossed.group(2), table)]
        return [c for c in named if c] if all(named) else []
    return list(dict.fromkeys(c for _, c in sorted(found)))


def said_groups(intent: str, plan: Plan) -> Plan:
    """``plan`` counting its rows per the groups the request names when it asks how many
    ("for each checker, how many verdicts scored 0.5 or higher?") and the plan lists them,
    or counts them by some of those groups only ("decision x risk type counts")."""
    select = plan.steps[0]
    if select.NAME != "select" or not COUNTING.search(intent.lower()):
        return plan
    one = set(select.model_dump(exclude_none=True))  # a column held to one value is no group
    one |= {s.column for s in plan.steps if s.NAME == "where" and s.equals is not None}
    by = [g for g in groups(intent, select.table) if g not in one]
    shaped = [s for s in plan.steps if s.NAME in SHAPED]
    if len(shaped) == 1 and shaped[0].NAME == "aggregate":  # groups it counts by, all of them
        aggregate = shaped[0]
        if len(by) <= len(aggregate.by) or not set(aggregate.by) <= set(by):
            return plan
        wider = aggregate.model_copy(update={"by": by})
        return plan.model_copy(
            update={"steps": [wider if s is aggregate else s for s in plan.steps]}
        )
    if shaped or not by:
        return plan
    return _before_outputs(plan, {"op": "aggregate", "by": by})


TOP = re.compile(
    r"\b(top|best|highest|lowest|worst|bottom)\s+(\d+)\b(?:\s+[\w-]+){0,3}?"
    r"\s+by\s+([a-z_]+(?: [a-z_]+)?)"
)
LOWEST = ("lowest", "worst", "bottom")


def said_top(intent: str, plan: Plan) -> Plan:
    """``plan`` keeping the ``k`` rows the request ranks ("the top 20 trajectories by value")
    when no step uses that ``k``: the ranking it states is kept."""
    m = TOP.search(intent.lower())
    if not m:
        return plan
    word, k = m.group(1), int(m.group(2))
    if any(getattr(s, "k", None) == k for s in plan.steps):
        return plan
    table = plan.steps[0].table
    held = columns_of(table) | set(Score.ADDS)
    said = m.group(3).split()
    column = next((c for c in ("_".join(said), said[0]) if c in held), None)
    if column is None:
        return plan
    top = {"op": "top", "column": column, "k": k} | ({"lowest": True} if word in LOWEST else {})
    return _before_outputs(plan, top)


REJUDGED = re.compile(
    r"\b(?:re-?audit\w*|re-?run\w*|re-?check\w*|re-?judg\w*|re-?evaluat\w*|redo|again|once more"
    r"|audit\w*|checkers|judged|turned off|switched off|disabled?|excluding|ignoring|leaving out"
    r"|without the)\b"
)
"""The words that ask for steps judged again (a re-audit changes what is read)."""
LIKENED = re.compile(
    r"\b(?:look(?:s|ing)? like|similar to|resembl\w*|closest to|most like|related to|involving"
    r"|mention\w*|about)\s+(.+?)[\s?.!]*$"
)
"""How a request likens rows to a description: what follows is the search's query."""


def said_search(intent: str, plan: Plan) -> Plan:
    """``plan`` that searches for what the request likens its rows to ("steps that look like
    skipping the safety check") where the plan re-audits them and the request never asks
    for them to be judged again (:data:`REJUDGED`)."""
    said = intent.lower()
    if not any(s.NAME == "reaudit" for s in plan.steps) or REJUDGED.search(said):
        return plan
    if not (m := LIKENED.search(said)):
        return plan
    at = next(i for i, s in enumerate(plan.steps) if s.NAME == "reaudit")
    quoted = QUOTED.findall(intent)
    query = quoted[0] if len(quoted) == 1 else m.group(1)
    search = step_in(plan, {"op": "search", "query": query})
    kept = [s for s in plan.steps[at + 1 :] if not (s.NAME == "where" and s.column == "changed")]
    return plan.model_copy(update={"steps": [*plan.steps[:at], search, *kept]})


ONWARD_AFTER = re.compile(
    r"^\s*(?:\+|and (?:up|later|newer|above|higher|after)\b|onwards?\b"
    r"|on\b(?!\s+(?:the|a|an|task\w*|average|[\w-]+[ -]env\w*)\b)"
    r"|or (?:later|newer|above|higher|up|after)\b)"
)
ONWARD_BEFORE = re.compile(
    r"(?:since|at least|>=|≥|after|starting (?:at|from|with))\s*(?:(?:policy|version|v|_)\s*)*$"
)


def said_version(intent: str, plan: Plan) -> Plan:
    """``plan`` whose policy-version filter is the one the request states: "under policy
    version 3" is version 3, "version 3 onward" ("since v3", "v3+", "3 or later") every
    version from 3."""
    select = plan.steps[0]
    version = getattr(select, "min_policy_version", None)
    exact = version is None
    version = getattr(select, "policy_version", None) if exact else version
    if version is None:
        return plan
    said = intent.lower()
    spots = list(re.finditer(rf"(?<![\d.]){version}(?![\d.])", said))
    if not spots:
        return plan
    onward = any(
        ONWARD_AFTER.search(said[m.end() :]) or ONWARD_BEFORE.search(said[: m.start()])
        for m in spots
    )
    if onward == (not exact):
        return plan
    update = {"min_policy_version": version, "policy_version": None}
    if not onward:
        update = {"policy_version": version, "min_policy_version": None}
    return reselected(plan, **update)


QUOTED = re.compile(r"(?:^|[\s:(])['\"“‘]([^'\"”’]{3,}?)['\"”’](?=$|[\s,.;:?!)])")
"""A phrase the request quotes."""


def said_quote(intent: str, plan: Plan) -> Plan:
    """``plan`` whose search is for the phrase the request quotes, word for word."""
    quoted = QUOTED.findall(intent)
    if len(quoted) != 1:
        return plan
    steps = [
        s.model_copy(update={"query": quoted[0]}) if s.NAME == "search" else s for s in plan.steps
    ]
    return plan.model_copy(update={"steps": steps})


RANDOM_SAID = re.compile(r"\b(?:random\w*|sample\w*|shuffl\w*|seed)\b")
DIVERSE_SAID = re.compile(
    r"\b(?:divers\w*|varied|variety|different|spread|cover\w*|representative|far apart|unlike)\b"
)
VALUE_SAID = re.compile(r"\b(?:valu\w*|quality|scor\w*|novel\w*|complex\w*|worth|useful\w*)\b")


def said_random(intent: str, plan: Plan) -> Plan:
    """``plan`` that draws at random when the request says so and never asks for variety: a
    diverse selection is not a random one (nor is its value scored when nobody asks)."""
    said = intent.lower()
    if not RANDOM_SAID.search(said) or DIVERSE_SAID.search(said):
        return plan
    if not any(s.NAME == "diverse" for s in plan.steps):
        return plan
    kept = [s for s in plan.steps if s.NAME != "diverse"]
    if not VALUE_SAID.search(said):
        kept = [s for s in kept if s.NAME != "score"]
    if not any(s.NAME == "sample" for s in kept):
        k = next(s.k for s in plan.steps if s.NAME == "diverse")
        at = next(i for i, s in enumerate(plan.steps) if s.NAME == "diverse")
        kept.insert(at, step_in(plan, {"op": "sample", "k": k}))
    return plan.model_copy(update={"steps": kept})


JOINED = {
    "checker": r"checkers?",
    "risk_type": r"risk[ _]types?",
    "severity": r"severit(?:y|ies)",
    "decision": r"decisions?",
}
"""The verdict columns a join adds by default, and how a request says each."""
UNMATCHED_DROPPED = re.compile(
    r"\b(?:drop\w*|remov\w*|skip\w*|exclud\w*|leav\w* out|omit\w*|without those|inner)\b"
    r"|\bonly (?:the )?\w+ (?:with|that have|that got)\b"
    r"|\bonly (?:the )?\w+ (?:that|which) (?:actually |really )?(?:got|received|have|had|carry)\b"
)


def said_join(intent: str, plan: Plan) -> Plan:
    """``plan`` whose join of verdicts adds the verdict columns the request names ("their
    verdicts' checker and decision"; all when it names none), and drops rows without a
    verdict when it says so."""
    said = intent.lower()
    steps = list(plan.steps)
    for i, step in enumerate(steps):
        if step.NAME != "join" or step.table != "verdicts":
            continue
        columns = [c for c, words in JOINED.items() if re.search(rf"\b{words}\b", said)]
        fields = step.model_dump(exclude_unset=True) | {"op": "join"}
        fields.pop("columns", None)  # none named: the default columns, all of them
        if columns:
            fields["columns"] = columns
        if UNMATCHED_DROPPED.search(said) and not step.inner:
            fields["inner"] = True
        steps[i] = step_in(plan, fields)
    return plan.model_copy(update={"steps": steps})


POISONING = re.compile(r"\bpoison\w*")
LABELS = ("outcome", "blocked", "injected", "unsafe", "kind", "decision", "severity", "risk_type")
"""The columns that label a row (what a poisoned dataset gets wrong)."""


def said_poisoning(intent: str, plan: Plan) -> Plan:
    """``plan`` that checks the label the request asks about for poisoning ("is the blocked
    label on steps poisoned?": ``poison`` of ``blocked``); a label its rows get from their
    verdicts ("each step's verdict decision") is joined on first."""
    select = plan.steps[0]
    if select.NAME != "select" or select.table == "verdicts" or not POISONING.search(intent):
        return plan
    said = intent.lower()
    columns = columns_of(select.table)
    held = [c for c in LABELS if c in columns]
    joined = [c for c in JOINED if c not in columns]
    named = [c for c in held if re.search(rf"\b{c.replace('_', '[ _]')}\b", said)]
    named += [c for c in joined if re.search(rf"\b{JOINED[c]}\b", said)]
    poison = next((s for s in plan.steps if s.NAME == "poison"), None)
    label = named[0] if len(named) == 1 else None
    if poison is not None and (label is None or poison.label in (label, f"verdicts_{label}")):
        if poison.label in columns or poison.label.startswith("verdicts_"):
            return plan
    label = label or ("outcome" if "outcome" in columns else None)
    if label is None:
        return plan
    added = []
    if label in joined:
        added.append(step_in(plan, {"op": "join", "columns": [label]}))
        label = f"verdicts_{label}"
    added.append(step_in(plan, {"op": "poison", "label": label}))
    steps = [s for s in plan.steps if s.NAME not in ("poison", "join")]
    at = _past_filters(steps)
    return plan.model_copy(update={"steps": [*steps[:at], *added, *steps[at:]]})


def severity_said(intent: str) -> str | None:
    """The least severity the request states ("high-severity", "medium+", "critical only"),
    None when it states none or more than one."""
    said = intent.lower()
    levels = set()
    for level, forms in SEVERITIES.items():
        for form in [*forms, *SEVERITY_TAGS[level]]:
            if level == "low" and form in SEVERITIES["low"]:
                continue  # "raised", "flagged": verdicts that fired, said of any checker
            if re.search(rf"(?<![\w-]){re.escape(form.lower())}(?![\w-])", said):
                levels.add(level)
    return levels.pop() if len(levels) == 1 else None


def said_severity_floor(intent: str, plan: Plan) -> Plan:
    """``plan`` of verdicts whose severity floor is the one the request states ("the high
    severity verdicts" are those of high severity or worse)."""
    select = plan.steps[0]
    if getattr(select, "table", None) != "verdicts":
        return plan
    level = severity_said(intent)
    if level is None or select.min_severity == level or _filters(plan, "severity"):
        return plan
    return reselected(plan, min_severity=level)


SAMPLED = re.compile(
    r"\bsample\s+(?:of\s+)?(\d+)\b"
    r"|\brandom(?:ly)?\s+(?:(?:sample|pick|draw|selection|choice|set)\w*\s+(?:of\s+)?)?(\d+)\b"
    r"|\b(\d+)\s+(?:[\w-]+\s+){0,3}?(?:at random|randomly)\b"
)
"""How a request states a random sample's size ("sample 20", "a random 50", "10 at random")."""
SEEDED = re.compile(r"\bseed(?:ed)?\s*(?:of|=|:|is|with)?\s*(\d+)\b")


def said_sample(intent: str, plan: Plan) -> Plan:
    """``plan`` drawing the random sample the request states ("sample 20 … with seed 3")
    after its filters when it draws none and no step uses that size, and with the seed the
    request states when it does."""
    said = intent.lower()
    seed = int(m.group(1)) if (m := SEEDED.search(said)) else None
    steps = list(plan.steps)
    for i, step in enumerate(steps):
        if step.NAME == "sample":
            if seed is not None and step.seed != seed:
                steps[i] = step.model_copy(update={"seed": seed})
            return plan.model_copy(update={"steps": steps})
    if not (m := SAMPLED.search(said)):
        return plan
    k = int(next(g for g in m.groups() if g))
    if any(getattr(s, "k", None) == k for s in steps):
        return plan
    sample = {"op": "sample", "k": k} | ({"seed": seed} if seed is not None else {})
    at = _past_filters(steps)
    return plan.model_copy(update={"steps": [*steps[:at], step_in(plan, sample), *steps[at:]]})


SEARCHED_COLUMNS = {"skills": {"title": r"titles?|names?|headings?", "text": r"body|bodies|text"}}
"""The text columns a search may read, of the tables with more than one."""


def said_search_column(intent: str, plan: Plan) -> Plan:
    """``plan`` whose search or diverse pick reads the one text column the request names
    ("search skill titles only, not the body text": the title), of a table with several."""
    columns = SEARCHED_COLUMNS.get(getattr(plan.steps[0], "table", ""), {})
    said = intent.lower()
    named = [
        c
        for c, words in columns.items()
        if re.search(rf"\b(?:{words})\b", said) and not re.search(rf"{DENIED}(?:{words})\b", said)
    ]
    if len(named) != 1:
        return plan
    steps = [
        s.model_copy(update={"column": named[0]})
        if s.NAME in ("search", "diverse") and s.column != named[0]
        else s
        for s in plan.steps
    ]
    return plan.model_copy(update={"steps": steps})


def said_histogram_column(intent: str, plan: Plan) -> Plan:
    """``plan`` whose histogram is of the one number column the request names ("histogram
    their novelty in 5 bins": novelty; :func:`.grounding.scored_first` then scores first)
    when it names no other."""
    measures = MEASURES.get(getattr(plan.steps[0], "table", ""), {})
    said = intent.lower()
    named = [c for c, words in measures.items() if re.search(rf"\b(?:{words})\b", said)]
    if len(named) != 1:
        return plan
    steps = [
        s.model_copy(update={"column": named[0]})
        if s.NAME == "histogram" and s.column != named[0]
        else s
        for s in plan.steps
    ]
    return plan.model_copy(update={"steps": steps})


CHECKER = re.compile(r"(?<![\w.])([a-z]+\.[a-z_]+)(?![\w.])")
"""A checker's name as the registry writes it (``rule.injection_markers``)."""
OFF_BEFORE = re.compile(
    r"\b(?:without|excluding|except|minus|but not|leaving out|leave out|drop\w*|disabl\w*"
    r"|turn\w* off|switch\w* off|skip\w*|omit\w*|remov\w*)\s+(?:the\s+)?(?:[a-z]+\.[a-z_]+"
    r"\s*(?:,|and|or)\s*)*$"
)
OFF_AFTER = re.compile(
    r"^\s*(?:(?:checkers?|rules?)\s+)?(?:turned off|switched off|disabled|off|excluded|left out"
    r"|removed|skipped|dropped)\b"
)


def said_off(intent: str, plan: Plan) -> Plan:
    """``plan`` whose re-audit leaves out the checkers the request turns off ("the default
    checkers but with rule.injection_markers turned off": ``without``, not ``checkers``)."""
    said = intent.lower()
    off = [
        m.group(1)
        for m in CHECKER.finditer(said)
        if OFF_BEFORE.search(said[: m.start()]) or OFF_AFTER.search(said[m.end() :])
    ]
    if not off:
        return plan
    steps = list(plan.steps)
    for i, step in enumerate(steps):
        if step.NAME != "reaudit":
            continue
        update: dict[str, Any] = {"without": list(dict.fromkeys([*step.without, *off]))}
        if set(step.checkers or []) & set(off):
            update["checkers"] = [c for c in step.checkers if c not in off] or None
        if update["without"] != step.without or "checkers" in update:
            steps[i] = step.model_copy(update=update)
    return plan.model_copy(update={"steps": steps})


FACT_ROWS = {
    "steps": ("steps?|actions?|tool calls?", {"blocked": "blocked", "injected": "injected"}),
    "episodes": ("episodes?|runs?", {"unsafe": "unsafe"}),
}
"""The rows a yes/no fact is said of, and the word that says it."""


def said_fact_rows(intent: str, plan: Plan) -> Plan:
    """``plan`` keeping the rows the request qualifies by a yes/no fact they record ("the
    blocked steps", "steps that were not blocked") when no step reads that column yet."""
    table = getattr(plan.steps[0], "table", "")
    if table not in FACT_ROWS:
        return plan
    rows, facts = FACT_ROWS[table]
    said = intent.lower()
    for column, word in facts.items():
        qualified = re.search(
            rf"\b(?:(?:not|non|un)[- ]?)?{word}\s+(?:{rows})\b"
            rf"|\b(?:{rows})\s+(?:that|which)\s+(?:were|was|got|have been|had been)\s+"
            rf"(?:not\s+)?{word}\b",
            said,
        )
        if not qualified or any(column in str(s.model_dump()) for s in plan.steps[1:]):
            continue
        yes = not re.search(rf"\bnot\b|\b(?:non|un)[- ]?{word}", qualified.group(0))
        return _filtering(plan, {"op": "where", "column": column, "equals": yes})
    return plan


LIKENESS = re.compile(
    r"\b(?:(?:closest|nearest|most similar|most like)\s+(?:to\s+)?|similar to\s+|resembl\w*\s+)"
    r"(.+?)[\s?.!]*$"
)
NEAREST_K = re.compile(r"\b(\d+)\s+(?:[\w-]+\s+){0,2}?(?:closest|nearest|most similar|most like)")


def said_likeness(intent: str, plan: Plan) -> Plan:
    """``plan`` that searches for what the request likens its rows to ("the 10 closest to
    'ignore all previous instructions'") when it searches for nothing: a likeness ranks by
    meaning, so a ranking by a column in its place goes."""
    said = intent.lower()
    if any(s.NAME in ("search", "reaudit", "dedupe", "diverse") for s in plan.steps):
        return plan
    if not (m := LIKENESS.search(said)):
        return plan
    quoted = QUOTED.findall(intent)
    query = quoted[0] if len(quoted) == 1 else m.group(1)
    tops = [s for s in plan.steps if s.NAME == "top"]
    k = int(n.group(1)) if (n := NEAREST_K.search(said)) else (tops[0].k if tops else None)
    search = {"op": "search", "query": query} | ({"k": k} if k else {})
    kept = [s for s in plan.steps if s.NAME != "top"]
    return _before_outputs(plan.model_copy(update={"steps": kept}), search)


AVERAGE_SAID = re.compile(r"\b(?:average\w*|mean|avg)\b")


def _column_said(column: str, said: str) -> bool:
    """Whether ``said`` names ``column``, by its name or a way of saying it as a group."""
    forms = [column.replace("_", "[ _]"), *map(re.escape, GROUP_FORMS.get(column, []))]
    return any(re.search(rf"\b{f}", said) for f in forms)


def said_aggregate(intent: str, plan: Plan) -> Plan:
    """``plan`` whose aggregate groups by columns its rows hold, the ones the request counts
    "per" ("average composite score per scorer": scorer, not a checker the scores lack; "for
    each completed_by value", not an outcome it never says), and
    averages the one measure the request names (:data:`MEASURES`) when it asks an average
    and the plan's is missing or not held."""
    table = getattr(plan.steps[0], "table", "")
    if table not in EXTRA:
        return plan
    held = columns_of(table)
    said = intent.lower()
    steps = list(plan.steps)
    for i, step in enumerate(steps):
        if step.NAME != "aggregate":
            held |= {c for c in getattr(step, "ADDS", ()) if "*" not in c}
            continue
        update: dict[str, Any] = {}
        unsaid = not any(_column_said(c, said) for c in step.by)
        if not set(step.by) <= held or unsaid:
            spots = {
                c: m.start()
                for c in held
                if (
                    m := re.search(
                        rf"\b(?:per|by|each|every|across)\s+{c.replace('_', '[ _]')}s?\b", said
                    )
                )
            }
            if spots:
                update["by"] = sorted(spots, key=spots.__getitem__)
        if (step.mean is None or step.mean not in held) and AVERAGE_SAID.search(said):
            measures = MEASURES.get(table, {}).items()
            named = [c for c, w in measures if c in held and re.search(rf"\b(?:{w})\b", said)]
            if len(named) == 1:
                update["mean"] = named[0]
        if update:
            steps[i] = step.model_copy(update=update)
        break
    return plan.model_copy(update={"steps": steps})


DECISIONS_SAID = {
    "block": r"block(?:s|ed|ing)?",
    "warn": r"warn(?:s|ed|ings?)?",
    "allow": r"allow(?:s|ed|ing)?",
    "uncertain": r"uncertain",
}
"""How a request names each of a verdict's decisions."""


def said_decision(intent: str, plan: Plan) -> Plan:
    """``plan`` of verdicts keeping the one decision the request names ("the block
    decisions each checker issued") when no step reads the decision yet."""
    if getattr(plan.steps[0], "table", None) != "verdicts":
        return plan
    said = intent.lower()
    named = [d for d, w in DECISIONS_SAID.items() if re.search(rf"\b(?:{w})\b", said)]
    if len(named) != 1 or re.search(rf"{DENIED}(?:{DECISIONS_SAID[named[0]]})\b", said):
        return plan
    if any("decision" in str(s.model_dump()) for s in plan.steps[1:]):
        return plan
    return _filtering(plan, {"op": "where", "column": "decision", "equals": named[0]})


def said_joined_groups(intent: str, plan: Plan) -> Plan:
    """``plan`` counting its joined rows per the joined column the request counts by ("join
    every step to its verdicts' decisions and count the rows per decision":
    ``verdicts_decision``) when it counts nothing yet."""
    said = intent.lower()
    joins = [s for s in plan.steps if s.NAME == "join"]
    if len(joins) != 1 or not COUNTING.search(said):
        return plan
    if any(s.NAME in ("aggregate", "histogram") for s in plan.steps):
        return plan
    join = joins[0]
    base = columns_of(plan.steps[0].table)
    by = [f"{join.table}_{c}" for c in groups(intent, join.table) if c in join.columns]
    by = [c for c in by if c not in base]
    if not by:
        return plan
    return _before_outputs(plan, {"op": "aggregate", "by": by})


RERUN_SAID = re.compile(
    r"\b(?:re-?run\w*|re-?audit\w*|re-?check\w*|re-?judg\w*|re-?evaluat\w*|judge\w* (?:\w+ )?again"
    r"|run\w* (?:just |only )?(?:the )?[a-z]+\.[a-z_]+ (?:again|on))"
)
NEW_DECISION = re.compile(
    r"\b(?:new|fresh|re-?audit\w*) decisions?\b|\b(?:per|each|every|by) (?:\w+ )?decisions?\b"
)


def said_rerun(intent: str, plan: Plan) -> Plan:
    """``plan`` that judges its rows again with the checkers the request names ("re-run just
    model.instruction_in_data on them") when it re-audits nothing, and that counts the new
    decisions when the request counts per decision after it."""
    said = intent.lower()
    steps = list(plan.steps)
    if not any(s.NAME == "reaudit" for s in steps):
        named = [m.group(1) for m in CHECKER.finditer(said)]
        if not (RERUN_SAID.search(said) and named) or plan.steps[0].table != "steps":
            return plan
        rows = [s for s in steps if s.NAME not in ("aggregate", "export", "plot")]
        reaudit = step_in(plan, {"op": "reaudit", "checkers": list(dict.fromkeys(named))})
        steps = [*rows, reaudit, *[s for s in steps if s not in rows]]
        plan = plan.model_copy(update={"steps": steps})
    at = next(i for i, s in enumerate(steps) if s.NAME == "reaudit")
    if COUNTING.search(said) and NEW_DECISION.search(said):
        later = [s for s in steps[at + 1 :] if s.NAME == "aggregate"]
        if not later:
            return _before_outputs(plan, {"op": "aggregate", "by": ["reaudit_decision"]})
        if "decision" in later[0].by:
            by = ["reaudit_decision" if g == "decision" else g for g in later[0].by]
            new = later[0].model_copy(update={"by": by})
            steps = [new if s is later[0] else s for s in steps]
    return plan.model_copy(update={"steps": steps})


PREFERRED = re.compile(r"\b(?:prefer\w*|favou?r\w*|weight\w*|bias\w*|leaning)\b")


def said_diverse(intent: str, plan: Plan) -> Plan:
    """``plan`` whose diverse pick is weighted by the one measure the request prefers ("10
    diverse ones, preferring those with high value")."""
    said = intent.lower()
    if not any(s.NAME == "diverse" for s in plan.steps):
        return plan
    measures = MEASURES.get(plan.steps[0].table, {})
    named = [c for c, w in measures.items() if re.search(rf"\b(?:{w})\b", said)]
    if not PREFERRED.search(said) or len(named) != 1:
        return plan
    steps = [
        s.model_copy(update={"weight": named[0]}) if s.NAME == "diverse" and not s.weight else s
        for s in plan.steps
    ]
    return plan.model_copy(update={"steps": steps})


EPOCH = r"(\d{9,11}(?:\.\d+)?)"
TIME_UNIT = re.compile(r"\b(?:hours?|days?|weeks?|months?|years?|fortnights?|today|yesterday)\b")
COUNTS_TIME = re.compile(r"[\s-]*(?:hours?|days?|weeks?|months?|years?)\b")


def said_window(intent: str, plan: Plan) -> Plan:
    """``plan`` whose time window is the one the request states: epoch seconds ("between
    epoch 1735689600 and 1738368000", "since 1735689600", "before …") are ``since`` and
    ``until``, and a window in days it never states in a unit of time goes."""
    said = intent.lower()
    update: dict[str, Any] = {}
    if m := re.search(rf"\bbetween (?:\w+ ){{0,2}}?{EPOCH} and (?:\w+ )?{EPOCH}", said):
        update = {"since": float(m.group(1)), "until": float(m.group(2))}
    else:
        if m := re.search(rf"\b(?:since|after|from)\s+(?:\w+\s+)?{EPOCH}", said):
            update["since"] = float(m.group(1))
        if m := re.search(rf"\b(?:before|until|till|up to)\s+(?:\w+\s+)?{EPOCH}", said):
            update["until"] = float(m.group(1))
    select = plan.steps[0]
    if getattr(select, "within_days", None) is not None and not TIME_UNIT.search(said):
        update["within_days"] = None
    if not update or all(getattr(select, k, None) == v for k, v in update.items()):
        return plan
    return reselected(plan, **update)


def said_units(intent: str, plan: Plan) -> Plan:
    """``plan`` without a ranking whose ``k`` the request states only as a count of time
    ("the last 7 days of episodes" is a window, not the 7 newest)."""
    said = intent.lower()

    def only_time(k: int) -> bool:
        spots = list(re.finditer(rf"(?<![\d.]){k}(?![\d.])", said))
        return bool(spots) and all(COUNTS_TIME.match(said, m.end()) for m in spots)

    kept = [s for s in plan.steps if not (s.NAME == "top" and only_time(s.k))]
    return plan.model_copy(update={"steps": kept})


def said_checker(intent: str, plan: Plan) -> Plan:
    """``plan`` of verdicts keeping the one checker the request names by its registered name
    ("which deep.action_harm verdicts …") when no step reads the checker yet."""
    if getattr(plan.steps[0], "table", None) != "verdicts":
        return plan
    said = intent.lower()
    named = list(dict.fromkeys(m.group(1) for m in CHECKER.finditer(said)))
    if len(named) != 1 or any("checker" in str(s.model_dump()) for s in plan.steps[1:]):
        return plan
    return _filtering(plan, {"op": "where", "column": "checker", "equals": named[0]})


VALUES_SAID = {
    "outcome": OUTCOMES,
    "decision": {d: rf"\b(?:{w})\b" for d, w in DECISIONS_SAID.items()},
}


def said_each_value(intent: str, plan: Plan) -> Plan:
    """``plan`` that counts every value of a column the request names several of ("how many
    succeeded and how many failed", grouped by outcome) without keeping one of them only."""
    said = intent.lower()
    grouped = {g for s in plan.steps if s.NAME == "aggregate" for g in s.by}
    dropped = {
        column
        for column, words in VALUES_SAID.items()
        if column in grouped and sum(bool(re.search(w, said)) for w in words.values()) > 1
    }
    kept = [
        s
        for s in plan.steps
        if not (s.NAME == "where" and s.column in dropped and s.equals is not None)
    ]
    return plan.model_copy(update={"steps": kept})


PHRASE_END = re.compile(r"[?.!;]|,\s*(?:and|then|just|only|please|thanks)\b")


def said_query(intent: str, plan: Plan) -> Plan:
    """``plan`` whose search is for words the request says: a query it never says
    ("reauditting from a failed login" for "about recovering from a failed login") is the
    phrase the request likens its rows to, up to the end of that phrase."""
    said = intent.lower()
    if QUOTED.findall(intent) or not (m := LIKENED.search(said)):
        return plan
    phrase = PHRASE_END.split(m.group(1))[0].strip()
    steps = [
        s.model_copy(update={"query": phrase})
        if s.NAME == "search" and s.query.lower() not in said and phrase
        else s
        for s in plan.steps
    ]
    return plan.model_copy(update={"steps": steps})


DISTINCT = re.compile(
    r"\b(?:distinct|unique|one row (?:per|for each)|de-?dup\w*|without (?:any )?duplicates)\b"
)


def said_distinct(intent: str, plan: Plan) -> Plan:
    """``plan`` keeping one row per distinct combination of the columns the request names
    ("which distinct checker / risk_type pairs show up"): a dedupe on them, not a pick."""
    said = intent.lower()
    table = getattr(plan.steps[0], "table", "")
    if table not in EXTRA or not DISTINCT.search(said):
        return plan
    if any(s.NAME in ("dedupe", "aggregate") for s in plan.steps):
        return plan
    held = [f.name for f in [*COMMON, *EXTRA[table]] if f.name not in ("event_id", "payload")]
    spots = {
        c: m.start()
        for c in held
        if (m := re.search(rf"(?<![\w-]){c.replace('_', '[ _]')}s?(?![\w-])", said))
    }
    if not spots:
        return plan
    columns = sorted(spots, key=spots.__getitem__)
    kept = [s for s in plan.steps if s.NAME not in ("diverse", "sample", "top")]
    return _before_outputs(
        plan.model_copy(update={"steps": kept}), {"op": "dedupe", "columns": columns}
    )


BINS = re.compile(r"\b(\d+)\s+(?:equal[- ]width\s+)?(?:bins?|buckets?)\b")
BINNED = re.compile(r"\b(?:histograms?|bins?|buckets?|binned|bucketed|distribut\w*)\b")


def said_histogram(intent: str, plan: Plan) -> Plan:
    """``plan`` drawing the histogram the request asks of the one measure it names ("bin
    the novelty scores into 5 buckets") where the plan picks rows instead."""
    said = intent.lower()
    if not BINNED.search(said) or any(s.NAME in ("histogram", "aggregate") for s in plan.steps):
        return plan
    measures = MEASURES.get(getattr(plan.steps[0], "table", ""), {})
    named = [c for c, w in measures.items() if re.search(rf"\b(?:{w})\b", said)]
    if len(named) != 1:
        return plan
    histogram = {"op": "histogram", "column": named[0]}
    if m := BINS.search(said):
        histogram["bins"] = int(m.group(1))
    kept = [s for s in plan.steps if s.NAME not in ("diverse", "top", "sample", "search")]
    return _before_outputs(plan.model_copy(update={"steps": kept}), histogram)


RATE_PER = re.compile(r"\b(?:rates?|share|fraction|proportion|percent\w*|how often)\b")


def said_rate(intent: str, plan: Plan) -> Plan:
    """``plan`` averaging the yes/no column whose rate the request asks per a group ("the
    unsafe rate per policy version": the mean of ``unsafe`` by version) when it counts
    nothing yet."""
    said = intent.lower()
    table = getattr(plan.steps[0], "table", "")
    if not RATE_PER.search(said) or any(s.NAME in SHAPED for s in plan.steps):
        return plan
    facts = [c for c in FACT_ROWS.get(table, ("", {}))[1] if re.search(rf"\b{c}\b", said)]
    by = groups(intent, table)
    if len(facts) != 1 or not by:
        return plan
    kept = [s for s in plan.steps if not (s.NAME == "where" and s.column == facts[0])]
    return _before_outputs(
        plan.model_copy(update={"steps": kept}),
        {"op": "aggregate", "by": by, "mean": facts[0]},
    )


LINKED = re.compile(
    r"\b(?:join\w*|attach\w*|add\w*|match\w*|with their|with its|alongside|together with"
    r"|bring\w* in|pull\w* in)\b"
)


def said_other_table(intent: str, plan: Plan) -> Plan:
    """``plan`` joining the other table the request attaches ("add each one's trajectory
    reward and completed_by by matching on episode_id"): on the column it names, or the
    episode both hold, adding the columns of that table it names; what those columns were
    mistaken for (a filter, an average nobody asked) goes."""
    said = intent.lower()
    base = getattr(plan.steps[0], "table", "")
    if base not in EXTRA or not LINKED.search(said):
        return plan
    others = [
        t
        for t in EXTRA
        if t not in (base, "verdicts") and re.search(rf"\b(?:{t}|{SINGULAR[t]})(?:'s)?\b", said)
    ]
    if len(others) != 1:
        return plan
    other = others[0]
    own = {f.name for f in EXTRA[other]} - {f.name for f in COMMON}
    spots = {c: m.start() for c in own if (m := re.search(rf"\b{c}\b", said))}
    if not spots:
        return plan
    columns = sorted(spots, key=spots.__getitem__)
    held = columns_of(base)
    key = m.group(1) if (m := re.search(r"\bon ([a-z_]+)\b", said)) else "episode_id"
    if key not in held:
        return plan
    join = {
        "op": "join",
        "table": other,
        "left_on": key,
        "right_on": key,
        "columns": columns,
    } | ({"inner": True} if UNMATCHED_DROPPED.search(said) else {})
    asked = COUNTING.search(said) or AVERAGE_SAID.search(said)
    kept = [
        s
        for s in plan.steps
        if s.NAME != "join"
        and not (s.NAME == "where" and s.column in columns)
        and not (s.NAME == "aggregate" and not asked)
    ]
    return _before_outputs(plan.model_copy(update={"steps": kept}), join)


def _value_said(column: str, value: Any, said: str) -> bool:
    """Whether ``said`` names ``value`` of ``column`` (as :data:`VALUES_SAID` says it)."""
    words = VALUES_SAID.get(column, {}).get(str(value), re.escape(str(value).lower()))
    return bool(re.search(words, said))


def said_grouped_values(intent: str, plan: Plan) -> Plan:
    """``plan`` that does not hold a closed-set column the request groups by ("by checker
    and decision") to one value it never names (a guessed ``decision = warn``)."""
    said = intent.lower()
    table = getattr(plan.steps[0], "table", "")
    grouped = set(groups(intent, table))
    kept = []
    for step in plan.steps:
        if step.NAME == "where" and step.column in grouped and step.column in VALUES_SAID:
            if not _value_said(step.column, step.equals, said):
                continue
        kept.append(step)
    return plan.model_copy(update={"steps": kept})


SHOWN = re.compile(
    r"\b(?:only show|show only|show just|just show|list only|only list|(?:only|just) the columns?"
    r"|columns?)\s+"
    r"((?:[a-z_]+(?:\s*,\s*(?:and\s+)?|\s+and\s+))+[a-z_]+)\b"
)


def said_columns(intent: str, plan: Plan) -> Plan:
    """``plan`` selecting only the columns the request lists to show ("only show checker,
    severity and decision"), none of which it filters on without naming a value."""
    said = intent.lower()
    select = plan.steps[0]
    table = getattr(select, "table", "")
    if table not in EXTRA or not (m := SHOWN.search(said)):
        return plan
    held = columns_of(table)
    listed = [c for c in re.split(r"\s*,\s*(?:and\s+)?|\s+and\s+", m.group(1)) if c]
    if len(listed) < 2 or not all(c in held for c in listed):
        return plan
    plan = reselected(plan, columns=listed)
    if "severity" in listed and severity_said(intent) is None:
        plan = reselected(plan, min_severity=None)
    kept = [plan.steps[0]]
    for step in plan.steps[1:]:
        if step.NAME == "where" and step.column in listed and step.equals is not None:
            if not _value_said(step.column, step.equals, said):
                continue
        kept.append(step)
    return plan.model_copy(update={"steps": kept})


RANKED_BY = re.compile(
    r"\b(?:highest|lowest|largest|smallest|biggest|greatest|top)\s+([a-z_]+(?: [a-z_]+)?)"
)


def said_ranked_column(intent: str, plan: Plan) -> Plan:
    """``plan`` whose ranking is by the number column the request ranks by ("the highest
    severity rank": ``severity_rank``), not another, and with no severity floor that
    ranking was mistaken for."""
    said = intent.lower()
    table = getattr(plan.steps[0], "table", "")
    if table not in EXTRA or not (m := RANKED_BY.search(said)):
        return plan
    numbers = (columns_of(table) & NUMERIC) | set(Score.ADDS)
    words = m.group(1).split()
    column = next((c for c in ("_".join(words), words[0]) if c in numbers), None)
    if column is None:
        return plan
    steps = [
        s.model_copy(update={"column": column}) if s.NAME == "top" and s.column != column else s
        for s in plan.steps
    ]
    plan = plan.model_copy(update={"steps": steps})
    if column == "severity_rank" and severity_said(intent) is None:
        plan = reselected(plan, min_severity=None)
    return plan
