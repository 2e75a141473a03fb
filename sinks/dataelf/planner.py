"""Plans from plain language: an intent turned into a DataElf plan by a language model
whose output is constrained to the plan's JSON schema.

* :class:`EmbeddedPlanner`: SmolLM2-135M fine-tuned on a corpus generated from the operator
  catalogue (:mod:`.corpus`, :mod:`.tuning`), on the CPU, greedy, its tokens masked to the
  answer grammar (:mod:`safactory.infra.grammar`), so what it writes always parses as a plan
  of known operators with valid parameter types, or as a question back
  (:class:`PlanQuestion`) when the request names no kind of record or a name the database
  lacks.
* :class:`EndpointPlanner`: any OpenAI-compatible chat endpoint, asked for the same schema
  with ``response_format: json_schema`` (OpenAI structured outputs; vLLM's guided decoding),
  prompted with the catalogue (tables, columns, operators, the database's values) and the
  worked examples nearest in meaning to the intent (``examples.jsonl``; the accuracy set in
  ``tests/data/intents.jsonl`` is kept apart from them).

A plan still goes through :class:`~.plan.Plan` validation (``select`` first, ranges), and
its columns are checked when it runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import types
import typing
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, ValidationError

from ..location import Db
from ..query import TABLES, QueryError, open_table
from ..tables import COMMON, EXTRA
from .corpus import plan_text
from .grounding import ground, grounded
from .operators import HIDDEN_COLUMNS, Embed, Operator, PlanError, available
from .plan import Plan

EXAMPLES = Path(__file__).with_name("examples.jsonl")
"""The planner's worked examples: one ``{"intent", "steps"}`` a line."""
SHOWN_EXAMPLES = 4
MAX_PLAN_TOKENS = 320
HINTED = {"env": "episodes", "risk_type": "verdicts", "checker": "verdicts"}
"""Columns whose values in the database the prompt lists, and the table that has them."""

SYSTEM = """You write DataElf plans. A plan answers a request about an AI-agent factory's \
stored records. It is JSON {{"steps": [...]}}: operator calls run in order, each on the rows \
the previous one produced; the first is always select.

Tables for select, and their columns:
{tables}

Operators (parameter: type = default; a parameter without a default is required):
{operators}

Values in this database: {values}
Answer with the plan's JSON only."""


class Planner(Protocol):
    """Turns an intent into a plan."""

    def plan(self, intent: str) -> Plan:
        """The plan for ``intent``; :class:`PlanError` when none could be made."""
        ...


@dataclass(frozen=True)
class Example:
    """A worked example: an intent and the plan's steps."""

    intent: str
    steps: list[dict[str, Any]]


def load_examples(path: Path = EXAMPLES) -> list[Example]:
    """Examples from a JSON-lines file, each validated as a plan (a bad one is named)."""
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        raw = json.loads(line)
        try:
            Plan.model_validate(raw)
        except ValidationError as exc:
            raise PlanError(f"{path}:{n}: not a valid plan: {exc.errors()[0]['msg']}") from None
        out.append(Example(raw["intent"], raw["steps"]))
    return out


def planned_operators() -> dict[str, type[Operator]]:
    """The operators a planner writes plans of: every one that works on the database (the
    file readers of :mod:`.science` are run from a written plan, ``data ask --plan``)."""
    return {n: c for n, c in available().items() if c.needs_input or n == "select"}


def plan_schema(
    values: dict[str, list[str]] | None = None,
    operators: dict[str, type[Operator]] | None = None,
) -> dict[str, Any]:
    """The JSON schema a planner's answer must match: ``{"steps": [select, op, ...]}``,
    each step an object of one operator's parameters with its ``op`` first. Column names
    are narrowed to those of the tables and what operators add, and env, risk type and
    checker names to ``values`` (what the database holds) where given."""
    operators = operators or planned_operators()
    kinds = {"column": known_columns(operators), **(values or {})}
    defs: dict[str, Any] = {}
    variants = {}
    for name, cls in sorted(operators.items()):
        schema = cls.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(schema.pop("$defs", {}))
        properties = {"op": {"const": name}}
        properties.update({k: v for k, v in schema["properties"].items() if k != "op"})
        schema["properties"] = properties
        schema["required"] = ["op", *(r for r in schema.get("required", []) if r != "op")]
        variants[name] = _lean(schema, kinds)
    rest = [v for n, v in variants.items() if n != "select"]
    steps = {
        "type": "array",
        "prefixItems": [variants["select"]],
        "items": {"anyOf": rest},
        "minItems": 1,
        "maxItems": 8,
    }
    schema = {
        "type": "object",
        "properties": {"steps": steps},
        "required": ["steps"],
        "additionalProperties": False,
    }
    defs = {k: _lean(v, kinds) for k, v in defs.items()}
    schema["$defs"] = defs | {kind: {"enum": names} for kind, names in kinds.items() if names}
    return schema


