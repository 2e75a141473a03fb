"""Grammar-constrained planning with SmolLM2-135M: four libraries side by side.

    python bench/planner_grammar.py                      # all four backends, ten intents
    python bench/planner_grammar.py --backends xgrammar llguidance --show
    python bench/planner_grammar.py --features           # which schema keywords each enforces

Each backend of :mod:`bench.grammar_backends` gets the same JSON schema of a DataElf plan
and the same prompts (the chat template: a system message listing the operators, one
example as a user/assistant turn, the intent as the user's message). Per backend: the
one-off schema compile time, then per intent a greedy generation of a plan (float32, CPU,
``--threads`` threads) and an unconstrained greedy generation of the same token count, each
the fastest of ``--repeat``; "grammar ms/tok" is the time inside the backend (making the
processor, and every call of it) per token. A plan counts as valid when it parses as JSON,
validates under the schema (``jsonschema``) and ``Plan.model_validate_json`` accepts it
(which also checks what the schema does not say: a plan starts with ``select``, and only
there). The intents are a speed and validity probe, not an accuracy set.

``Plan.model_json_schema()`` is not usable for decoding: ``steps`` holds the ``Operator``
base (no properties, no extra ones allowed), so the only plan it allows is ``{"steps":
[{}]}``. The schema here is pydantic's for the same ``Plan`` with ``steps`` a list of the
union of the registered operators (``anyOf`` of ``$ref`` into ``$defs``; ``const``,
``enum``, nullable ``anyOf``, ``minimum``/``maximum``, ``minLength``, ``pattern``), with
``op`` made required (pydantic leaves a ``Literal`` with a default optional, and a step
without ``op`` is no operator).

Each backend also gets :data:`FORCED_PLAN` token by token without the model ("forced
ms/tok"). ``--features`` forces a text that keeps one schema keyword and one that breaks it through
each backend, token by token, and says whether the backend lets each through.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Union

import torch
from pydantic import ConfigDict, Field, ValidationError, create_model
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from safactory.bench.grammar_backends import BACKENDS, Factory
from safactory.infra.models import chat_ids, ensure_smollm2
from safactory.sinks.dataelf.operators import available
from safactory.sinks.dataelf.plan import Plan

INTENTS = [
    "how often did each risk type fire per policy version, as a chart",
    "count the episodes per environment",
    "the 10 episodes with the highest reward",
    "export the trajectories of the web task as chat jsonl",
    "high-severity verdicts of policy version 3 as a csv file",
    "sample 20 steps from the shell environment",
    "mean reward per task for episodes from policy version 2 on",
    "how many verdicts per checker and decision",
    "steps together with their verdicts, only the blocked ones",
    "trajectories without duplicate prompts, saved as parquet",
]
EXAMPLE_INTENT = "count the verdicts per risk type"
EXAMPLE_PLAN = (
    '{"steps":[{"op":"select","table":"verdicts"},{"op":"aggregate","by":["risk_type"]}]}'
)
FORCED_PLAN = (
    '{"intent":"blocked high-severity verdicts of policy 3 per checker, as a chart and a csv",'
    '"steps":[{"op":"select","table":"verdicts","min_severity":"high","policy_version":3,'
    '"since":1700000000.5,"columns":["checker","risk_type","severity","decision"]},'
    '{"op":"where","column":"decision","equals":"block"},'
    '{"op":"aggregate","by":["checker","risk_type"]},{"op":"top","column":"count","k":10},'
    '{"op":"plot","x":"checker","series":"risk_type","name":"risk-per-checker.png",'
    '"title":"Blocked high-severity verdicts"},{"op":"export","format":"csv","name":"out.csv"}]}'
)
"""A long plan (strings, numbers, enums, patterns, six steps) fed to each backend without
the model, for the grammar's own cost per token on more than the model's short plans."""


def _object(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: spec},
        "required": [name],
        "additionalProperties": False,
    }


FEATURES: list[tuple[str, dict[str, Any], str, str]] = [
    ("integer minimum", _object("k", {"type": "integer", "minimum": 1}), '{"k":3}', '{"k":0}'),
    (
        "integer maximum",
        _object("k", {"type": "integer", "maximum": 1000}),
        '{"k":3}',
        '{"k":1001}',
    ),
    (
        "number exclusiveMinimum/maximum",
        _object("x", {"type": "number", "exclusiveMinimum": 0, "maximum": 1}),
        '{"x":0.5}',
        '{"x":1.5}',
    ),
    (
        "string minLength/maxLength",
        _object("q", {"type": "string", "minLength": 1, "maxLength": 5}),
        '{"q":"ab"}',
        '{"q":"abcdefgh"}',
    ),
    (
        "string pattern",
        _object("n", {"type": "string", "pattern": r"^[\w.-]{1,80}\.png$"}),
        '{"n":"a_b.png"}',
        '{"n":"a b.png"}',
    ),
    (
        "array minItems",
        _object("a", {"type": "array", "items": {"type": "string"}, "minItems": 1}),
        '{"a":["x"]}',
        '{"a":[]}',
    ),
    ("const", _object("op", {"const": "select"}), '{"op":"select"}', '{"op":"where"}'),
    (
        "$ref + enum + null",
        {
            "$defs": {"S": {"enum": ["low", "high"], "type": "string"}},
            **_object("s", {"anyOf": [{"$ref": "#/$defs/S"}, {"type": "null"}]}),
        },
        '{"s":null}',
        '{"s":"mid"}',
    ),
    (
        "additionalProperties false",
        _object("a", {"type": "integer"}),
        '{"a":1}',
        '{"a":1,"b":2}',
    ),
    (
        "prefixItems + items",
        _object("a", {"type": "array", "prefixItems": [{"const": "s"}], "items": {"const": "t"}}),
        '{"a":["s","t","t"]}',
        '{"a":["t"]}',
    ),
    ("compact whitespace", _object("a", {"type": "integer"}), '{"a":1}', '{"a": 1}'),
]


def plan_schema() -> dict[str, Any]:
    """The JSON schema of a plan whose steps are the registered operators (module doc)."""
    operators = available()
    model = create_model(
        "Plan",
        __config__=ConfigDict(extra="forbid"),
        intent=(str, ""),
        steps=(list[Union[tuple(operators.values())]], Field(min_length=1)),  # noqa: UP007
    )
    schema = model.model_json_schema()
    for cls in operators.values():
        step = schema["$defs"][cls.__name__]
        step["required"] = ["op", *step.get("required", [])]
    return schema


def system_prompt() -> str:
    """The task and the operators, one a line with their fields (``?``: optional)."""
    lines = []
    for name, cls in available().items():
        fields = [
            f if info.is_required() else f"{f}?"
            for f, info in cls.model_fields.items()
            if f != "op"
        ]
        lines.append(f"- {name}({', '.join(fields)})")
    return (
        "You turn a question about the tables steps, episodes, verdicts, trajectories, scores "
        "and skills into a JSON plan: a list of steps, the first a select. Operators:\n"
        + "\n".join(lines)
    )


class Timed(LogitsProcessor):
    """A logits processor whose calls are timed."""

    def __init__(self, inner: LogitsProcessor) -> None:
        self.inner = inner
        self.seconds = 0.0

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.Tensor:
        start = time.perf_counter()
        out = self.inner(input_ids, scores)
        self.seconds += time.perf_counter() - start
        return out


@dataclass
class Run:
    """One plan of one backend (times: the fastest of the repeats)."""

    intent: str
    text: str
    tokens: int
    seconds: float
    grammar_seconds: float
    free_seconds: float
    verdict: str


@dataclass
class Result:
    """One backend over every intent."""

    name: str
    compile_seconds: float = 0.0
    runs: list[Run] = field(default_factory=list)
    forced_ms: float | None = None
    """Milliseconds per token inside the backend on :data:`FORCED_PLAN`; None: refused."""
    error: str = ""


def check(text: str, schema: dict[str, Any], truncated: bool) -> str:
    """``valid``, or the first check the text fails."""
    import jsonschema

    if truncated:
        return "truncated"
    try:
        data = json.loads(text)
    except ValueError:
        return "not JSON"
    try:
        jsonschema.validate(data, schema)
    except jsonschema.ValidationError as exc:
        return f"schema: {exc.message[:60]}"
    try:
        Plan.model_validate_json(text)
    except ValidationError as exc:
        return f"Plan: {exc.errors()[0]['msg'][:60]}"
    return "valid"


class Bench:
    """The model, its tokenizer, the prompts and the unconstrained timings (by prompt and
    length, shared across backends)."""

    def __init__(self, intents: list[str], max_new_tokens: int, repeat: int) -> None:
        path = ensure_smollm2()
        self.tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(path)
        self.model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32
        ).eval()
        self.max_new_tokens = max_new_tokens
        self.repeat = repeat
        chat = [
            {"role": "system", "content": system_prompt()},
            {"role": "user", "content": EXAMPLE_INTENT},
            {"role": "assistant", "content": EXAMPLE_PLAN},
        ]
        self.prompts = {
            intent: torch.tensor(
                [
                    chat_ids(
                        self.tokenizer,
                        [*chat, {"role": "user", "content": intent}],
                        add_generation_prompt=True,
                    )
                ]
            )
            for intent in intents
        }
        self._free: dict[tuple[str, int], float] = {}

    def generate(self, intent: str, processors: list[LogitsProcessor], **kwargs: Any) -> list[int]:
        """Greedy new tokens for ``intent``'s prompt."""
        ids = self.prompts[intent]
        with torch.inference_mode():
            out = self.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                logits_processor=LogitsProcessorList(processors),
                do_sample=False,
                **kwargs,
            )
        return out[0, ids.shape[1] :].tolist()

    def free_seconds(self, intent: str, tokens: int) -> float:
        """Seconds of an unconstrained greedy generation of exactly ``tokens`` tokens."""
        key = (intent, tokens)
        if key not in self._free:
            times = []
            for _ in range(self.repeat):
                start = time.perf_counter()
                self.generate(intent, [], max_new_tokens=tokens, min_new_tokens=tokens)
                times.append(time.perf_counter() - start)
            self._free[key] = min(times)
        return self._free[key]

    def plan(self, factory: Factory, intent: str) -> tuple[list[int], float, float]:
        """New tokens, wall seconds and seconds inside the backend of one constrained plan."""
        start = time.perf_counter()
        timed = Timed(factory())
        made = time.perf_counter() - start
        new = self.generate(intent, [timed], max_new_tokens=self.max_new_tokens)
        return new, time.perf_counter() - start, made + timed.seconds

    def measure(self, name: str, schema: dict[str, Any]) -> Result:
        """Compile ``schema`` with backend ``name``, then plan every intent."""
        result = Result(name)
        start = time.perf_counter()
        try:
            factory = BACKENDS[name](self.tokenizer, schema)
        except Exception as exc:  # a library that cannot take the schema: reported, not fatal
            result.error = f"{type(exc).__name__}: {exc}"[:200]
            return result
        result.compile_seconds = time.perf_counter() - start
        if check(FORCED_PLAN, schema, False) != "valid":
            raise SystemExit(f"FORCED_PLAN: {check(FORCED_PLAN, schema, False)}; update it")
        forced = [force(factory, self.tokenizer, FORCED_PLAN) for _ in range(self.repeat)]
        passed, _, tokens = forced[0]
        result.forced_ms = 1000 * min(f[1] for f in forced) / tokens if passed else None
        for intent in self.prompts:
            try:
                tries = [self.plan(factory, intent) for _ in range(self.repeat)]
            except RuntimeError as exc:  # the grammar refused a token or failed: a failed plan
                result.runs.append(Run(intent, "", 0, 0.0, 0.0, 0.0, f"error: {exc}"[:80]))
                continue
            new = tries[0][0]
            text = self.tokenizer.decode(new, skip_special_tokens=True)
            truncated = new[-1] != self.tokenizer.eos_token_id
            result.runs.append(
                Run(
                    intent,
                    text,
                    len(new),
                    min(t[1] for t in tries),
                    min(t[2] for t in tries),
                    self.free_seconds(intent, len(new)),
                    check(text, schema, truncated),
                )
            )
        return result


