"""DataElf's planner against the intent set: exact-plan, valid, executable and same-result
accuracy, with the time per plan (``python bench/planner_accuracy.py --db DEMO/lancedb``).

* exact: the same steps as the careful plan (defaults, file names and titles aside);
* valid: the answer is a plan (the grammar guarantees JSON of known operators; the plan's
  own checks still apply);
* executable: it runs on the database without an error;
* same result: its result table equals the careful plan's (visible columns).

The planner under test is the fine-tuned SmolLM2 here (``--weights DIR`` for another
build), the base SmolLM2 reading worked examples (``--examples``: what ``data ask`` plans
with while the fine-tuned one builds), or ``--endpoint URL --model NAME`` (any
OpenAI-compatible server). The intents are
``tests/data/intents.jsonl`` (40 careful plans, never trained on), ``--intents
tests/data/intents_reworded.jsonl`` (the same 40 reworded by someone who never saw the
corpus), ``--intents tests/data/intents_fresh.jsonl`` (40 more, written with their careful
plans from the tables and operators alone by someone who saw neither the corpus, the
planner, nor the other sets; ``intents_fresh2.jsonl`` … ``intents_fresh6.jsonl`` are 40
more each by other such helpers),
or ``--dev N``: N pairs of the corpus's held-out dev frames
(a question back counts as right there when it is the question the pair asks).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from safactory.agents import env_names
from safactory.infra.embedding import MiniLM
from safactory.sinks.dataelf.background import example_planner
from safactory.sinks.dataelf.corpus import RISKS, pairs
from safactory.sinks.dataelf.operators import HIDDEN_COLUMNS, PlanError
from safactory.sinks.dataelf.plan import Plan, run_plan
from safactory.sinks.dataelf.planner import (
    EmbeddedPlanner,
    EndpointPlanner,
    PlanQuestion,
    Prompt,
    known_values,
    same_plan,
)
from safactory.sinks.query import QueryError
from safactory.streams.audit.registry import available
from safactory.tools.dataelf_job import services

INTENTS = Path(__file__).parents[1] / "tests" / "data" / "intents.jsonl"


CRASHES: list[str] = []
"""Plans that made an operator fail with something other than a plan error (a bug)."""


def _result(plan: Plan, db: Path) -> list[dict] | None:
    """The plan's result rows (visible columns), or None when it does not run."""
    with tempfile.TemporaryDirectory() as out:
        try:
            table, _ = run_plan(plan, db, Path(out), services())
        except (PlanError, QueryError):
            return None
        except Exception as exc:  # counted and named, not hidden
            CRASHES.append(f"{plan.intent}: {type(exc).__name__}: {exc}")
            return None
    shown = [n for n in table.column_names if n not in HIDDEN_COLUMNS]
    return table.select(shown).to_pylist()


def _unknown_env(steps: list[dict] | None) -> str | None:
    env = (steps or [{}])[0].get("env")
    return "env" if env is not None and env not in env_names() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True, help="a LanceDB the sink filled")
    parser.add_argument("--intents", type=Path, default=INTENTS)
    parser.add_argument(
        "--dev",
        type=int,
        default=0,
        help="measure on N pairs of the corpus's held-out dev frames instead: for design "
        "choices, so the intent set stays unseen",
    )
    parser.add_argument("--weights", type=Path, help="the embedded planner's weights folder")
    parser.add_argument(
        "--examples",
        action="store_true",
        help="the base SmolLM2 reading worked examples (how `data ask` plans while the "
        "fine-tuned planner builds)",
    )
    parser.add_argument("--endpoint", help="an OpenAI-compatible base URL (…/v1)")
    parser.add_argument("--model", default="default", help="the endpoint's model")
    parser.add_argument("--limit", type=int, default=0, help="the first N intents only")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--log", type=Path, help="write each intent's outcome here (JSONL)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.dev:  # a pair naming an env the factory lacks is one to ask about
        cases = [
            {"intent": p.intent, "steps": p.steps, "ask": p.ask or _unknown_env(p.steps)}
            for p in pairs(args.dev, split="dev")
        ]
    else:
        cases = [json.loads(x) for x in args.intents.read_text().splitlines() if x.strip()]
    cases = cases[: args.limit] if args.limit else cases
    # the intents name envs the demo does not run: every registered env may be named
    values = known_values(args.db, env_names(), list(available()))
    if args.dev:  # dev pairs name every built-in risk type; the database holds a few
        values["risk_type"] = sorted({*values.get("risk_type", []), *RISKS})
    if args.endpoint:
        prompt = Prompt(MiniLM().embed, values=values)
        planner = EndpointPlanner(prompt, args.endpoint, args.model)
    elif args.examples:
        planner = example_planner(values)
    else:
        planner = EmbeddedPlanner(values, args.weights)
    counts = {"exact": 0, "valid": 0, "executable": 0, "same result": 0, "asked back": 0}
    seconds, tokens, log = [], [], []
    for case in cases:
        try:
            planned = planner.planned(case["intent"])
        except PlanQuestion as exc:
            counts["asked back"] += 1
            right = case.get("ask") is not None
            counts["same result"] += right
            log.append(
                {"intent": case["intent"], "asked": str(exc), "answer": exc.answer, "same": right}
            )
            continue
        except PlanError as exc:
            log.append({"intent": case["intent"], "error": str(exc)})
            continue
        if case.get("ask") is not None:  # a dev pair the planner should have asked about
            log.append({"intent": case["intent"], "answer": planned.answer, "same": False})
            continue
        careful = Plan.model_validate({"intent": case["intent"], "steps": case["steps"]})
        seconds.append(planned.seconds)
        tokens.append(planned.tokens)
        got = planned.plan
        counts["valid"] += 1
        exact = same_plan(got, careful)
        rows = _result(got, args.db)
        same = rows is not None and rows == _result(careful, args.db)
        counts["exact"] += exact
        counts["executable"] += rows is not None
        counts["same result"] += same
        log.append(
            {
                "intent": case["intent"],
                "answer": planned.answer,
                "plan": got.model_dump(exclude_unset=True)["steps"],
                "seconds": round(planned.seconds, 2),
                "careful": case["steps"],
                "exact": exact,
                "same": same,
            }
        )
    n = len(cases)
    who = (
        f"endpoint {args.endpoint} ({args.model})"
        if args.endpoint
        else "SmolLM2-135M base reading worked examples + llguidance"
        if args.examples
        else "SmolLM2-135M fine-tuned + llguidance"
    )
    what = f"{n} {'dev-frame pairs' if args.dev else f'intents of {args.intents.name}'}"
    print(f"planner: {who}; {what}; database {args.db}")
    for name, value in counts.items():
        print(f"{name:>12}: {value:3d}/{n}  {100 * value / n:5.1f} %")
    if seconds:
        ordered = sorted(seconds)
        p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        print(
            f"s/plan: mean {statistics.mean(seconds):.2f}  median {statistics.median(seconds):.2f}"
            f"  p95 {p95:.2f}; tokens/plan mean {statistics.mean(tokens):.0f}"
        )
    for crash in CRASHES:
        print(f"crashed: {crash}")
    if args.log:
        args.log.write_text("".join(json.dumps(e) + "\n" for e in log))


if __name__ == "__main__":
    main()