def known_columns(operators: dict[str, type[Operator]] | None = None) -> list[str]:
    """Every column a plan may name: the tables' visible ones and what operators add
    (``mean_<column>`` for aggregate's mean, ``<table>_<column>`` for join's)."""
    operators = operators or planned_operators()
    fields = {
        t: [f.name for f in [*COMMON, *EXTRA[t]] if f.name not in HIDDEN_COLUMNS] for t in TABLES
    }
    visible = {n for names in fields.values() for n in names}
    adds = {c for cls in operators.values() for c in cls.ADDS if "*" not in c}
    found = visible | adds
    for cls in operators.values():
        if "mean_*" in cls.ADDS:
            found |= {f"mean_{c}" for c in visible | adds}
        if "<table>_*" in cls.ADDS:
            found |= {f"{t}_{c}" for t, names in fields.items() for c in names}
    return sorted(found)


def _lean(schema: Any, kinds: dict[str, list[str]]) -> Any:
    """``schema`` without titles and descriptions (they only lengthen the grammar), its
    named kinds of string (``x-kind``) narrowed to ``kinds`` where known."""
    if isinstance(schema, list):
        return [_lean(v, kinds) for v in schema]
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("x-kind")
    if kind is not None:  # one rule a kind, referred to wherever it is used
        return {"$ref": f"#/$defs/{kind}"} if kinds.get(kind) else {"type": "string"}
    out = {}
    for key, value in schema.items():
        if key == "properties":  # parameter names, which may be "title"
            out[key] = {name: _lean(v, kinds) for name, v in value.items()}
        elif key not in ("title", "description"):
            out[key] = _lean(value, kinds)
    return out


def _type_name(annotation: Any) -> str:
    """A parameter's type in a few characters: ``str``, ``int?``, ``steps|episodes``."""
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is typing.Literal:
        return "|".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        shown = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(shown)
    if origin is list:
        return f"list of {_type_name(args[0])}" if args else "list"
    if isinstance(annotation, type) and issubclass(annotation, str) and annotation is not str:
        return "|".join(m.value for m in annotation)  # a str enum: its values
    return getattr(annotation, "__name__", str(annotation))


def describe_operators(operators: dict[str, type[Operator]] | None = None) -> str:
    """One line an operator: its name, what it does, its parameters."""
    operators = operators or planned_operators()
    lines = []
    for name, cls in sorted(operators.items(), key=lambda kv: (kv[0] != "select", kv[0])):
        params = []
        for pname, info in cls.model_fields.items():
            if pname == "op":
                continue
            shown = f"{pname}: {_type_name(info.annotation)}"
            if not info.is_required():
                default = info.get_default(call_default_factory=True)
                shown += f" = {json.dumps(default)}"
            params.append(shown)
        doc = " ".join((cls.__doc__ or "").replace("``", "").split()).split(". ")[0].rstrip(".")
        lines.append(f"- {name}({'; '.join(params)}): {doc}.")
    return "\n".join(lines)


def describe_tables() -> str:
    """One line a table: its name and visible columns."""
    lines = []
    for table in TABLES:
        names = [f.name for f in [*COMMON, *EXTRA[table]] if f.name not in HIDDEN_COLUMNS]
        names = [n for n in names if n not in ("schema", "ingested_at", "source_offset")]
        lines.append(f"- {table}: {', '.join(names)}")
    return "\n".join(lines)


def database_values(db: Db | None) -> dict[str, list[str]]:
    """The values ``env``, ``risk_type`` and ``checker`` take in ``db`` (empty without one)."""
    found: dict[str, list[str]] = {}
    if db is None:
        return found
    for column, table in HINTED.items():
        try:
            rows = open_table(db, table).search().select([column]).limit(None).to_arrow()
        except QueryError:
            continue
        values = sorted({str(v) for v in rows[column].to_pylist() if v is not None})
        if values:
            found[column] = values[:30]
    return found