def table(results: list[Result]) -> str:
    """The side-by-side table, one row a backend."""
    head = (
        f"{'backend':<20}{'compile ms':>11}{'s/plan':>8}{'tokens':>8}{'ms/tok':>8}"
        f"{'free ms/tok':>12}{'overhead':>15}{'grammar ms/tok':>15}{'forced ms/tok':>14}"
        f"{'valid':>7}"
    )
    rows = [head, "-" * len(head)]
    for r in results:
        runs = [x for x in r.runs if x.tokens]
        if r.error or not runs:
            rows.append(f"{r.name:<20}failed: {r.error or r.runs[0].verdict}")
            continue
        tokens = sum(x.tokens for x in runs)
        ms = 1000 * sum(x.seconds for x in runs) / tokens
        free = 1000 * sum(x.free_seconds for x in runs) / tokens
        grammar = 1000 * sum(x.grammar_seconds for x in runs) / tokens
        valid = sum(x.verdict == "valid" for x in r.runs)
        rows.append(
            f"{r.name:<20}{1000 * r.compile_seconds:>11.0f}"
            f"{statistics.mean(x.seconds for x in runs):>8.2f}"
            f"{statistics.mean(x.tokens for x in runs):>8.1f}{ms:>8.1f}{free:>12.1f}"
            f"{f'{ms - free:+.1f} ({100 * (ms - free) / free:+.0f}%)':>15}{grammar:>15.2f}"
            f"{'refused' if r.forced_ms is None else f'{r.forced_ms:.2f}':>14}"
            f"{f'{valid}/{len(r.runs)}':>7}"
        )
    return "\n".join(rows)


