"""Labelled trajectories from the project's own environments, for the auditor's benchmarks.

    python bench/own_episodes.py [--out own.jsonl]

Every suite task of the tool-use, OS-shell (bubblewrap sandbox), embodied and QA
environments is run in process twice: by the careful policy (the task's safe plan) and by
the reckless one (its unsafe plan), including the suites' planted injections; every chore of
the choice environment (the demo's) once per menu entry. Each episode is labelled by the
environment's own ground truth (``EpisodeEnded.safety``), not by any auditor. The steps are
exactly those the live worker would audit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from safactory.agents.envs.choice_env import LABELS
from safactory.agents.policies import PolicyConfig, make_policy
from safactory.agents.policies.base import Policy, PolicyInput, PolicyOutput, assistant_message
from safactory.agents.registry import env_class, make_env
from safactory.agents.runner import EpisodeRunner
from safactory.agents.sandbox.bubblewrap import SandboxError, check_host
from safactory.schemas import Action, EpisodeEnded, Event, Step, Task
from safactory.tools.importers import AuditRecord

ENVS = ("tools", "os", "embodied", "qa")
POLICIES = ("careful", "reckless")
CHOICE = "choice"


class PickPolicy(Policy):
    """Answers every menu with one label (the choice environment's every entry in turn)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.name = f"pick-{label}"

    async def act(self, inp: PolicyInput) -> PolicyOutput:
        action = Action(text=self.label)
        return PolicyOutput(action, assistant_message(action))


class Collector:
    """A publisher that keeps events in memory instead of sending them to Kafka."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def publish(self, event: Event) -> Any:
        self.events.append(event)


async def run_episode(env_name: str, suite_task: str, policy_kind: str) -> AuditRecord | None:
    """One episode of one suite task, as an audit record labelled by the environment
    (``policy_kind`` ``pick-N``: the menu's entry N)."""
    collector = Collector()
    env = make_env(env_name)
    task = Task(
        task_id=f"own-{env_name}-{suite_task}-{policy_kind}",
        env=env_name,
        spec={"suite_task": suite_task},
        group_id="own",
    )  # type: ignore[call-arg]
    spec = next(s for s in env_class(env_name).suite() if s.task_id == suite_task)
    policy = (
        PickPolicy(policy_kind.removeprefix("pick-"))
        if policy_kind.startswith("pick-")
        else make_policy(PolicyConfig(kind=policy_kind))  # type: ignore[arg-type]
    )
    runner = EpisodeRunner(collector, policy)  # type: ignore[arg-type]
    try:
        await runner.run(env, task, spec)
    finally:
        env.close()
    steps = [e for e in collector.events if isinstance(e, Step)]
    ended = next((e for e in collector.events if isinstance(e, EpisodeEnded)), None)
    if not steps or ended is None or ended.safety is None:
        return None
    return AuditRecord(
        id=task.task_id,
        key=task.task_id,
        source="own",
        steps=steps,
        unsafe=ended.safety.unsafe,
        group=env_name,
        labels={"violations": ended.safety.violations, "kind": spec.kind},
    )


def own_records() -> list[AuditRecord]:
    """Every suite task of :data:`ENVS` under both policies and every choice chore under
    each menu entry (the OS env is left out, with a note on stderr, where bubblewrap cannot
    run)."""
    envs = list(ENVS)
    try:
        check_host()
    except SandboxError as exc:
        print(f"own episodes: OS env skipped ({exc})", file=sys.stderr)
        envs.remove("os")
    out = []
    for env_name in [*envs, CHOICE]:
        policies = [f"pick-{label}" for label in LABELS] if env_name == CHOICE else POLICIES
        for spec in env_class(env_name).suite():
            for policy in policies:
                record = asyncio.run(run_episode(env_name, spec.task_id, policy))
                if record is not None:
                    out.append(record)
    return out


def _acts(record: AuditRecord) -> dict[tuple[str, str], str]:
    """(tool, arguments JSON) -> what came back, for each act of an episode (a choice env's
    command as ``shell``)."""
    out = {}
    for step in record.steps:
        call = step.action.tool_call
        if call is not None and call.function.name != "finish":
            out[(call.function.name, call.function.arguments)] = step.tool_result or ""
        elif call is None and step.action.text and record.group == CHOICE:
            out[("shell", json.dumps({"command": step.action.text}))] = step.tool_result or ""
    return out


def labelled_acts(records: list[AuditRecord]) -> list[dict[str, Any]]:
    """Acts labelled by the environments' ground truth: every act of a safe episode is safe;
    an act of an unsafe episode is unsafe when no safe episode of the same task made it."""
    safe: dict[str, set[tuple[str, str]]] = {}
    for r in records:
        if not r.unsafe:
            safe.setdefault(r.id.rsplit("-", 1)[0], set()).update(_acts(r))
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in records:
        known = safe.get(r.id.rsplit("-", 1)[0], set())
        for (tool, arguments), result in _acts(r).items():
            unsafe = bool(r.unsafe) and (tool, arguments) not in known
            row = {"tool": tool, "arguments": arguments, "result": result[:400]}
            row.update(unsafe=unsafe, env=r.group)
            out.setdefault((tool, arguments), row)["unsafe"] &= unsafe
    rows = sorted(out.values(), key=lambda row: (row["env"], row["tool"], row["arguments"]))
    return [{"id": f"{row['env']}-{i:04d}", **row} for i, row in enumerate(rows)]


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the records here as JSONL")
    parser.add_argument(
        "--actions", type=Path, help="write the acts, labelled by ground truth, here as JSONL"
    )
    args = parser.parse_args(argv)
    records = own_records()
    if args.actions:
        rows = labelled_acts(records)
        args.actions.write_text("".join(json.dumps(row) + "\n" for row in rows))
        print(f"{len(rows)} acts, {sum(r['unsafe'] for r in rows)} unsafe -> {args.actions}")
    unsafe = sum(bool(r.unsafe) for r in records)
    print(f"{len(records)} episodes, {unsafe} unsafe by the environments' ground truth")
    if args.out:
        with args.out.open("w") as fh:
            for r in records:
                line = {"id": r.id, "unsafe": r.unsafe, "group": r.group, "labels": r.labels}
                line["steps"] = [s.model_dump(mode="json") for s in r.steps]
                fh.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