def known_values(db: Db | None, envs: list[str], checkers: list[str]) -> dict[str, list[str]]:
    """What a plan may name: the database's values (:func:`database_values`), every env the
    factory registers and every registered checker (a re-audit may leave out one that never
    fired here)."""
    values = database_values(db)
    values["env"] = sorted({*values.get("env", []), *envs})
    values["checker"] = sorted({*values.get("checker", []), *checkers})
    return values


@dataclass
class Prompt:
    """Builds a planner's chat messages: the catalogue (unless ``catalogue`` is off), the
    nearest examples, the intent."""

    embed: Embed
    examples: list[Example] = field(default_factory=load_examples)
    values: dict[str, list[str]] = field(default_factory=dict)
    shown: int = SHOWN_EXAMPLES
    catalogue: bool = True
    cache: Path | None = None
    """A folder keeping the examples' vectors between runs (by a digest of their intents);
    its name should say which encoder made them."""

    @cached_property
    def _system(self) -> str:
        values = "; ".join(f"{k}: {', '.join(v)}" for k, v in self.values.items()) or "unknown"
        return SYSTEM.format(
            tables=describe_tables(), operators=describe_operators(), values=values
        )

    @cached_property
    def _vectors(self) -> np.ndarray:
        texts = [e.intent for e in self.examples]
        if self.cache is None:
            return np.asarray(self.embed(texts), dtype=np.float32)
        kept = self.cache / f"{hashlib.sha256(chr(10).join(texts).encode()).hexdigest()[:16]}.npy"
        if kept.is_file():
            return np.load(kept)
        vectors = np.asarray(self.embed(texts), dtype=np.float32)
        self.cache.mkdir(parents=True, exist_ok=True)
        partial = kept.with_suffix(f".{os.getpid()}.npy")
        np.save(partial, vectors)
        os.replace(partial, kept)
        return vectors

    def nearest(self, intent: str) -> list[Example]:
        """The ``shown`` examples nearest in meaning to ``intent``, the nearest last (an
        example of the intent itself left out: measuring on the examples stays fair)."""
        query = np.asarray(self.embed([intent])[0], dtype=np.float32)
        order = np.argsort(-(self._vectors @ query), kind="stable")
        order = [i for i in order if self.examples[i].intent != intent][: self.shown]
        return [self.examples[i] for i in reversed(order)]

    def messages(self, intent: str) -> list[dict[str, str]]:
        """OpenAI chat messages asking for ``intent``'s plan."""
        out = [{"role": "system", "content": self._system}] if self.catalogue else []
        for example in self.nearest(intent):
            answer = plan_text(example.steps)
            out += [
                {"role": "user", "content": example.intent},
                {"role": "assistant", "content": answer},
            ]
        return [*out, {"role": "user", "content": intent}]


def parse_plan(intent: str, answer: str) -> Plan:
    """A planner's answer as a plan for ``intent``; :class:`PlanError` saying what is wrong."""
    try:
        steps = json.loads(answer)["steps"]
        return Plan.model_validate({"intent": intent, "steps": steps})
    except (ValueError, KeyError, TypeError) as exc:
        reason = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        raise PlanError(f"the planner's answer is not a valid plan: {reason}") from None


@dataclass
class Planned:
    """A plan with how it was made: the raw answer, seconds and tokens."""

    plan: Plan
    answer: str
    seconds: float
    tokens: int


class PlanQuestion(PlanError):
    """The planner's question back, instead of a plan it would have to guess (``answer``:
    what the model wrote)."""

    answer = ""


QUESTIONS = {
    "table": "Which records do you mean: {tables}?",
    "env": "Which env do you mean? This factory's envs: {env}.",
    "risk_type": "Which risk type do you mean? This database's: {risk_type}.",
}
"""What the planner may ask back about, and how each question is said."""


def question(about: str, values: dict[str, list[str]]) -> PlanQuestion:
    """The one-line question about ``about``, naming the choices."""
    names = {k: ", ".join(v) or "none yet" for k, v in values.items()}
    names.setdefault("env", "none yet")
    names.setdefault("risk_type", "none yet")
    return PlanQuestion(QUESTIONS[about].format(tables=", ".join(TABLES), **names))


