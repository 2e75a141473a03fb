"""DataElf's planner against the intent set: exact-plan, valid, executable and same-result
accuracy, with the time per plan (``python bench/planner_accuracy.py --db DEMO/lancedb``).

* exact: the same steps as the careful plan (defaults, file names and titles aside);
* valid: the answer is a plan (the grammar guarantees JSON of known operators; the plan's
  own checks still apply);
* executable: it runs on the database without an error;
* same result: its result table equals the careful plan's (visible columns).

The planner under test is SmolLM2 here, or ``--endpoint URL --model NAME`` (any
OpenAI-compatible server).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from safactory.agents import env_names
from safactory.cli.dataelf_job import services
from safactory.infra.embedding import MiniLM
from safactory.sinks.dataelf.operators import HIDDEN_COLUMNS, PlanError
from safactory.sinks.dataelf.plan import Plan, run_plan
from safactory.sinks.dataelf.planner import (
    EXAMPLES,
    EmbeddedPlanner,
    EndpointPlanner,
    Prompt,
    database_values,
    same_plan,
)
from safactory.sinks.query import QueryError

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True, help="a LanceDB the sink filled")
    parser.add_argument("--intents", type=Path, default=INTENTS)
    parser.add_argument(
        "--dev",
        action="store_true",
        help="measure on the planner's own examples instead (each planned without itself "
        "among the examples shown): for design choices, so the intent set stays unseen",
    )
    parser.add_argument("--endpoint", help="an OpenAI-compatible base URL (…/v1)")
    parser.add_argument("--model", default="default", help="the endpoint's model")
    parser.add_argument("--limit", type=int, default=0, help="the first N intents only")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--log", type=Path, help="write each intent's outcome here (JSONL)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    source = EXAMPLES if args.dev else args.intents
    cases = [json.loads(x) for x in source.read_text().splitlines() if x.strip()]
    cases = cases[: args.limit] if args.limit else cases
    values = database_values(args.db)
    # the intents name envs the demo does not run: every registered env may be named
    values["env"] = sorted({*values.get("env", []), *env_names()})
    prompt = Prompt(MiniLM().embed, values=values)
    if args.endpoint:
        planner = EndpointPlanner(prompt, args.endpoint, args.model)
    else:
        planner = EmbeddedPlanner(prompt)
    counts = {"exact": 0, "valid": 0, "executable": 0, "same result": 0}
    seconds, tokens, log = [], [], []
    for case in cases:
        careful = Plan.model_validate(case)
        try:
            planned = planner.planned(case["intent"])
        except PlanError as exc:
            log.append({"intent": case["intent"], "error": str(exc)})
            continue
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
            {"intent": case["intent"], "answer": planned.answer, "exact": exact, "same": same}
        )
    n = len(cases)
    who = (
        f"endpoint {args.endpoint} ({args.model})" if args.endpoint else "SmolLM2-135M + llguidance"
    )
    what = f"{n} {'examples (dev)' if args.dev else 'intents'}"
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
