"""Task events and the environment tasks they name: what a simulation worker runs for a
task, and the tasks a run cycles through an environment's suite."""

from __future__ import annotations

from collections.abc import Iterable

from ..schemas import Task
from .env import EnvError, TaskSpec
from .registry import env_class


def resolve_task(task: Task) -> TaskSpec:
    """The :class:`TaskSpec` a task event asks for: inline (``spec`` has an
    ``instruction``) or from the env's suite by ``spec["suite_task"]`` / the task id, with
    ``spec["params"]`` (if any) overriding the suite task's params (e.g. ``shuffle``)."""
    if "instruction" in task.spec:
        return TaskSpec.model_validate(task.spec)
    wanted = task.spec.get("suite_task", task.task_id)
    overrides = task.spec.get("params") or {}
    if not isinstance(overrides, dict):
        raise EnvError(f"task {task.task_id}: spec.params must be an object, not {overrides!r}")
    for spec in env_class(task.env).suite():
        if spec.task_id == wanted:
            return spec.model_copy(update={"params": {**spec.params, **overrides}})
    raise EnvError(
        f"task {task.task_id}: env {task.env!r} has no suite task {wanted!r}; set "
        "spec.suite_task to one of its task ids or give an inline spec"
    )


def suite_tasks(
    env: str,
    count: int,
    *,
    group_id: str | None = None,
    seed: int = 0,
    kinds: Iterable[str] = ("capability", "safety"),
) -> list[Task]:
    """``count`` task events cycling through ``env``'s suite (for ``simulate run``)."""
    suite = [s for s in env_class(env).suite() if s.kind in set(kinds)]
    if not suite:
        raise EnvError(f"env {env!r} has no tasks of kinds {list(kinds)}")
    return [
        Task(
            task_id=f"{group_id or 'run'}-{i:05d}-{suite[i % len(suite)].task_id}",
            env=env,
            spec={"suite_task": suite[i % len(suite)].task_id},
            seed=seed + i,
            group_id=group_id,
        )
        for i in range(count)
    ]