def answer_schema(values: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """The embedded planner's answer: a plan (:func:`plan_schema`) or ``{"ask": about}``."""
    plan = plan_schema(values)
    defs = plan.pop("$defs")
    ask = {
        "type": "object",
        "properties": {"ask": {"enum": list(QUESTIONS)}},
        "required": ["ask"],
        "additionalProperties": False,
    }
    return {"anyOf": [plan, ask], "$defs": defs}


class EmbeddedPlanner:
    """SmolLM2-135M fine-tuned on the generated corpus (:mod:`.tuning`, built on first use),
    on the CPU, greedy, its tokens masked to the answer grammar (a plan of known operators
    with valid parameter types, or a question back) by ``constrain`` (default:
    :func:`safactory.infra.grammar.json_schema`).

    With ``examples``, the model at ``model_path`` reads the worked examples nearest to the
    request before it (chat turns) instead of the request alone: how the base SmolLM2 plans
    while the fine-tuned weights build (:mod:`.background`)."""

    def __init__(
        self,
        values: dict[str, list[str]],
        model_path: Path | None = None,
        *,
        examples: Prompt | None = None,
        constrain: Callable[[Any, dict], Callable[[], Any]] | None = None,
        max_tokens: int = MAX_PLAN_TOKENS,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        from ...infra.grammar import json_schema
        from .tuning import ensure_planner

        path = model_path or ensure_planner()
        hf_logging.disable_progress_bar()  # a question back is the output's last line
        self.values = values
        self.examples = examples
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = AutoModelForCausalLM.from_pretrained(
            path, local_files_only=True, dtype=torch.float32
        ).eval()
        self.max_tokens = max_tokens
        self._schema = answer_schema(values)
        self._constrain = constrain or json_schema

    def plan(self, intent: str) -> Plan:
        return self.planned(intent).plan

    def planned(self, intent: str) -> Planned:
        """The plan for ``intent`` with its raw answer, time and token count;
        :class:`PlanQuestion` when the planner asks back instead."""
        from ...infra.grammar import greedy
        from .tuning import user_ids

        start = time.perf_counter()
        if self.examples is None:
            prompt = user_ids(self.tokenizer, intent)
        else:
            chat = self.examples.messages(intent)
            text = self.tokenizer.apply_chat_template(
                chat, tokenize=False, add_generation_prompt=True
            )
            prompt = self.tokenizer(text, add_special_tokens=False).input_ids
        constrained = self._constrain(self.tokenizer, grounded(self._schema, intent))()
        new = greedy(self.model, prompt, constrained, self.max_tokens, self.tokenizer.eos_token_id)
        answer = self.tokenizer.decode(new, skip_special_tokens=True)
        try:
            about = json.loads(answer).get("ask")
        except ValueError:
            about = None
        if about is None:
            plan, about = ground(intent, parse_plan(intent, answer))
        if about is not None:
            asked = question(about, self.values)
            asked.answer = answer
            raise asked
        return Planned(plan, answer, time.perf_counter() - start, len(new))


class EndpointPlanner:
    """An OpenAI-compatible chat endpoint (``base_url`` ending in ``/v1``) asked for the
    plan schema with ``response_format: json_schema``, at temperature 0."""

    def __init__(
        self,
        prompt: Prompt,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
    ) -> None:
        self.prompt = prompt
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self._schema = plan_schema(prompt.values)

    def plan(self, intent: str) -> Plan:
        return self.planned(intent).plan

    def planned(self, intent: str) -> Planned:
        """The plan for ``intent`` with the endpoint's raw answer, time and token count."""
        start = time.perf_counter()
        body = {
            "model": self.model,
            "messages": self.prompt.messages(intent),
            "temperature": 0,
            "max_tokens": MAX_PLAN_TOKENS,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "dataelf_plan", "schema": self._schema, "strict": True},
            },
        }
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(
            self.url, json.dumps(body).encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                reply = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            raise PlanError(f"planner endpoint {self.url}: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise PlanError(f"planner endpoint {self.url}: {exc}") from None
        try:
            answer = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise PlanError(f"planner endpoint {self.url}: no message in {reply!r:.200}") from None
        tokens = int((reply.get("usage") or {}).get("completion_tokens", 0))
        return Planned(parse_plan(intent, answer), answer, time.perf_counter() - start, tokens)


def same_plan(a: Plan | BaseModel, b: Plan | BaseModel) -> bool:
    """Whether two plans do the same: equal steps once defaults, file names and titles are
    set aside (``export``'s and ``plot``'s ``name``, ``plot``'s ``title``)."""
    return _essence(a) == _essence(b)


def _essence(plan: Any) -> list[dict[str, Any]]:
    return [
        s.model_dump(exclude_defaults=True, exclude={"name", "title"}) | {"op": s.NAME}
        for s in plan.steps
    ]
