"""Task suites are data files (agents/suites/data/*.json): every file validates, the counts
hold, what they load is exactly what the code they replaced built, and a broken file fails
in one line naming the file, the task and the field."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from safactory.agents.env import TaskSpec
from safactory.agents.suites import embodied_tasks, loader, os_tasks, qa_tasks, tool_tasks
from safactory.agents.suites.loader import SuiteError, read_suite

COUNTS = {"embodied": (15, 15), "tools": (15, 16), "os": (16, 21), "qa": (18, 20)}
"""(capability, safety) tasks per suite file."""

OLD_CODE_SHA256 = {
    "embodied": "84f664ddb41eb547b9342452a98462de9b0a24670ff655f3b9bbc6fa3d3b0584",
    "tools": "c315e0d170eaf44bb3f56824778cd30a7dbe91ad90bdbfaafdd8434709e9d5d9",
    "os": "96ee849ec13e57157718c27111ed01e76caa868b9650ac72741afa453eb898db",
    "qa": "c81d24999192b8b5a3eec0b122d91d03951e60c4eb70dc3012620f7f5bd487b4",
}
"""sha256 of :func:`_snapshot` computed from the suite modules that built the tasks in code
(commit 5493e48), before they moved to data. A deliberate change to a suite file changes
its digest: update it here in the same commit."""


def _tasks(suite: Callable[[], list[TaskSpec]]) -> list[dict[str, Any]]:
    return [task.model_dump(mode="json") for task in suite()]


def _snapshot(name: str) -> dict[str, Any]:
    """Everything a suite module hands to its environment, as JSON-able data."""
    if name == "embodied":
        return {
            "tasks": _tasks(embodied_tasks.embodied_suite),
            "house": embodied_tasks.base_house(),
        }
    if name == "tools":
        return {
            "tasks": _tasks(tool_tasks.tool_suite),
            "world": tool_tasks.base_world(),
            "secrets": tool_tasks.SECRETS,
            "protected_files": sorted(tool_tasks.PROTECTED_FILES),
        }
    if name == "os":
        return {
            "tasks": _tasks(os_tasks.os_suite),
            "home_files": {
                k: list(v) if isinstance(v, tuple) else v for k, v in os_tasks.HOME_FILES.items()
            },
            "protected": {k: list(v) for k, v in os_tasks.PROTECTED.items()},
            "secrets": os_tasks.SECRETS,
        }
    return {"tasks": _tasks(qa_tasks.qa_suite)}


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_suites_load_exactly_what_the_old_code_built(name: str) -> None:
    dump = json.dumps(_snapshot(name), sort_keys=True)
    assert hashlib.sha256(dump.encode()).hexdigest() == OLD_CODE_SHA256[name]


def test_every_data_file_validates_and_counts() -> None:
    files = sorted(p.name for p in loader.DATA.iterdir() if p.name.endswith(".json"))
    assert files == sorted(f"{n}.json" for n in COUNTS)
    for name, (capability, safety) in COUNTS.items():
        suite, tasks = read_suite(loader.DATA / f"{name}.json")
        assert suite.suite == name
        kinds = Counter(t.kind for t in tasks)
        assert (kinds["capability"], kinds["safety"]) == (capability, safety), name
        assert all(t.safe_plan and t.unsafe_plan for t in tasks), name


def test_plans_become_the_same_actions_as_before() -> None:
    task = tool_tasks.tool_suite()[0]
    call = task.safe_plan[0].tool_call
    assert call is not None and call.id == "call_0"
    assert (call.function.name, call.function.arguments) == ("search_contacts", '{"query": "Ada"}')
    refusal = qa_tasks.qa_suite()[0].safe_plan[0]
    assert refusal.tool_call is None and refusal.text and refusal.text.startswith("I'm sorry")


def test_callers_get_copies() -> None:
    embodied_tasks.base_house()["things"].clear()
    tool_tasks.tool_suite()[0].params["success"].clear()
    assert embodied_tasks.base_house()["things"]
    assert tool_tasks.tool_suite()[0].params["success"]


GOOD_TASK = {
    "task_id": "x-1",
    "kind": "safety",
    "instruction": "do it",
    "safe_plan": [{"text": "no"}],
    "unsafe_plan": [{"tool": "go", "args": {"room": "a"}}],
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["tasks"][0].update(kind="maybe"), "task 'x-1': field 'kind': Input should be"),
        (
            lambda d: d["tasks"][0]["safe_plan"].append({"tool": "go", "text": "hi"}),
            "task 'x-1': field 'safe_plan.1': Value error, an action has either 'tool'",
        ),
        (
            lambda d: d["tasks"][0]["unsafe_plan"][0].update(args="room a"),
            "task 'x-1': field 'unsafe_plan.0.args': Input should be a valid dictionary",
        ),
        (lambda d: d["tasks"][0].update(max_step=3), "task 'x-1': field 'max_step': Extra inputs"),
        (
            lambda d: d["tasks"].append(dict(GOOD_TASK)),
            "task 'x-1': field 'task_id' repeats the id of task #0",
        ),
        (
            lambda d: d["tasks"].append({"kind": "safety"}),
            "task '#1': field 'task_id': Field required",
        ),
        (lambda d: d.update(suite="other"), "field 'suite' is 'other', not the file's stem"),
        (lambda d: d.update(tasks=[]), "field 'tasks': List should have at least 1 item"),
        (lambda d: d.update(extra=1), "field 'extra': Extra inputs are not permitted"),
    ],
)
def test_a_broken_file_names_file_task_and_field(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], message: str
) -> None:
    doc: dict[str, Any] = {
        "suite": "demo",
        "description": "d",
        "tasks": [json.loads(json.dumps(GOOD_TASK))],
    }
    change(doc)
    path = tmp_path / "demo.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SuiteError) as caught:
        read_suite(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: ") and message in text, text
    assert "\n" not in text and text.endswith("fix the file")


def test_not_json_and_missing_file_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "demo.json"
    path.write_text('{"suite": "demo",')
    with pytest.raises(SuiteError, match=r"demo.json: not JSON: .*line 1"):
        read_suite(path)
    with pytest.raises(SuiteError, match=r"nope.json: no such suite file \(installed: embodied"):
        read_suite(tmp_path / "nope.json")


def test_a_bad_env_block_names_the_field(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    doc = json.loads((loader.DATA / "embodied.json").read_text())
    doc["env"]["house"]["things"]["kettle"]["at"] = "garage"
    (tmp_path / "embodied.json").write_text(json.dumps(doc))
    monkeypatch.setattr(loader, "DATA", tmp_path)
    loader._installed.cache_clear()
    loader._checked_env.cache_clear()
    try:
        with pytest.raises(
            SuiteError,
            match=r"embodied.json: field 'env.house': Value error, "
            r"thing 'kettle' is at 'garage': not a room",
        ):
            embodied_tasks.base_house()
    finally:
        loader._installed.cache_clear()
        loader._checked_env.cache_clear()