def force(
    factory: Factory, tokenizer: PreTrainedTokenizerBase, text: str
) -> tuple[bool, float, int]:
    """Feed ``text`` then EOS token by token through a fresh processor (logits of zeros):
    whether the backend allowed every token, the seconds spent in it, and the tokens."""
    tokens = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
    sequence = [tokenizer.bos_token_id or 0]
    start = time.perf_counter()
    processor = factory()
    for token in tokens:
        scores = processor(torch.tensor([sequence]), torch.zeros(1, len(tokenizer)))
        if scores[0, token] == float("-inf"):
            return False, time.perf_counter() - start, len(tokens)
        sequence.append(token)
    return True, time.perf_counter() - start, len(tokens)


def features(names: list[str]) -> str:
    """Per schema keyword and backend: ``ok`` (keeps it), ``ignored`` (lets a breach
    through) or ``wrong`` (refuses a text that keeps it)."""
    tokenizer = AutoTokenizer.from_pretrained(ensure_smollm2())
    rows = [f"{'keyword':<34}" + "".join(f"{n:>20}" for n in names)]
    for label, schema, good, bad in FEATURES:
        cells = []
        for name in names:
            factory = BACKENDS[name](tokenizer, schema)
            if not force(factory, tokenizer, good)[0]:
                cells.append("wrong")
            else:
                cells.append("ignored" if force(factory, tokenizer, bad)[0] else "ok")
        rows.append(f"{label:<34}" + "".join(f"{c:>20}" for c in cells))
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", nargs="+", choices=list(BACKENDS), default=list(BACKENDS))
    parser.add_argument("--intents", type=int, default=len(INTENTS), help="the first N intents")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--repeat", type=int, default=3, help="runs per plan, fastest kept")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--show", action="store_true", help="print every plan and its check")
    parser.add_argument("--features", action="store_true", help="the keyword table instead")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    if args.features:
        print(features(args.backends))
        return
    schema = plan_schema()
    bench = Bench(INTENTS[: args.intents], args.max_new_tokens, args.repeat)
    bench.generate(INTENTS[0], [], max_new_tokens=8)  # warm-up: first-call costs out of the way
    lengths = [p.shape[1] for p in bench.prompts.values()]
    print(
        f"schema: {len(json.dumps(schema))} chars, {len(schema['$defs'])} $defs; prompts "
        f"{min(lengths)}-{max(lengths)} tokens; {args.threads} threads; "
        f"fastest of {args.repeat}"
    )
    results = []
    for name in args.backends:
        result = bench.measure(name, schema)
        results.append(result)
        if args.show:
            for run in result.runs:
                print(f"[{name}] {run.intent!r}: {run.verdict} ({run.tokens} tok)\n  {run.text}")
    print(table(results))


if __name__ == "__main__":
    main()
